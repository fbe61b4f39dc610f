"""Episodes as training tensors, and their split into micro-batches by token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agenttrain.rollout.trajectory import Trajectory


@dataclass
class EpisodeBatch:
    """Episodes as tensors: their full sequences in `input_ids`, plus their response part.

    Padded, each episode is a row of its own; packed, the episodes lie end to end in one row
    with positions restarting at each (no padding; transformers keeps packed sequences from
    attending to each other when it sees restarting `position_ids` and no attention mask).
    Episode b's sequence starts at `offset[b]` of row `sequence_row[b]`; its response position
    j is `response_start[b] + j` within it; only positions with `response_mask` 1 (tokens the
    model sampled) carry loss.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    response_start: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor
    sequence_row: torch.Tensor
    offset: torch.Tensor
    position_ids: torch.Tensor | None = None

    @property
    def size(self) -> int:
        """Episodes in the batch."""
        return self.response_mask.shape[0]


def collate(
    trajectories: Sequence[Trajectory], pad_id: int, device: torch.device, packing: bool = False
) -> EpisodeBatch:
    sequences = [t.prompt_ids + t.response_ids for t in trajectories]
    response_width = max(len(t.response_ids) for t in trajectories)
    episodes = len(trajectories)
    responses = torch.full((episodes, response_width), pad_id, dtype=torch.long)
    response_mask = torch.zeros(episodes, response_width)
    for row, trajectory in enumerate(trajectories):
        count = len(trajectory.response_ids)
        responses[row, :count] = torch.tensor(trajectory.response_ids)
        response_mask[row, :count] = torch.tensor(trajectory.response_mask, dtype=torch.float)
    starts = torch.tensor([len(t.prompt_ids) for t in trajectories], dtype=torch.long)
    if packing:
        lengths = torch.tensor([len(s) for s in sequences])
        input_ids = torch.tensor([token for s in sequences for token in s])[None]
        position_ids = torch.cat([torch.arange(len(s)) for s in sequences])[None]
        layout = (torch.zeros(episodes, dtype=torch.long), torch.cumsum(lengths, 0) - lengths)
        attention, positions = None, position_ids.to(device)
    else:
        width = max(len(s) for s in sequences)
        input_ids = torch.full((episodes, width), pad_id, dtype=torch.long)
        attention = torch.zeros(episodes, width, dtype=torch.long)
        for row, sequence in enumerate(sequences):
            input_ids[row, : len(sequence)] = torch.tensor(sequence)
            attention[row, : len(sequence)] = 1
        layout = (torch.arange(episodes), torch.zeros(episodes, dtype=torch.long))
        attention, positions = attention.to(device), None
    return EpisodeBatch(
        input_ids.to(device),
        attention,
        starts.to(device),
        responses.to(device),
        response_mask.to(device),
        layout[0].to(device),
        layout[1].to(device),
        positions,
    )


def pad_responses(values: Sequence[Sequence[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(values), width)
    for row, row_values in enumerate(values):
        out[row, : len(row_values)] = torch.tensor(list(row_values), dtype=torch.float)
    return out


def micro_batches(lengths: Sequence[int], token_budget: int) -> list[list[int]]:
    """Consecutive indices grouped so that each group's tokens stay within `token_budget`
    (a longer episode gets a group of its own). Order is kept: results are deterministic."""
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for index, length in enumerate(lengths):
        if current and used + length > token_budget:
            groups.append(current)
            current, used = [], 0
        current.append(index)
        used += length
    if current:
        groups.append(current)
    return groups
