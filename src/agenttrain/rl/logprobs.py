"""Log-probabilities (and entropy) of an episode batch's response tokens."""

from __future__ import annotations

import torch

from agenttrain.logprobs import logprobs_at
from agenttrain.rl.batch import EpisodeBatch


def response_logprobs(
    model: torch.nn.Module,
    batch: EpisodeBatch,
    temperature: float,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """[rows, response width] log-probs (and entropies) at model tokens, zero elsewhere.

    Logits are divided by `temperature` as during sampling (verl does the same). With
    `entropy_grad=False` the entropies carry no gradient (a metric, not a loss term).
    """
    rows, cols = batch.response_mask.nonzero(as_tuple=True)
    # logits at p-1 predict the token at p
    positions = batch.offset[rows] + batch.response_start[rows] + cols - 1
    values, entropy = logprobs_at(
        model,
        batch.input_ids,
        batch.attention_mask,
        batch.sequence_row[rows],
        positions,
        batch.responses[rows, cols],
        position_ids=batch.position_ids,
        temperature=temperature,
        with_entropy=with_entropy,
        entropy_grad=entropy_grad,
    )
    shape, device = batch.response_mask.shape, values.device
    logprobs = torch.zeros(shape, device=device).index_put((rows, cols), values)
    if entropy is not None:
        entropy = torch.zeros(shape, device=device).index_put((rows, cols), entropy)
    return logprobs, entropy
