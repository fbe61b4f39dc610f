"""Log-probabilities (and entropy) of the tokens the model sampled, under given weights.

Only the model's own tokens need vocabulary logits: in a multi-turn episode most tokens are
environment text, so the lm head runs on the selected positions only, in chunks.
"""

from __future__ import annotations

import torch

from agenttrain.rl.batch import EpisodeBatch
from agenttrain.rl.losses import entropy_from_logits

HEAD_CHUNK = 1024


def response_logprobs(
    model: torch.nn.Module,
    batch: EpisodeBatch,
    temperature: float,
    with_entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[rows, response width] log-probs (and entropies) at model tokens, zero elsewhere.

    Logits are divided by `temperature` as during sampling (verl does the same).
    """
    decoder = model.get_decoder()
    head = model.get_output_embeddings()
    hidden = decoder(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
    hidden = hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    positions = batch.response_start[rows] + cols - 1  # logits at p-1 predict the token at p
    selected = hidden[rows, positions]
    targets = batch.responses[rows, cols]
    scale = temperature if temperature > 0 else 1.0
    logprob_chunks, entropy_chunks = [], []
    for start in range(0, len(targets), HEAD_CHUNK):
        logits = head(selected[start : start + HEAD_CHUNK]).float() / scale
        logprob_chunks.append(
            torch.log_softmax(logits, dim=-1).gather(-1, targets[start : start + HEAD_CHUNK, None])[
                :, 0
            ]
        )
        if with_entropy:
            entropy_chunks.append(entropy_from_logits(logits))
    shape = batch.response_mask.shape
    logprobs = torch.zeros(shape, device=hidden.device)
    logprobs = logprobs.index_put(
        (rows, cols),
        torch.cat(logprob_chunks) if logprob_chunks else torch.zeros(0, device=hidden.device),
    )
    entropy = None
    if with_entropy:
        entropy = torch.zeros(shape, device=hidden.device).index_put(
            (rows, cols),
            torch.cat(entropy_chunks) if entropy_chunks else torch.zeros(0, device=hidden.device),
        )
    return logprobs, entropy
