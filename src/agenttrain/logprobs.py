"""Log-probabilities (and entropy) of chosen tokens under given weights, for both trainers.

Only the tokens that carry loss need vocabulary logits: in a multi-turn episode most tokens are
environment text, so the lm head runs on the selected positions only, in chunks.
"""

from __future__ import annotations

import torch

HEAD_CHUNK = 1024


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) along the last axis: logsumexp(z) - Σ p·z."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(dim=-1)


def logprobs_at(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None,
    rows: torch.Tensor,
    positions: torch.Tensor,
    targets: torch.Tensor,
    *,
    position_ids: torch.Tensor | None = None,
    temperature: float = 1.0,
    with_entropy: bool = False,
    entropy_grad: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(targets[i] | sequence `rows[i]` up to `positions[i]`), for each i ([N] tensors).

    `attention_mask` may be 2D (padding), 4D (packed sequences, block-diagonal), or None with
    `position_ids` restarting at each packed sequence (transformers masks them apart).
    `entropy_grad=False` computes the entropy outside autograd: for a metric, its softmax over
    the vocabulary is not kept for the backward pass.
    """
    decoder = model.get_decoder()
    head = model.get_output_embeddings()
    hidden = decoder(  # no cache: training passes never reuse one (and packing needs none)
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        use_cache=False,
    )
    hidden = hidden.last_hidden_state if hasattr(hidden, "last_hidden_state") else hidden[0]
    selected = hidden[rows, positions]
    scale = temperature if temperature > 0 else 1.0
    logprobs, entropies = [], []
    for start in range(0, len(targets), HEAD_CHUNK):
        logits = head(selected[start : start + HEAD_CHUNK]).float() / scale
        chunk_targets = targets[start : start + HEAD_CHUNK, None]
        logprobs.append(torch.log_softmax(logits, dim=-1).gather(-1, chunk_targets)[:, 0])
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                entropies.append(entropy_from_logits(logits))
    empty = torch.zeros(0, device=hidden.device)
    entropy = (torch.cat(entropies) if entropies else empty) if with_entropy else None
    return (torch.cat(logprobs) if logprobs else empty), entropy
