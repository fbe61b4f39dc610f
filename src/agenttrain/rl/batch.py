"""Episodes as training tensors, and their split into micro-batches by token budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from agenttrain.rollout.trajectory import Trajectory


@dataclass
class EpisodeBatch:
    """Rows are episodes: full sequences right-padded, plus their response part.

    Response position j of row b is sequence position `response_start[b] + j`; only positions
    with `response_mask` 1 (tokens the model sampled) carry loss.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_start: torch.Tensor
    responses: torch.Tensor
    response_mask: torch.Tensor

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]


def collate(trajectories: Sequence[Trajectory], pad_id: int, device: torch.device) -> EpisodeBatch:
    width = max(len(t.prompt_ids) + len(t.response_ids) for t in trajectories)
    response_width = max(len(t.response_ids) for t in trajectories)
    rows = len(trajectories)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros(rows, width, dtype=torch.long)
    responses = torch.full((rows, response_width), pad_id, dtype=torch.long)
    response_mask = torch.zeros(rows, response_width)
    starts = torch.zeros(rows, dtype=torch.long)
    for row, trajectory in enumerate(trajectories):
        sequence = trajectory.prompt_ids + trajectory.response_ids
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        attention[row, : len(sequence)] = 1
        count = len(trajectory.response_ids)
        responses[row, :count] = torch.tensor(trajectory.response_ids)
        response_mask[row, :count] = torch.tensor(trajectory.response_mask, dtype=torch.float)
        starts[row] = len(trajectory.prompt_ids)
    return EpisodeBatch(
        input_ids.to(device),
        attention.to(device),
        starts.to(device),
        responses.to(device),
        response_mask.to(device),
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
