"""Batched generation for Llama-family models (Llama, Qwen2/3, Mistral) with reused KV caches.

Why not `model.generate`: its cache grows by concatenation, which on CPU took 83% of a
batch-32 decode step (profiled), and it recomputes the whole multi-turn context on every
call. Here every episode keeps its own keys/values between turns (so a turn computes only
its new tokens), the new tokens of all rows are packed into one [tokens, hidden] tensor for
the weight matmuls (no padding anywhere), and attention runs per row against that row's
cache, with grouped-query heads stacked instead of repeating keys/values. The layers are
the model's own modules (so LoRA adapters apply); only the wiring between them is ours,
and a test checks it against the model's own forward pass. On a GPU, where a kernel launch
costs more than the arithmetic it saves, a prefill pass attends all its rows in one padded
call instead (`batched_rows`).

Keys/values are kept in the weights' precision (bf16 where the CPU has native bf16): decode
attention reads every row's cache each step, so its bytes are what a step waits for.

Decode steps also check guesses (`draft_tokens`): each row's next tokens looked up in its own
context (`policy/lookup.py`) run through the model with its newest token, and sampling keeps
the leading guesses it accepts (speculative sampling), so one step yields several tokens
where replies repeat their context, with every row's tokens distributed as plain sampling's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from agenttrain.policy.base import Generation, GenerationRequest, RequestStream, SamplingParams
from agenttrain.policy.lookup import PromptLookup
from agenttrain.policy.sampling import draft_odds, sample

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3", "mistral")
PREFILL_TOKENS = 2048
"""At most this many new tokens go through the model in one pass (bounds activation memory)."""
DEVICE_PREFILL_TOKENS = 16384
"""The same bound on an accelerator, counted padded (rows x longest row): rows attend in one
call there, since per-row calls cost a launch each (256 rows x 30 layers per pass)."""
MIN_SHARED_PREFIX = 16
"""Prompts sharing at least this many leading tokens compute them once (copied, not re-run)."""
MIN_SHARED_ATTENTION = 64
"""Decode steps attend a prefix shared by every row once when it is at least this long."""
JOIN_EVERY = 4
"""Decode steps between looks for arrived requests while rows are live: each join is a
prefill pass of its own, so requests that arrive a few steps apart are run together."""
DRAFT_TOKENS = 6
"""Guessed tokens checked per row and decode step (0: off). On 2 CPU cores, TextCraft evaluations
generated 1.55-1.7x the tokens a second with 6 as without, about as many as with 8
(docs/benchmarks.md, "Guessed tokens")."""


def supports(model: torch.nn.Module) -> bool:
    """Whether the fast path knows this architecture's wiring."""
    config = model.config
    if config.model_type not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(config, "use_sliding_window", False):
        return False
    return not (config.model_type == "mistral" and getattr(config, "sliding_window", None))


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Arena:
    """Keys/values of up to `slots` episodes, per layer [slots, kv_heads, capacity, head_dim].

    Each episode owns a slot and its tokens sit at columns [0, length) of that slot, written
    in place; nothing is copied between calls. Slots of finished or idle episodes are reused
    (least recently used first); the capacity grows by doubling when a slot needs more room.
    """

    def __init__(
        self,
        layers: int,
        heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
        max_slots: int,
        capacity: int = 1024,
    ) -> None:
        shape = (0, heads, capacity, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(layers)]
        self.max_slots = max_slots
        self.tokens: list[list[int]] = []
        self.keys: list[str | None] = []
        self.slot_of: dict[str, int] = {}
        self._used_at: list[int] = []
        self._clock = 0
        self.version = 0
        """Bumped whenever the tensors are reallocated (more slots or columns)."""

    @property
    def slots(self) -> int:
        return len(self.tokens)

    @property
    def capacity(self) -> int:
        return self.k[0].shape[2]

    @property
    def nbytes(self) -> int:
        return 2 * sum(k.numel() * k.element_size() for k in self.k)

    def length(self, slot: int) -> int:
        return len(self.tokens[slot])

    def reserve(self, columns: int) -> None:
        if columns <= self.capacity:
            return
        capacity = max(columns, 2 * self.capacity)
        self.version += 1
        for cache in (self.k, self.v):
            for layer, old in enumerate(cache):
                grown = old.new_zeros((old.shape[0], old.shape[1], capacity, old.shape[3]))
                grown[:, :, : old.shape[2]] = old
                cache[layer] = grown

    def _grow(self) -> None:
        """Add slots (doubling, up to `max_slots`): memory follows the episodes in flight."""
        old = self.slots
        new = min(self.max_slots, max(1, 2 * old))
        self.version += 1
        for cache in (self.k, self.v):
            for layer, tensor in enumerate(cache):
                grown = tensor.new_zeros((new, *tensor.shape[1:]))
                grown[:old] = tensor
                cache[layer] = grown
        self.tokens += [[] for _ in range(new - old)]
        self.keys += [None] * (new - old)
        self._used_at += [0] * (new - old)

    def empty(self) -> None:
        """Drop every slot and its memory (slots grow back as episodes arrive)."""
        self.version += 1
        for cache in (self.k, self.v):
            for layer, tensor in enumerate(cache):
                cache[layer] = tensor.new_zeros((0, *tensor.shape[1:]))
        self.tokens, self.keys, self._used_at = [], [], []
        self.slot_of.clear()

    def touch(self, slot: int) -> None:
        self._clock += 1
        self._used_at[slot] = self._clock

    def acquire(self, key: str | None, busy: set[int]) -> int:
        """A slot for `key`: its own, else a free one, else the least recently used idle one."""
        if key is not None and key in self.slot_of:
            return self.slot_of[key]
        candidates = [s for s in range(self.slots) if s not in busy]
        free = [s for s in candidates if self.keys[s] is None and not self.tokens[s]]
        if not free and self.slots < self.max_slots:
            self._grow()
            return self.acquire(key, busy)
        if not candidates:
            raise RuntimeError(f"more rows in one call than the {self.max_slots} cache slots")
        slot = free[0] if free else min(candidates, key=lambda s: self._used_at[s])
        self.release(slot)
        if key is not None:
            self.keys[slot] = key
            self.slot_of[key] = slot
        return slot

    def release(self, slot: int) -> None:
        key = self.keys[slot]
        if key is not None:
            del self.slot_of[key]
        self.keys[slot] = None
        self.tokens[slot] = []

    def copy_prefix(self, source: int, target: int, length: int) -> None:
        self.copy_prefixes([(source, target, length)], batched=False)

    def copy_prefixes(self, copies: Sequence[tuple[int, int, int]], batched: bool) -> None:
        """Seed each (source, target, length): target's first `length` columns from source's.

        `batched` (a GPU's choice): one indexed copy per layer over the longest length, not
        one per pair and layer (256 rows x 60 tensors were 15k launches). Columns a target
        receives past its own length are overwritten by its prefill or never attended: a
        slot's length is its token count. Targets must be distinct and must not be sources."""
        if not copies:
            return
        layers = [*self.k, *self.v]
        if not batched:  # plain slices: no gathered temporaries
            for layer in layers:
                for source, target, length in copies:
                    layer[target, :, :length] = layer[source, :, :length]
        else:
            device = layers[0].device
            sources = torch.tensor([source for source, _, _ in copies], device=device)
            targets = torch.tensor([target for _, target, _ in copies], device=device)
            longest = max(length for _, _, length in copies)
            for layer in layers:
                layer[targets, :, :longest] = layer[sources, :, :longest]
        for source, target, length in copies:
            self.tokens[target] = self.tokens[source][:length]

    def longest_prefix(self, tokens: Sequence[int], exclude: int) -> tuple[int | None, int]:
        best, best_length = None, 0
        for slot, cached in enumerate(self.tokens):
            if slot != exclude and cached:
                length = common_prefix_length(cached, tokens)
                if length > best_length:
                    best, best_length = slot, length
        return best, best_length


@dataclass
class _Work:
    request: GenerationRequest
    slot: int
    prompt: list[int]
    pending: list[int]
    """Prompt tokens not yet in the row's cache."""
    limit: int
    generator: torch.Generator | None
    handle: Any = None
    """Where the result goes (`RequestStream.deliver`)."""
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    lookup: PromptLookup | None = None
    """The row's context (prompt, then what it generated), indexed for draft guesses."""
    exclude: int | None = None
    """A guess sampling rejected for the next position: drawn from the rest of the
    distribution there, never this token."""


class _FixedBatch:
    """A `RequestStream` over a fixed list: `generate`'s batch, results in request order
    (more requests than slots join as earlier rows finish)."""

    def __init__(self, requests: Sequence[GenerationRequest]) -> None:
        self.waiting = list(enumerate(requests))
        self.done: dict[int, Generation] = {}

    def take(self, limit: int, idle: bool = False) -> list[tuple[GenerationRequest, Any]]:
        taken, self.waiting = self.waiting[:limit], self.waiting[limit:]
        return [(request, index) for index, request in taken]

    def deliver(self, handle: Any, generation: Generation) -> None:
        self.done[handle] = generation

    def results(self) -> list[Generation]:
        return [self.done[index] for index in range(len(self.done))]


class _PaddedRows:
    """A prefill pass's rows laid out for one attention call: row r's token i sits at
    (r, i) of a [rows, longest] grid; row r attends its slot's columns [0, start_r + i]."""

    def __init__(
        self,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int],
        groups: int,
        device: torch.device,
    ) -> None:
        counts_t = torch.tensor(list(counts), device=device)
        starts_t = torch.tensor(list(starts), device=device)
        first = slots[0]
        contiguous = list(slots) == list(range(first, first + len(slots)))
        self.slots: slice | torch.Tensor = (  # a slice reads the arena in place, no gather
            slice(first, first + len(slots))
            if contiguous
            else torch.tensor(list(slots), device=device)
        )
        self.count = len(slots)
        self.longest = max(counts)
        self.width = max(s + c for s, c in zip(starts, counts, strict=True))
        self.token_row = torch.repeat_interleave(torch.arange(len(slots), device=device), counts_t)
        firsts = torch.cumsum(counts_t, 0) - counts_t
        self.token_column = (
            torch.arange(int(counts_t.sum()), device=device) - firsts[self.token_row]
        )
        # Query (r, i) sees columns <= start_r + i; padding queries see a finite row too.
        last = starts_t[:, None] + torch.arange(self.longest, device=device)[None, :]
        visible = torch.arange(self.width, device=device)[None, None, :] <= last[:, :, None]
        # Queries are grouped (head group, position): the mask repeats per group.
        self.mask = visible.repeat(1, groups, 1)[:, None]


class LlamaFamilyDecoder:
    def __init__(
        self,
        model: torch.nn.Module,
        stop_ids: frozenset[int],
        pad_id: int,
        slots: int = 32,
        draft_tokens: int = DRAFT_TOKENS,
    ) -> None:
        self.model = model
        self.draft_tokens = draft_tokens
        self.stop_ids = stop_ids
        self.pad_id = pad_id
        decoder = model.get_decoder()
        self.embed = decoder.embed_tokens
        self.layers = decoder.layers
        self.norm = decoder.norm
        self.rotary = decoder.rotary_emb
        self.head = model.get_output_embeddings()
        config = model.config
        self.q_heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.groups = self.q_heads // self.kv_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.q_heads
        self.scaling = self.layers[0].self_attn.scaling
        self.device = self.embed.weight.device
        self.weight_dtype = self.embed.weight.dtype
        self.cache_dtype = self.weight_dtype
        """Keys/values in the precision the projections produce them in: a bf16 model's are
        bf16 values already, so an fp32 cache doubled the bytes every decode step reads
        (decode attention is the bulk of a CPU step at 32 rows) and the arena's memory."""
        self.split_attention = self.device.type != "cpu" or self.cache_dtype == torch.float32
        """Decode steps may attend a shared prefix once for all rows (`_attend_with_shared_prefix`,
        plain matrix products). Not on CPU in bf16: there those products are slower than the
        whole-row attention kernel they replace (docs/benchmarks.md)."""
        self.arena = Arena(
            len(self.layers), self.kv_heads, self.head_dim, self.cache_dtype, self.device, slots
        )
        self.batched_rows = self.device.type != "cpu"
        """Prefill attention: one call over every row of a pass (padded) instead of a call
        per row. Per-row calls waste no arithmetic, which is what counts on a CPU; on a GPU
        the launches are what counts."""
        self.prefill_tokens = DEVICE_PREFILL_TOKENS if self.batched_rows else PREFILL_TOKENS
        self._slots_lock = threading.Lock()
        """Slot bookkeeping (which episode owns which slot): a streaming call plans rows in
        its thread while episodes that ended release their slots from the engine's."""
        self.shared_prefix = 0
        """Columns [0, shared_prefix) hold the same tokens in every row of the current call:
        decode steps attend them once for all rows (set per call, 0 = off)."""
        self.stats = {
            "prefill_tokens": 0,
            "copied_prefix_tokens": 0,
            "shared_attention_steps": 0,
            "joined_rows": 0,
            "drafted_tokens": 0,
            "accepted_tokens": 0,
        }
        """Counters a benchmark or test can read: prompt tokens run through the model, prompt
        tokens copied from another row instead, decode steps that attended a shared prefix,
        rows that joined a batch while others were decoding (continuous batching), guessed
        tokens checked and kept."""

    # -- the forward pass ---------------------------------------------------------------

    def forward(
        self, slots: Sequence[int], tokens: Sequence[Sequence[int]], every_token: bool = False
    ) -> torch.Tensor:
        """Append `tokens[i]` to slot `slots[i]`; returns the hidden state after each row's
        last token, [rows, hidden] (`every_token`: after each token, [tokens, hidden])."""
        arena = self.arena
        counts = [len(t) for t in tokens]
        starts = [arena.length(s) for s in slots]
        arena.reserve(max(s + c for s, c in zip(starts, counts, strict=True)))
        device = self.device
        ids = torch.tensor([t for row in tokens for t in row], device=device)
        positions = torch.cat(
            [torch.arange(s, s + c, device=device) for s, c in zip(starts, counts, strict=True)]
        )
        slot_index = torch.repeat_interleave(
            torch.tensor(list(slots), device=device), torch.tensor(counts, device=device)
        )
        # One call over all slots pays for idle ones too: worth it when most slots step.
        all_slots = all(c == 1 for c in counts) and 2 * len(slots) >= arena.slots
        slot_mask = self._slot_mask(slots, [s + 1 for s in starts]) if all_slots else None
        attend_rows = None if all_slots else self._row_attention(slots, starts, counts)
        x = self.embed(ids)
        cos, sin = self.rotary(x[None], positions[None])
        cos, sin = cos[0], sin[0]
        for index in range(len(self.layers)):
            layer, keys, values = self.layers[index], arena.k[index], arena.v[index]
            q = self._project(layer, keys, values, x, cos, sin, slot_index, positions)
            if attend_rows is None:
                out = self._attend_slots(q, index, slots, slot_mask)
            else:
                out = attend_rows(q, index)
            x = self._finish_layer(layer, x, out)
        for slot, row_tokens in zip(slots, tokens, strict=True):
            arena.tokens[slot].extend(row_tokens)
            arena.touch(slot)
        if every_token:
            return self.norm(x)
        last = torch.tensor(counts, device=device).cumsum(0) - 1
        return self.norm(x[last])

    def _project(
        self,
        layer: torch.nn.Module,
        keys: torch.Tensor,
        values: torch.Tensor,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        slots: torch.Tensor,
        columns: torch.Tensor,
    ) -> torch.Tensor:
        """`layer`'s queries [rows, heads, head_dim] for the rows of `x`; their keys and values
        are written into the layer's arena tensors at (slots[i], columns[i]). Everything is an
        argument, so one compiled version serves every layer."""
        attn = layer.self_attn
        rows = x.shape[0]
        h = layer.input_layernorm(x)
        q = attn.q_proj(h).view(rows, self.q_heads, self.head_dim)
        k = attn.k_proj(h).view(rows, self.kv_heads, self.head_dim)
        v = attn.v_proj(h).view(rows, self.kv_heads, self.head_dim)
        if hasattr(attn, "q_norm"):  # Qwen3 normalises queries and keys per head
            q, k = attn.q_norm(q), attn.k_norm(k)
        q, k = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1)
        keys[slots, :, columns] = k.to(self.cache_dtype)
        values[slots, :, columns] = v.to(self.cache_dtype)
        return q

    def _finish_layer(
        self, layer: torch.nn.Module, x: torch.Tensor, attended: torch.Tensor
    ) -> torch.Tensor:
        """The residual stream after `layer`: attention output projected, then the MLP."""
        projected = layer.self_attn.o_proj(attended.reshape(x.shape[0], -1).to(self.weight_dtype))
        x = x + projected
        return x + layer.mlp(layer.post_attention_layernorm(x))

    def _causal_mask(self, start: int, count: int) -> torch.Tensor:
        keys = torch.arange(start + count, device=self.device)
        queries = start + torch.arange(count, device=self.device)
        return (keys[None, :] <= queries[:, None]).repeat(self.groups, 1)

    def _slot_mask(self, slots: Sequence[int], lengths: Sequence[int]) -> tuple[torch.Tensor, int]:
        """[slots, 1, 1, width] mask of the columns each slot attends to in a decode step;
        slots not in this step see column 0 only (their output is discarded)."""
        visible = torch.ones(self.arena.slots, dtype=torch.long, device=self.device)
        visible[torch.tensor(list(slots), device=self.device)] = torch.tensor(
            list(lengths), device=self.device
        )
        width = max(lengths)
        mask = torch.arange(width, device=self.device)[None, :] < visible[:, None]
        return mask[:, None, None, :], width

    def _attend_slots(
        self, q: torch.Tensor, layer: int, slots: Sequence[int], slot_mask: tuple[torch.Tensor, int]
    ) -> torch.Tensor:
        """One new token per row: a single attention call over every slot of the arena.

        The query heads sharing a key/value head are stacked along the query axis.
        """
        mask, width = slot_mask
        index = torch.tensor(list(slots), device=self.device)
        grouped = q.view(len(slots), self.kv_heads, self.groups, self.head_dim)
        queries = grouped.new_zeros(
            (self.arena.slots, self.kv_heads, self.groups, self.head_dim), dtype=self.cache_dtype
        )
        queries[index] = grouped.to(self.cache_dtype)
        if self.shared_prefix:
            out = self._attend_with_shared_prefix(queries, layer, slots[0], mask, width)
        else:
            out = torch.nn.functional.scaled_dot_product_attention(
                queries,
                self.arena.k[layer][:, :, :width],
                self.arena.v[layer][:, :, :width],
                attn_mask=mask,
                scale=self.scaling,
            )
        return out[index].reshape(len(slots), self.q_heads, self.head_dim)

    def _attend_with_shared_prefix(
        self, queries: torch.Tensor, layer: int, owner: int, mask: torch.Tensor, width: int
    ) -> torch.Tensor:
        """Attention split at the shared prefix: every row's queries against one copy of the
        prefix (a single matrix product, read once instead of once per row), each row against
        its own remaining columns, merged with a common softmax maximum.

        Memory traffic, not arithmetic, bounds decode attention on CPU, so reading the
        instructions' keys/values once per step instead of once per episode is the saving.
        queries [slots, kv_heads, groups, head_dim]; returns the same shape.
        """
        shared = self.shared_prefix
        keys, values = self.arena.k[layer], self.arena.v[layer]
        slots = queries.shape[0]
        # Prefix: [kv_heads, slots * groups, head_dim] @ [kv_heads, head_dim, shared].
        stacked = queries.transpose(0, 1).reshape(self.kv_heads, slots * self.groups, -1)
        prefix_scores = torch.matmul(stacked, keys[owner, :, :shared].transpose(-1, -2))
        prefix_scores = prefix_scores.mul_(self.scaling).view(
            self.kv_heads, slots, self.groups, shared
        )
        # Each row's own columns: [slots, kv_heads, groups, width - shared].
        own_scores = torch.matmul(queries, keys[:, :, shared:width].transpose(-1, -2))
        own_scores = own_scores.mul_(self.scaling).masked_fill_(
            ~mask[..., shared:width], float("-inf")
        )
        peak = torch.maximum(
            prefix_scores.amax(-1, keepdim=True).transpose(0, 1), own_scores.amax(-1, keepdim=True)
        )  # finite: the prefix is never masked
        prefix_weights = (prefix_scores - peak.transpose(0, 1)).exp_()
        own_weights = (own_scores - peak).exp_()
        total = prefix_weights.sum(-1, keepdim=True).transpose(0, 1) + own_weights.sum(
            -1, keepdim=True
        )
        prefix_out = torch.matmul(
            prefix_weights.view(self.kv_heads, slots * self.groups, shared),
            values[owner, :, :shared],
        ).view(self.kv_heads, slots, self.groups, -1)
        own_out = torch.matmul(own_weights, values[:, :, shared:width])
        return (prefix_out.transpose(0, 1) + own_out) / total

    def _row_attention(
        self, slots: Sequence[int], starts: Sequence[int], counts: Sequence[int]
    ) -> Callable[[torch.Tensor, int], torch.Tensor]:
        """Attention of a pass's rows, each against its own slot: (queries, layer) -> output.
        Masks and index tensors are built once per pass, not once per layer."""
        if self.batched_rows and len(slots) > 1:
            layout = _PaddedRows(slots, starts, counts, self.groups, self.device)
            return lambda q, layer: self._attend_padded_rows(q, layer, layout)
        masks = [
            None if c == 1 else self._causal_mask(s, c) for s, c in zip(starts, counts, strict=True)
        ]
        return lambda q, layer: self._attend_rows(q, layer, slots, starts, counts, masks)

    def _attend_rows(
        self,
        q: torch.Tensor,
        layer: int,
        slots: Sequence[int],
        starts: Sequence[int],
        counts: Sequence[int],
        masks: Sequence[torch.Tensor | None],
    ) -> torch.Tensor:
        """Each row against its own slot, one call per row (prefill, or few rows stepping)."""
        out = torch.empty(
            (q.shape[0], self.q_heads, self.head_dim), dtype=self.cache_dtype, device=self.device
        )
        offset = 0
        for slot, start, count, mask in zip(slots, starts, counts, masks, strict=True):
            end = offset + count
            grouped = (
                q[offset:end]
                .transpose(0, 1)
                .reshape(self.kv_heads, self.groups * count, self.head_dim)
            )
            rows = torch.nn.functional.scaled_dot_product_attention(
                grouped.to(self.cache_dtype)[None],
                self.arena.k[layer][slot : slot + 1, :, : start + count],
                self.arena.v[layer][slot : slot + 1, :, : start + count],
                attn_mask=mask,
                scale=self.scaling,
            )
            out[offset:end] = rows[0].reshape(self.q_heads, count, self.head_dim).transpose(0, 1)
            offset = end
        return out

    def _attend_padded_rows(self, q: torch.Tensor, layer: int, rows: _PaddedRows) -> torch.Tensor:
        """Every row against its own slot in one call: queries padded to the longest row,
        each row's keys/values gathered from the arena, padding masked (and discarded)."""
        count, width = rows.count, rows.width
        padded = q.new_zeros((count, rows.longest, self.q_heads, self.head_dim))
        padded[rows.token_row, rows.token_column] = q
        grouped = padded.permute(0, 2, 1, 3).reshape(
            count, self.kv_heads, self.groups * rows.longest, self.head_dim
        )
        out = torch.nn.functional.scaled_dot_product_attention(
            grouped.to(self.cache_dtype),
            self.arena.k[layer][rows.slots, :, :width],
            self.arena.v[layer][rows.slots, :, :width],
            attn_mask=rows.mask,
            scale=self.scaling,
        )
        out = out.reshape(count, self.q_heads, rows.longest, self.head_dim).permute(0, 2, 1, 3)
        return out[rows.token_row, rows.token_column]

    # -- generation -----------------------------------------------------------------------

    @torch.inference_mode()
    def generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Generation]:
        results: list[Generation] = []
        for start in range(0, len(requests), self.arena.max_slots):
            results += self._generate(requests[start : start + self.arena.max_slots], params)
        return results

    def _generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Generation]:
        batch = _FixedBatch(requests)
        self.stream(batch, params)
        return batch.results()

    @torch.inference_mode()
    def stream(self, stream: RequestStream, params: SamplingParams) -> None:
        """Continuous batching: decode the rows `stream` hands over, take arrivals between
        steps (prefilled together, then decoding with the rest), and deliver each row as soon
        as it finishes, until no row is live and none is waiting. A row's tokens do not depend
        on the rows beside it when its request carries a seed."""
        live: list[_Work] = []
        hidden = torch.empty(0)
        steps_since_join = JOIN_EVERY
        try:
            while True:
                if steps_since_join >= JOIN_EVERY or not live:
                    arrived = stream.take(self.arena.max_slots - len(live), idle=not live)
                    if arrived:
                        joined, state = self._join(arrived, live, params)
                        if live:
                            self.stats["joined_rows"] += len(joined)
                        hidden = torch.cat([hidden, state]) if live else state
                        live += joined
                        self.shared_prefix = self._common_prefix([w.slot for w in live])
                        steps_since_join = 0
                if not live:
                    return
                live = self._sample_step(live, hidden, params, stream)
                if live:
                    live, hidden = self._decode(live, params, stream)
                    steps_since_join += 1
        finally:
            self.shared_prefix = 0
            for item in live:
                self._free(item)

    def _join(
        self,
        arrived: list[tuple[GenerationRequest, Any]],
        live: list[_Work],
        params: SamplingParams,
    ) -> tuple[list[_Work], torch.Tensor]:
        """Rows for the arrived requests, prefilled: (rows, hidden state after each prompt)."""
        joined = self._plan_arrivals(arrived, {item.slot for item in live}, params)
        return joined, self._prefill(joined)

    def _plan_arrivals(
        self, arrived: list[tuple[GenerationRequest, Any]], busy: set[int], params: SamplingParams
    ) -> list[_Work]:
        """A planned row for each arrived request, in slots outside `busy` (the live rows')."""
        joined = []
        with self._slots_lock:
            for request, handle in arrived:
                item = self._plan(request, params, busy)
                item.handle = handle
                joined.append(item)
        return joined

    def _sample_step(
        self, live: list[_Work], hidden: torch.Tensor, params: SamplingParams, stream: RequestStream
    ) -> list[_Work]:
        """Sample each live row's next token; deliver the rows that finish. Returns the rest."""
        tokens, logprobs = sample(
            self.head(hidden).float(),
            params,
            [w.generator for w in live],
            [w.exclude for w in live],
        )
        going = []
        for item, token, logprob in zip(live, tokens, logprobs, strict=True):
            item.exclude = None
            if not self._keep(item, token, logprob, stream):
                going.append(item)
        return going

    def _keep(self, item: _Work, token: int, logprob: float, stream: RequestStream) -> bool:
        """Add a sampled token to its row; True when that ends the row (delivered)."""
        item.generated.append(token)
        item.logprobs.append(logprob)
        if item.lookup is not None:
            item.lookup.extend((token,))
        if token not in self.stop_ids and len(item.generated) < item.limit:
            return False
        self._free(item)
        reason = "stop" if token in self.stop_ids else "length"
        stream.deliver(item.handle, Generation(item.generated, item.logprobs, reason))
        return True

    def _decode(
        self, live: list[_Work], params: SamplingParams, stream: RequestStream
    ) -> tuple[list[_Work], torch.Tensor]:
        """Run each live row's newest token through the model, with the tokens guessed to
        follow it. Returns the rows still live and the hidden state that each one's next token
        is sampled from."""
        drafts = [self._draft(item) for item in live]
        slots = [item.slot for item in live]
        fed = [[item.generated[-1], *draft] for item, draft in zip(live, drafts, strict=True)]
        if not any(drafts):
            if self.shared_prefix:
                self.stats["shared_attention_steps"] += 1
            return live, self.forward(slots, fed)
        return self._verify(
            live, drafts, self.forward(slots, fed, every_token=True), params, stream
        )

    def _draft(self, item: _Work) -> list[int]:
        """Tokens guessed to follow the row's newest one, at most what the row may still add."""
        room = min(self.draft_tokens, item.limit - len(item.generated))
        if room <= 0:
            return []
        if item.lookup is None:
            item.lookup = PromptLookup(item.prompt + item.generated)
        return item.lookup.draft(room)

    def _verify(
        self,
        live: list[_Work],
        drafts: list[list[int]],
        states: torch.Tensor,
        params: SamplingParams,
        stream: RequestStream,
    ) -> tuple[list[_Work], torch.Tensor]:
        """Keep each row's leading guesses that speculative sampling accepts (each with the
        probability that sampling would draw it); the first rejected one is excluded from the
        next draw at its position. Rejected guesses leave the row's cache."""
        starts, judged, offset = [], [], 0
        for draft in drafts:
            starts.append(offset)
            judged += range(offset, offset + len(draft))
            offset += 1 + len(draft)
        flat = torch.tensor([t for draft in drafts for t in draft], device=states.device)
        odds, logprobs = draft_odds(self.head(states[judged]), flat, params)
        odds_of, logprobs_of = iter(odds.tolist()), iter(logprobs.tolist())
        going, hidden = [], []
        for item, draft, start in zip(live, drafts, starts, strict=True):
            self.stats["drafted_tokens"] += len(draft)
            passes = self._passes(item, [next(odds_of) for _ in draft], params)
            row_logprobs = [next(logprobs_of) for _ in draft]
            kept = self._kept(item, draft, passes)
            self.stats["accepted_tokens"] += kept
            if kept < len(draft):  # the other guesses' columns are free again
                del self.arena.tokens[item.slot][kept - len(draft) :]
            ended = False
            for token, logprob in zip(draft[:kept], row_logprobs[:kept], strict=True):
                ended = self._keep(item, token, logprob, stream)
            if not ended:
                item.exclude = draft[kept] if kept < len(draft) else None
                going.append(item)
                hidden.append(states[start + kept])
        return going, torch.stack(hidden) if hidden else states[:0]

    def _passes(self, item: _Work, odds: list[float], params: SamplingParams) -> list[bool]:
        """Whether each guess is accepted: with probability `odds` (greedy: 1 or 0), one uniform
        per guess from the row's own generator, so a row's tokens do not depend on the others."""
        if params.temperature == 0:
            return [p >= 1.0 for p in odds]
        uniforms = torch.rand(len(odds), generator=item.generator, device=self.device).tolist()
        return [u < p for u, p in zip(uniforms, odds, strict=True)]

    def _kept(self, item: _Work, draft: list[int], passes: list[bool]) -> int:
        """How many leading guesses the row keeps: accepted ones, up to one that ends it."""
        kept = 0
        while kept < len(draft) and passes[kept]:
            kept += 1
            if draft[kept - 1] in self.stop_ids or len(item.generated) + kept >= item.limit:
                break
        return kept

    def _free(self, item: _Work) -> None:
        """A row leaves: its slot is free again unless its episode keeps it for later turns."""
        if item.request.key is None:
            with self._slots_lock:
                self.arena.release(item.slot)

    def release(self, key: str) -> None:
        with self._slots_lock:  # an episode may end while a stream plans other rows
            slot = self.arena.slot_of.get(key)
            if slot is not None:
                self.arena.release(slot)

    def clear(self) -> None:
        with self._slots_lock:
            for slot in range(self.arena.slots):
                self.arena.release(slot)

    def free_memory(self) -> None:
        """Drop the cached keys/values and the memory that held them."""
        with self._slots_lock:
            self.arena.empty()

    def _plan(self, request: GenerationRequest, params: SamplingParams, busy: set[int]) -> _Work:
        """The slot to extend: the episode's own, else a fresh one seeded with the longest
        prefix any slot shares with the prompt. At least one prompt token is always new."""
        prompt = list(request.prompt_ids)
        arena = self.arena
        slot = arena.acquire(request.key, busy)
        busy.add(slot)
        keep = min(common_prefix_length(arena.tokens[slot], prompt), len(prompt) - 1)
        del arena.tokens[slot][keep:]
        if keep == 0:
            source, length = arena.longest_prefix(prompt, exclude=slot)
            if source is not None:
                arena.copy_prefix(source, slot, min(length, len(prompt) - 1))
        generator = None
        if request.seed is not None:
            generator = torch.Generator(device=self.device).manual_seed(request.seed)
        limit = request.max_new_tokens or params.max_new_tokens
        return _Work(request, slot, prompt, prompt[arena.length(slot) :], limit, generator)

    def _prefill(self, work: list[_Work]) -> torch.Tensor:
        """Run every row's pending prompt tokens, packed, in passes of bounded size.

        A fresh row whose prompt starts like an earlier row's (a GRPO group: the whole
        prompt; other tasks: the instructions) waits for that row, then copies its keys/values
        for the shared part and runs only the rest: waves of rows, each after its leaders.
        """
        leaders = self._prompt_leaders(work)
        last_hidden: dict[int, torch.Tensor] = {}
        waiting = list(range(len(work)))
        while waiting:
            wave = [i for i in waiting if i not in leaders or leaders[i][0] in last_hidden]
            copies = []
            for index in wave:
                if index in leaders:
                    leader, length = leaders[index]
                    copies.append((work[leader].slot, work[index].slot, length))
                    work[index].pending = work[index].pending[length:]
                    self.stats["copied_prefix_tokens"] += length
            self.arena.copy_prefixes(copies, batched=self.batched_rows)
            last_hidden.update(self._run_pending(work, wave))
            waiting = [i for i in waiting if i not in last_hidden]
        return torch.stack([last_hidden[i] for i in range(len(work))])

    def _prompt_leaders(self, work: list[_Work]) -> dict[int, tuple[int, int]]:
        """For each fresh row (nothing cached), the earlier row sharing the longest prompt
        prefix and that length, when it is long enough to be worth copying.

        All pairs are compared at once (a row's prompt against every earlier one, in one
        tensor operation): token by token in Python this took 0.36 s for 256 TextCraft rows."""
        fresh = [
            index
            for index, item in enumerate(work)
            if index and not self.arena.length(item.slot) and len(item.pending) > MIN_SHARED_PREFIX
        ]
        if not fresh:  # e.g. every later turn: each row extends its own cache
            return {}
        prompts = [item.prompt for item in work[: fresh[-1] + 1]]
        width = max(map(len, prompts))
        # Padding differs per row, so it never counts as a shared token.
        grid = torch.tensor(
            [p + [-1 - row] * (width - len(p)) for row, p in enumerate(prompts)], dtype=torch.long
        )
        leaders: dict[int, tuple[int, int]] = {}
        for index in fresh:
            shared = (grid[:index] == grid[index]).cumprod(dim=1).sum(dim=1)
            shared = shared.clamp(max=len(prompts[index]) - 1)
            best = int(shared.argmax())  # the first of the longest
            if int(shared[best]) >= MIN_SHARED_PREFIX:
                leaders[index] = (best, int(shared[best]))
        return leaders

    def _run_pending(self, work: list[_Work], rows: list[int]) -> dict[int, torch.Tensor]:
        """Run the pending tokens of `rows`; the hidden state after each row's last token."""
        last_hidden: dict[int, torch.Tensor] = {}
        while any(work[i].pending for i in rows):
            batch = self._next_pass(work, rows)
            hidden = self.forward([work[i].slot for i, _ in batch], [t for _, t in batch])
            self.stats["prefill_tokens"] += sum(len(take) for _, take in batch)
            for (index, take), state in zip(batch, hidden, strict=True):
                work[index].pending = work[index].pending[len(take) :]
                if not work[index].pending:
                    last_hidden[index] = state
        return last_hidden

    def _next_pass(self, work: list[_Work], rows: list[int]) -> list[tuple[int, list[int]]]:
        """(row, tokens) of the next prefill pass, within `prefill_tokens`: counted as rows x
        longest row when rows attend in one padded call, else as the tokens themselves. A row
        that does not fit whole runs its first tokens now and the rest in a later pass."""
        batch: list[tuple[int, list[int]]] = []
        used = longest = 0
        for index in rows:
            pending = work[index].pending
            if not pending:
                continue
            if self.batched_rows:  # each row's share of the budget bounds the longest row
                share = self.prefill_tokens // (len(batch) + 1)
                if share < longest:
                    break
                take = pending[:share]
                longest = max(longest, len(take))
            else:
                if used >= self.prefill_tokens:
                    break
                take = pending[: self.prefill_tokens - used]
                used += len(take)
            batch.append((index, take))
        return batch

    def _common_prefix(self, slots: Sequence[int]) -> int:
        """Leading columns every slot of the call holds with the same tokens (0 when too
        short to pay for the split attention, with a single row, or without `split_attention`)."""
        if len(slots) < 2 or not self.split_attention:
            return 0
        first = self.arena.tokens[slots[0]]
        length = len(first)
        for slot in slots[1:]:
            length = min(length, common_prefix_length(first[:length], self.arena.tokens[slot]))
            if length < MIN_SHARED_ATTENTION:
                return 0
        return length
