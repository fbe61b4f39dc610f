"""Steps, micro-batches and tensors for SFT: token budgets, padding or packing.

A step is a run of consecutive examples of a seeded per-epoch shuffle whose tokens fit
`batch_tokens` (fractional epochs allowed); a micro-batch is what fits `micro_batch_tokens`
at once: padded rows (rows × longest) or, with packing, conversations laid end to end in
one row with positions restarting at each conversation (transformers then keeps them from
attending to one another: block-diagonal attention without a mask of our own).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from agenttrain.sft.tokenize import Example


def plan_steps(lengths: list[int], epochs: float, batch_tokens: int, seed: int) -> list[list[int]]:
    """Example indices of every step of the run (a pure function of its arguments); a step
    never spans two epochs, and a fractional last epoch takes the head of its shuffle."""
    count = len(lengths)
    steps: list[list[int]] = []
    remaining = max(1, math.ceil(epochs * count)) if count else 0
    epoch = 0
    while remaining > 0:
        order = list(range(count))
        random.Random(f"{seed}/sft/epoch/{epoch}").shuffle(order)
        current: list[int] = []
        used = 0
        for index in order[:remaining]:
            if current and used + lengths[index] > batch_tokens:
                steps.append(current)
                current, used = [], 0
            current.append(index)
            used += lengths[index]
        steps.append(current)
        remaining -= min(remaining, count)
        epoch += 1
    return steps


def micro_batches(lengths: dict[int, int], budget: int, packing: bool) -> list[list[int]]:
    """Groups of example indices, each within `budget` tokens (padded cost unless packing);
    an example longer than the budget is a micro-batch of its own."""
    order = sorted(lengths, key=lambda i: lengths[i], reverse=True)
    groups: list[list[int]] = []
    current: list[int] = []
    for index in order:
        if packing:
            cost = sum(lengths[i] for i in current) + lengths[index]
        else:  # sorted longest first: the first member sets the padded width
            width = lengths[current[0]] if current else lengths[index]
            cost = width * (len(current) + 1)
        if current and cost > budget:
            groups.append(current)
            current = []
        current.append(index)
    if current:
        groups.append(current)
    return groups


@dataclass
class MicroBatch:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    """[rows, width] padding mask; None when packed (`position_ids` restart at each example)."""
    position_ids: torch.Tensor
    rows: torch.Tensor
    positions: torch.Tensor
    """Where the logits that predict each trained token are (one before the token)."""
    targets: torch.Tensor

    @property
    def trained_tokens(self) -> int:
        return int(self.targets.numel())


def collate(
    examples: list[Example], packing: bool, pad_id: int, device: torch.device
) -> MicroBatch:
    """Tensors of one micro-batch: one packed row, or one padded row per example."""
    layout = [[example] for example in examples] if not packing else [examples]
    width = max(sum(len(e.ids) for e in row) for row in layout)
    input_ids = torch.full((len(layout), width), pad_id, dtype=torch.long)
    position_ids = torch.zeros((len(layout), width), dtype=torch.long)
    present = torch.zeros((len(layout), width), dtype=torch.bool)
    rows, positions, targets = [], [], []
    for row, members in enumerate(layout):
        offset = 0
        for example in members:
            size = len(example.ids)
            input_ids[row, offset : offset + size] = torch.tensor(example.ids)
            position_ids[row, offset : offset + size] = torch.arange(size)
            present[row, offset : offset + size] = True
            for index in range(1, size):
                if example.mask[index]:
                    rows.append(row)
                    positions.append(offset + index - 1)
                    targets.append(example.ids[index])
            offset += size
    # packed: no mask; transformers keeps the conversations apart from the restarting positions
    attention = None if packing else present.long().to(device)
    return MicroBatch(
        input_ids.to(device),
        attention,
        position_ids.to(device),
        torch.tensor(rows, dtype=torch.long, device=device),
        torch.tensor(positions, dtype=torch.long, device=device),
        torch.tensor(targets, dtype=torch.long, device=device),
    )
