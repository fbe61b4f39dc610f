"""Token-mean cross-entropy on examples' trained tokens, micro-batch by micro-batch.

One place for the supervised loss: `agenttrain sft` trains on it, and GRPO's demonstration
loss (`actor.demo_loss`) adds it to the policy update.
"""

from __future__ import annotations

import torch

from agenttrain.logprobs import logprobs_at
from agenttrain.modeling import ModelConfig, autocast
from agenttrain.sft.batching import MicroBatch, collate, micro_batches
from agenttrain.sft.tokenize import Example


def target_logprobs(model: torch.nn.Module, batch: MicroBatch) -> torch.Tensor:
    """Log-probabilities of a micro-batch's trained tokens, one per token, in batch order."""
    logprobs, _ = logprobs_at(
        model,
        batch.input_ids,
        batch.attention_mask,
        batch.rows,
        batch.positions,
        batch.targets,
        position_ids=batch.position_ids,
    )
    return logprobs


def nll_sums(
    model: torch.nn.Module,
    examples: list[Example],
    model_config: ModelConfig,
    micro_batch_tokens: int,
    packing: bool,
    pad_id: int,
    backward_scale: float | None = None,
) -> tuple[float, int]:
    """(summed token NLL, trained tokens) over `examples`.

    With `backward_scale`, gradients of `backward_scale` x the token-mean NLL over all the
    examples accumulate in the model (the caller zeroes and steps the optimizer); without it,
    nothing is differentiated.
    """
    device = torch.device(model_config.device)
    total_tokens = sum(e.trained_tokens for e in examples)
    lengths = {i: len(e.ids) for i, e in enumerate(examples)}
    loss_sum = 0.0
    train = backward_scale is not None
    for group in micro_batches(lengths, micro_batch_tokens, packing):
        batch = collate([examples[i] for i in group], packing, pad_id, device)
        if batch.trained_tokens == 0:
            continue
        with torch.set_grad_enabled(train), autocast(model_config):
            nll = -target_logprobs(model, batch).sum()
        if backward_scale is not None:
            (nll * (backward_scale / total_tokens)).backward()
        loss_sum += float(nll.detach())
    return loss_sum, total_tokens
