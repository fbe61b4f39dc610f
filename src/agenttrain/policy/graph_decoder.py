"""Decoding at GPU speed: static-shape steps over the KV arena, captured as CUDA graphs.

On a GPU the arena decoder (`decoder.py`) is bound by per-step overhead: hundreds of small
kernel launches and a host round trip per token. Here a decode step is one fixed-shape
function over the arena's first `S` slots and first `W` columns (both bucketed), whose state
lives in device tensors: the token each row feeds, the column it writes, whether it is still
generating, how many tokens it has, its seed. Sampling (`sampling.race`: Gumbel-max with
counter-based noise), stop detection and log-probs run inside the step, so the host reads
the state back only every `SYNC_EVERY` steps. On CUDA each (S, W, sampling) shape is
captured once as a `torch.cuda.CUDAGraph` and replayed; elsewhere the same step runs
eagerly (the tested path).
A captured graph still runs every kernel of the step, so on CUDA each layer and the sampling
run through `torch.compile` first (one compiled layer serves all layers: its weights and
arena tensors are arguments), which fuses a layer's ~57 operations into a few kernels.

What stays from the arena decoder: packed prefill with prompt-prefix sharing, each episode's
keys/values kept across turns (a turn runs only its new tokens), slots reused by key.
Rows that finish leave the step at once (they feed a pad into a scratch column the others
never attend); the slot range shrinks at the next sync when the highest slots are done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agenttrain.policy.base import Generation, GenerationRequest, SamplingParams
from agenttrain.policy.decoder import LlamaFamilyDecoder, _Work
from agenttrain.policy.sampling import race

logger = logging.getLogger(__name__)

SYNC_EVERY = 8
"""Decode steps between host reads of the row state (finished rows, widest row)."""
WIDTH_BLOCK = 256
"""Attention widths are rounded up to a power-of-two multiple of this many columns."""


def bucket(value: int, smallest: int, largest: int) -> int:
    """The smallest `smallest * 2**k` >= value, capped at `largest`."""
    size = smallest
    while size < value:
        size *= 2
    return min(size, largest)


@dataclass(frozen=True)
class _StepShape:
    slots: int
    width: int
    temperature: float
    top_k: int
    top_p: float


class _RowState:
    """Per-slot decode state, in device tensors that a captured graph reads and updates."""

    def __init__(self, slots: int, capacity: int, device: torch.device) -> None:
        def longs(fill: int = 0) -> torch.Tensor:
            return torch.full((slots,), fill, dtype=torch.long, device=device)

        self.rows = torch.arange(slots, device=device)
        self.tokens = longs()
        self.write_at = longs()
        self.active = torch.zeros(slots, dtype=torch.bool, device=device)
        self.counts = longs()
        self.limits = longs()
        self.seeds = longs()
        self.out_tokens = torch.zeros((slots, capacity), dtype=torch.long, device=device)
        self.out_logprobs = torch.zeros((slots, capacity), dtype=torch.float32, device=device)


class _Compiled:
    """`torch.compile(function)`, or `function` itself when compiling is off or has failed.

    A compiler that cannot build here (no C compiler, an unsupported model) costs speed, not
    the run: the failure is logged once, counted in `stats["compile_failures"]`, and the eager
    function runs from then on. Only compile-time errors fall back (nothing ran yet);
    errors of running the compiled code propagate.
    """

    def __init__(self, function: Callable[..., Any], enabled: bool, stats: dict[str, int]):
        self.eager = function
        self.call = torch.compile(function, fullgraph=True) if enabled else function
        self.stats = stats

    def __call__(self, *args: Any) -> Any:
        if self.call is self.eager:
            return self.eager(*args)
        try:
            return self.call(*args)
        except torch._dynamo.exc.TorchDynamoException as error:
            name = getattr(self.eager, "__name__", "step")
            logger.warning("compiling %s failed, decoding eagerly: %s", name, error)
            self.stats["compile_failures"] += 1
            self.call = self.eager
            return self.eager(*args)


class GraphDecoder(LlamaFamilyDecoder):
    """`LlamaFamilyDecoder` whose decode loop is a static-shape, device-resident step."""

    def __init__(
        self,
        model: torch.nn.Module,
        stop_ids: frozenset[int],
        pad_id: int,
        slots: int = 32,
        capacity: int = 1024,
        compile_step: bool | None = None,
    ) -> None:
        super().__init__(model, stop_ids, pad_id, slots)
        if compile_step is None:
            compile_step = self.device.type == "cuda"
        self.compile_step = compile_step
        """Run each layer of a decode step, and its sampling, through `torch.compile` (default
        on CUDA). A CUDA graph removes the host's launch cost but the card still runs every
        kernel: eagerly a step of a 30-layer model is ~1,800 ATen ops (57 a layer), most of
        them small elementwise kernels that the compiler fuses."""
        self._layer_step = _Compiled(self._decode_layer, compile_step, self.stats)
        self._advance_step = _Compiled(self._advance, compile_step, self.stats)
        self.cache_dtype = self.weight_dtype  # keys/values in the weights' precision
        self.arena = type(self.arena)(
            len(self.layers),
            self.kv_heads,
            self.head_dim,
            self.cache_dtype,
            self.device,
            slots,
            capacity,
        )
        self.state: _RowState | None = None
        self._stop_tensor = torch.tensor(sorted(stop_ids), device=self.device)
        self._stops_in_tensor = stop_ids
        self._graphs: dict[_StepShape, torch.cuda.CUDAGraph] = {}
        self._pool = None
        self._arena_version = self.arena.version
        self.stats.update(graph_captures=0, graph_replays=0, eager_steps=0, host_syncs=0)
        self.stats.update(compile_failures=0)

    # -- one decode step ---------------------------------------------------------------

    def _step(self, shape: _StepShape) -> None:
        """Feed each of slots [0, S) its token, sample the next one and advance the state.

        Only tensor operations with shapes fixed by `shape`: capturable as a CUDA graph.
        """
        state, arena = self.state, self.arena
        assert state is not None
        count, width = shape.slots, shape.width
        rows, tokens, write_at = state.rows[:count], state.tokens[:count], state.write_at[:count]
        active = state.active[:count]
        lengths = torch.where(active, write_at + 1, 1)
        mask = (torch.arange(width, device=self.device)[None, :] < lengths[:, None])[
            :, None, None, :
        ]
        x = self.embed(tokens)
        cos, sin = self.rotary(x[None], write_at[None])
        cos, sin = cos[0], sin[0]
        for index, layer in enumerate(self.layers):
            keys, values = arena.k[index], arena.v[index]
            x = self._layer_step(layer, keys, values, x, cos, sin, rows, write_at, mask)
        logits = self.head(self.norm(x))
        self._advance_step(shape, logits, count)

    def _decode_layer(
        self,
        layer: torch.nn.Module,
        keys: torch.Tensor,
        values: torch.Tensor,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        rows: torch.Tensor,
        write_at: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        """One layer of a decode step for rows [0, count) attending columns [0, width) (the
        shapes of `x` and `mask`): keys/values written at `write_at`, the residual returned.
        Everything it reads is an argument, so one compiled version serves every layer."""
        count, width = x.shape[0], mask.shape[-1]
        q = self._project(layer, keys, values, x, cos, sin, rows, write_at)
        queries = q.view(count, self.kv_heads, self.groups, self.head_dim)
        out = torch.nn.functional.scaled_dot_product_attention(
            queries.to(self.cache_dtype),
            keys[:count, :, :width],
            values[:count, :, :width],
            attn_mask=mask,
            scale=self.scaling,
        )
        return self._finish_layer(layer, x, out)

    def _advance(self, shape: _StepShape, logits: torch.Tensor, count: int) -> None:
        """Sample from `logits` [count, V] for the active rows and update their state."""
        state = self.state
        assert state is not None
        rows, active, counts = state.rows[:count], state.active[:count], state.counts[:count]
        sampled, logprobs = race(
            logits, shape.temperature, shape.top_k, shape.top_p, state.seeds[:count], counts
        )
        column = counts.clamp(max=state.out_tokens.shape[1] - 1)
        state.out_tokens[rows, column] = torch.where(
            active, sampled, state.out_tokens[rows, column]
        )
        state.out_logprobs[rows, column] = torch.where(
            active, logprobs, state.out_logprobs[rows, column]
        )
        grown = counts + active.long()
        done = active & (torch.isin(sampled, self._stop_tensor) | (grown >= state.limits[:count]))
        still = active & ~done
        scratch = self.arena.capacity - 1
        state.counts[:count] = grown
        state.active[:count] = still
        state.tokens[:count] = torch.where(still, sampled, self.pad_id)
        state.write_at[:count] = torch.where(still, state.write_at[:count] + 1, scratch)

    def _run_step(self, shape: _StepShape) -> None:
        """One step: replayed from its CUDA graph when captured, else eager (then captured)."""
        graph = self._graphs.get(shape)
        if graph is not None:
            graph.replay()
            self.stats["graph_replays"] += 1
            return
        self._step(shape)  # the step itself; on CUDA it doubles as the capture's warm-up
        self.stats["eager_steps"] += 1
        if self.device.type == "cuda":
            self._graphs[shape] = self._capture(shape)

    def _drop_graphs(self) -> None:
        """Forget every captured step, and their memory pool with them.

        A pool whose graphs are all freed is released by the caching allocator; capturing into
        its old handle then fails an internal assert (seen on an H200, torch 2.11), so the next
        capture starts a new pool.
        """
        self._graphs.clear()
        self._pool = None

    def _capture(self, shape: _StepShape) -> torch.cuda.CUDAGraph:
        """Record the step for `shape` (recording runs nothing: the state is unchanged)."""
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        with torch.cuda.graph(graph, pool=self._pool):
            self._step(shape)
        self.stats["graph_captures"] += 1
        return graph

    # -- a call ------------------------------------------------------------------------

    def _generate(
        self, requests: Sequence[GenerationRequest], params: SamplingParams
    ) -> list[Generation]:
        busy: set[int] = set()
        work = [self._plan(request, params, busy) for request in requests]
        for item in work:  # room for every fed token, and the scratch column after them
            self.arena.reserve(len(item.prompt) + item.limit + 1)
        hidden = self._prefill(work)
        try:
            self._start_rows(work, params, hidden)
            self._decode(params)
            return self._collect(work)
        finally:
            for item in work:
                if item.request.key is None:
                    self.arena.release(item.slot)

    def _start_rows(self, work: list[_Work], params: SamplingParams, hidden: torch.Tensor) -> None:
        """Device state for this call's rows, and their first token sampled from the prefill."""
        if self.state is None or self.state.out_tokens.shape[1] < self.arena.capacity:
            self.state = _RowState(self.arena.max_slots, self.arena.capacity, self.device)
            self._drop_graphs()
        if self._stops_in_tensor != self.stop_ids:  # changed by the caller
            self._stop_tensor = torch.tensor(sorted(self.stop_ids), device=self.device)
            self._stops_in_tensor = self.stop_ids
            self._drop_graphs()
        if self._arena_version != self.arena.version:  # grown: captured addresses are stale
            self._drop_graphs()
            self._arena_version = self.arena.version
        state = self.state
        state.active.zero_()
        state.counts.zero_()
        state.write_at.fill_(self.arena.capacity - 1)
        index = torch.tensor([w.slot for w in work], device=self.device)
        seeds = [
            w.request.seed if w.request.seed is not None else int(torch.randint(2**62, ()))
            for w in work
        ]
        state.seeds[index] = torch.tensor(seeds, device=self.device)
        state.limits[index] = torch.tensor([w.limit for w in work], device=self.device)
        state.write_at[index] = torch.tensor(
            [self.arena.length(w.slot) - 1 for w in work], device=self.device
        )
        state.active[index] = True
        count = max(w.slot for w in work) + 1
        logits = torch.zeros(
            (count, self.head.weight.shape[0]), dtype=torch.float32, device=self.device
        )
        logits[index] = self.head(hidden).float()
        self._advance(self._shape(count, 1, params), logits, count)

    def _decode(self, params: SamplingParams) -> None:
        state = self.state
        assert state is not None
        step, shape = 0, None
        while True:
            if step % SYNC_EVERY == 0:
                active = state.active.nonzero()[:, 0]
                self.stats["host_syncs"] += 1
                if active.numel() == 0:
                    return
                highest = int(active.max()) + 1
                widest = int(state.write_at[active].max()) + 1 + SYNC_EVERY
                count = bucket(highest, 1, self.arena.slots)
                width = bucket(widest, WIDTH_BLOCK, self.arena.capacity)
                shape = self._shape(count, width, params)
            assert shape is not None
            self._run_step(shape)
            step += 1

    def _shape(self, count: int, width: int, params: SamplingParams) -> _StepShape:
        return _StepShape(count, width, params.temperature, params.top_k, params.top_p)

    def _collect(self, work: list[_Work]) -> list[Generation]:
        """Read the call's tokens back (one transfer) and record what each slot now caches."""
        state = self.state
        assert state is not None
        counts = state.counts.tolist()
        longest = max(counts[w.slot] for w in work)
        tokens = state.out_tokens[:, :longest].tolist()
        logprobs = state.out_logprobs[:, :longest].tolist()
        results = []
        for item in work:
            n = counts[item.slot]
            generated = tokens[item.slot][:n]
            item.generated, item.logprobs = generated, logprobs[item.slot][:n]
            self.arena.tokens[item.slot].extend(generated[:-1])  # the last was never fed
            self.arena.touch(item.slot)
            reason = "stop" if generated[-1] in self.stop_ids else "length"
            results.append(Generation(generated, item.logprobs, reason))
        return results
