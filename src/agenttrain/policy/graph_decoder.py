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
never attend); at the next sync their results go back, arrivals join in free slots
(continuous batching), and the slot range shrinks when the highest slots are done.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agenttrain.policy.base import Generation, GenerationRequest, RequestStream, SamplingParams
from agenttrain.policy.decoder import LlamaFamilyDecoder, _Work
from agenttrain.policy.lookup import LONGEST_MATCH
from agenttrain.policy.sampling import counter_uniforms, guess_odds, race

logger = logging.getLogger(__name__)

SYNC_EVERY = 8
"""Decode steps between host reads of the row state (finished rows, widest row)."""
WIDTH_BLOCK = 256
"""Attention widths are rounded up to a power-of-two multiple of this many columns."""
GRAPH_DRAFT_TOKENS = 0
"""Guessed tokens a row checks per step by default on this path: off until measured on a card
(on 2 CPU cores the arena path's 6 gave 1.55x the tokens a second; docs/benchmarks.md)."""


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
    drafts: int = 0
    """Guessed tokens each row feeds after its own (`GraphDecoder.draft_tokens`)."""


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
        self.history = torch.zeros((slots, capacity), dtype=torch.long, device=device)
        """The token at each cached column of a row, and the one it feeds: what guesses are
        looked up in (columns past the row's length hold leftovers that no lookup reads)."""
        self.drafted = torch.zeros((), dtype=torch.long, device=device)
        self.accepted = torch.zeros((), dtype=torch.long, device=device)

    def take_over(self, old: _RowState, scratch: int) -> None:
        """Continue `old`'s rows in this (wider) state; idle rows write to `scratch`."""
        for name in ("tokens", "write_at", "active", "counts", "limits", "seeds"):
            getattr(self, name).copy_(getattr(old, name))
        self.write_at.masked_fill_(~self.active, scratch)
        for name in ("out_tokens", "out_logprobs", "history"):
            getattr(self, name)[:, : getattr(old, name).shape[1]] = getattr(old, name)
        self.drafted.copy_(old.drafted)
        self.accepted.copy_(old.accepted)


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
        draft_tokens: int = 0,
    ) -> None:
        super().__init__(model, stop_ids, pad_id, slots, draft_tokens)
        if compile_step is None:
            compile_step = self.device.type == "cuda"
        self.compile_step = compile_step
        """Run each layer of a decode step, and its sampling, through `torch.compile` (default
        on CUDA). A CUDA graph removes the host's launch cost but the card still runs every
        kernel: eagerly a step of a 30-layer model is ~1,800 ATen ops (57 a layer), most of
        them small elementwise kernels that the compiler fuses."""
        self._layer_step = _Compiled(self._decode_layer, compile_step, self.stats)
        self._advance_step = _Compiled(self._advance, compile_step, self.stats)
        self._accept_step = _Compiled(self._accept, compile_step, self.stats)
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
        """Feed each of slots [0, S) its token (and guesses), sample what follows and advance
        the state. Only tensor operations with shapes fixed by `shape`: capturable as a CUDA
        graph."""
        if shape.drafts:
            self._guess_step(shape)
            return
        state = self.state
        assert state is not None
        count, width = shape.slots, shape.width
        rows, tokens, write_at = state.rows[:count], state.tokens[:count], state.write_at[:count]
        active = state.active[:count]
        lengths = torch.where(active, write_at + 1, 1)
        mask = (torch.arange(width, device=self.device)[None, :] < lengths[:, None])[
            :, None, None, :
        ]
        logits = self._run_layers(tokens, rows, write_at, mask)
        self._advance_step(shape, logits, rows)

    def _run_layers(
        self, tokens: torch.Tensor, rows: torch.Tensor, columns: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Logits [len(tokens), V] for `tokens` fed at (rows, columns) of the arena (their
        keys/values written there), attending the columns `mask` shows (`_decode_layer`)."""
        x = self.embed(tokens)
        cos, sin = self.rotary(x[None], columns[None])
        cos, sin = cos[0], sin[0]
        for index, layer in enumerate(self.layers):
            keys, values = self.arena.k[index], self.arena.v[index]
            x = self._layer_step(layer, keys, values, x, cos, sin, rows, columns, mask)
        return self.head(self.norm(x))

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
        """One layer of a decode step for slots [0, S) feeding T tokens each (x: [S*T, hidden],
        row-major) and attending columns [0, W): mask [S, 1, T*groups, W], queries ordered
        (token, head group). Keys/values are written at (rows, write_at), per token; the
        residual is returned. Everything it reads is an argument, so one compiled version
        serves every layer."""
        count, width = mask.shape[0], mask.shape[-1]
        per_row = x.shape[0] // count
        q = self._project(layer, keys, values, x, cos, sin, rows, write_at)
        queries = q.view(count, per_row, self.kv_heads, self.groups, self.head_dim)
        queries = queries.transpose(1, 2).reshape(count, self.kv_heads, -1, self.head_dim)
        out = torch.nn.functional.scaled_dot_product_attention(
            queries.to(self.cache_dtype),
            keys[:count, :, :width],
            values[:count, :, :width],
            attn_mask=mask,
            scale=self.scaling,
        )
        out = out.view(count, self.kv_heads, per_row, self.groups, self.head_dim).transpose(1, 2)
        return self._finish_layer(layer, x, out)

    # -- guessed tokens ------------------------------------------------------------------

    def _guess_step(self, shape: _StepShape) -> None:
        """`_step` with guesses: each active row feeds its token and up to `shape.drafts`
        tokens looked up in its own context (`_lookup`, prompt lookup as `policy/lookup.py`),
        in one pass; `_accept` keeps what speculative sampling accepts. A rejected guess's
        keys/values stay past the row's length, where nothing attends them."""
        state = self.state
        assert state is not None
        count, width, per_row = shape.slots, shape.width, shape.drafts + 1
        rows, active = state.rows[:count], state.active[:count]
        write_at, history = state.write_at[:count], state.history[:count]
        offsets = torch.arange(per_row, device=self.device)
        history.scatter_(1, write_at[:, None], state.tokens[:count, None])
        lengths = torch.where(active, write_at + 1, 0)  # idle rows' write_at is the scratch
        drafts, valid = self._lookup(history[:, :width], lengths, shape.drafts)
        room = state.limits[:count, None] - state.counts[:count, None]
        valid &= active[:, None] & (offsets[None, :-1] < room)
        fed = torch.cat([state.tokens[:count, None], torch.where(valid, drafts, self.pad_id)], 1)
        columns = (write_at[:, None] + offsets).clamp(max=self.arena.capacity - 1)
        lengths = torch.where(active, write_at + 1, 1)[:, None] + offsets
        visible = torch.arange(width, device=self.device)[None, None, :] < lengths[:, :, None]
        mask = visible.repeat_interleave(self.groups, dim=1)[:, None]
        logits = self._run_layers(
            fed.view(-1), rows.repeat_interleave(per_row), columns.view(-1), mask
        )
        self._accept_step(shape, logits.view(count, per_row, -1), drafts, valid)

    def _lookup(
        self, history: torch.Tensor, lengths: torch.Tensor, count: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Each row's guesses [S, count] and which are real [S, count]: the tokens that followed
        the latest earlier occurrence of the row's last n tokens (longest n <= LONGEST_MATCH
        first) in its first `lengths` tokens, as `PromptLookup.draft` finds them."""
        rows, width = history.shape
        follow = torch.full((rows,), -1, dtype=torch.long, device=history.device)
        for n in range(min(LONGEST_MATCH, width - 1), 0, -1):
            tail_at = (lengths[:, None] - n + torch.arange(n, device=history.device)).clamp(min=0)
            tail = history.gather(1, tail_at)
            starts = torch.arange(width - n + 1, device=history.device)
            before = starts[None, :] + n < lengths[:, None]  # followed by a token of the row
            match = (history.unfold(1, n, 1) == tail[:, None, :]).all(-1) & before
            latest = torch.where(match, starts[None, :], -1).amax(1)
            found = (latest >= 0) & (lengths >= n) & (follow < 0)
            follow = torch.where(found, latest + n, follow)
        at = follow[:, None] + torch.arange(count, device=history.device)
        valid = (follow[:, None] >= 0) & (at < lengths[:, None])
        return history.gather(1, at.clamp(0, width - 1)), valid

    def _accept(
        self, shape: _StepShape, logits: torch.Tensor, drafts: torch.Tensor, valid: torch.Tensor
    ) -> None:
        """Speculative sampling on the device, for slots [0, S) with logits [S, K+1, V] after
        their token and K guesses: a guess is kept with the probability sampling would draw
        it (`draft_odds`; one counter-based uniform per row and position), leading kept ones
        count, up to one that ends the row; then the next token is drawn at the first position
        not kept, without the guess rejected there. Tokens are distributed as plain sampling's."""
        state = self.state
        assert state is not None
        count, guesses, vocab = shape.slots, shape.drafts, logits.shape[-1]
        active, counts, seeds = state.active[:count], state.counts[:count], state.seeds[:count]
        limits, offsets = state.limits[:count], torch.arange(guesses + 1, device=self.device)
        odds, guess_logprobs = guess_odds(
            logits[:, :guesses].reshape(-1, vocab),
            drafts.reshape(-1),
            shape.temperature,
            shape.top_k,
            shape.top_p,
        )
        steps = counts[:, None] + offsets[None, :guesses]
        passes = valid & (counter_uniforms(seeds, steps) < odds.view(count, guesses))
        # the guesses before the first rejected one (a reduction, not a cumulative product:
        # inductor's scan codegen has failed on CUDA before, see sampling.race)
        first_rejected = torch.where(passes, guesses, offsets[None, :guesses]).amin(1)
        leading = offsets[None, :guesses] < first_rejected[:, None]
        ends = leading & (torch.isin(drafts, self._stop_tensor) | (steps + 1 >= limits[:, None]))
        ended = ends.any(1)
        kept = torch.where(ended, ends.long().argmax(1) + 1, first_rejected)
        at = kept.clamp(max=guesses - 1)
        rejected = valid.gather(1, at[:, None])[:, 0] & (kept < guesses) & ~ended
        exclude = torch.where(rejected, drafts.gather(1, at[:, None])[:, 0], -1)
        sampled, logprobs = race(
            logits[torch.arange(count, device=self.device), kept],
            shape.temperature,
            shape.top_k,
            shape.top_p,
            seeds,
            counts + kept,
            exclude,
        )
        drew = active & ~ended
        placed = offsets[None, :] == kept[:, None]
        new_tokens = torch.where(placed, sampled[:, None], torch.cat([drafts, drafts[:, :1]], 1))
        new_logprobs = torch.where(
            placed,
            logprobs[:, None],
            torch.cat([guess_logprobs.view(count, guesses), logprobs[:, None]], 1),
        )
        written = active[:, None] & ((offsets[None, :] < kept[:, None]) | (placed & drew[:, None]))
        self._write_out(count, counts, new_tokens, new_logprobs, written)
        grown = counts + kept + drew.long()
        done = active & (
            ended | (drew & (torch.isin(sampled, self._stop_tensor) | (grown >= limits)))
        )
        still = active & ~done
        state.history[:count].scatter_(
            1,
            (state.write_at[:count, None] + 1 + offsets[None, :guesses]).clamp(
                max=self.arena.capacity - 1
            ),
            drafts,
        )
        state.drafted.add_(valid.sum())
        state.accepted.add_(kept.sum())
        state.counts[:count] = grown
        state.active[:count] = still
        state.tokens[:count] = torch.where(still, sampled, self.pad_id)
        state.write_at[:count] = torch.where(
            still, state.write_at[:count] + kept + 1, self.arena.capacity - 1
        )

    def _write_out(
        self,
        count: int,
        counts: torch.Tensor,
        tokens: torch.Tensor,
        logprobs: torch.Tensor,
        written: torch.Tensor,
    ) -> None:
        """Put tokens/log-probs [S, T] at output columns counts + t of slots [0, S), where
        `written`; the other entries keep what they held."""
        state = self.state
        assert state is not None
        columns = (counts[:, None] + torch.arange(tokens.shape[1], device=self.device)).clamp(
            max=state.out_tokens.shape[1] - 1
        )
        for out, new in ((state.out_tokens, tokens), (state.out_logprobs, logprobs)):
            old = out[:count].gather(1, columns)
            out[:count].scatter_(1, columns, torch.where(written, new, old))

    def _advance(self, shape: _StepShape, logits: torch.Tensor, rows: torch.Tensor) -> None:
        """Sample from `logits` [len(rows), V] for the active ones of slots `rows` and update
        their state (the other slots' state is not touched)."""
        state = self.state
        assert state is not None
        active, counts = state.active[rows], state.counts[rows]
        sampled, logprobs = race(
            logits, shape.temperature, shape.top_k, shape.top_p, state.seeds[rows], counts
        )
        column = counts.clamp(max=state.out_tokens.shape[1] - 1)
        state.out_tokens[rows, column] = torch.where(
            active, sampled, state.out_tokens[rows, column]
        )
        state.out_logprobs[rows, column] = torch.where(
            active, logprobs, state.out_logprobs[rows, column]
        )
        grown = counts + active.long()
        done = active & (torch.isin(sampled, self._stop_tensor) | (grown >= state.limits[rows]))
        still = active & ~done
        scratch = self.arena.capacity - 1
        state.counts[rows] = grown
        state.active[rows] = still
        state.tokens[rows] = torch.where(still, sampled, self.pad_id)
        state.write_at[rows] = torch.where(still, state.write_at[rows] + 1, scratch)

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

    # -- a stream of rows ---------------------------------------------------------------

    @torch.inference_mode()
    def stream(self, stream: RequestStream, params: SamplingParams) -> None:
        """Continuous batching on the static-shape step: every `SYNC_EVERY` steps the host
        reads the row state once, delivers the rows that finished, prefills arrivals into
        free slots and starts them, then replays the next steps for the shape that covers the
        live rows. A seeded row samples the same tokens whenever it joins (counter-based noise)."""
        self._refresh_state()
        state = self.state
        assert state is not None
        state.active.zero_()
        state.write_at.fill_(self.arena.capacity - 1)
        live: dict[int, _Work] = {}
        try:
            while True:
                if live:
                    self._deliver_finished(live, stream)
                arrived = stream.take(self.arena.max_slots - len(live), idle=not live)
                if arrived:
                    self._join_rows(arrived, live, params)
                if not live:
                    return
                shape = self._live_shape(live, params)
                for _ in range(SYNC_EVERY):
                    self._run_step(shape)
        finally:
            for item in live.values():
                self._free(item)
            self._count_guesses()

    def _count_guesses(self) -> None:
        """Move the device's guess counters into `stats` (read once a call, not per step)."""
        state = self.state
        if state is None or not self.draft_tokens:
            return
        self.stats["drafted_tokens"] += int(state.drafted)
        self.stats["accepted_tokens"] += int(state.accepted)
        state.drafted.zero_()
        state.accepted.zero_()

    def _refresh_state(self) -> None:
        """Row state as large as the arena (grown in place: live rows keep theirs), and no
        captured graph that reads a reallocated tensor or a changed stop set."""
        state = self.state
        if state is None or state.out_tokens.shape[1] < self.arena.capacity:
            self.state = _RowState(self.arena.max_slots, self.arena.capacity, self.device)
            if state is not None:
                self.state.take_over(state, scratch=self.arena.capacity - 1)
            self._drop_graphs()
        if self._stops_in_tensor != self.stop_ids:  # changed by the caller
            self._stop_tensor = torch.tensor(sorted(self.stop_ids), device=self.device)
            self._stops_in_tensor = self.stop_ids
            self._drop_graphs()
        if self._arena_version != self.arena.version:  # grown: captured addresses are stale
            self._drop_graphs()
            self._arena_version = self.arena.version

    def _join_rows(
        self,
        arrived: list[tuple[GenerationRequest, Any]],
        live: dict[int, _Work],
        params: SamplingParams,
    ) -> None:
        """Plan, prefill and start the arrived requests beside the live rows."""
        work = self._plan_arrivals(arrived, set(live), params)
        for item in work:  # room for every fed token and guess, and the scratch column
            self.arena.reserve(len(item.prompt) + item.limit + self.draft_tokens + 1)
        self._refresh_state()
        hidden = self._prefill(work)
        if live:
            self.stats["joined_rows"] += len(work)
        self._start_rows(work, params, hidden)
        live.update((item.slot, item) for item in work)

    def _start_rows(self, work: list[_Work], params: SamplingParams, hidden: torch.Tensor) -> None:
        """Device state for the new rows, and their first token sampled from the prefill;
        the live rows' state is left as it is."""
        state = self.state
        assert state is not None
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
        state.counts[index] = 0
        state.active[index] = True
        if self.draft_tokens:
            self._record_history(work)
        self._advance(self._shape(len(work), 1, params), self.head(hidden).float(), index)

    def _record_history(self, work: list[_Work]) -> None:
        """The new rows' cached tokens, for looking guesses up in (one copy to the device)."""
        state = self.state
        assert state is not None
        contexts = [self.arena.tokens[w.slot] for w in work]
        width = max(len(tokens) for tokens in contexts)
        padded = torch.tensor(
            [tokens + [self.pad_id] * (width - len(tokens)) for tokens in contexts]
        ).to(self.device)
        state.history[[w.slot for w in work], :width] = padded

    def _live_shape(self, live: dict[int, _Work], params: SamplingParams) -> _StepShape:
        """The step shape for the next `SYNC_EVERY` steps: the slots up to the highest live
        one, the columns up to the widest row's after those steps (both bucketed)."""
        state = self.state
        assert state is not None
        highest = max(live) + 1
        widest = int(state.write_at[list(live)].max()) + 1 + SYNC_EVERY * (1 + self.draft_tokens)
        count = bucket(highest, 1, self.arena.slots)
        width = bucket(widest, WIDTH_BLOCK, self.arena.capacity)
        return self._shape(count, width, params)

    def _shape(self, count: int, width: int, params: SamplingParams) -> _StepShape:
        return _StepShape(
            count, width, params.temperature, params.top_k, params.top_p, self.draft_tokens
        )

    def _deliver_finished(self, live: dict[int, _Work], stream: RequestStream) -> None:
        """Hand back every live row the steps since the last look finished (one read of the
        state, one of their tokens), and record what each of their slots now caches."""
        state = self.state
        assert state is not None
        slots = list(live)
        still = state.active[slots].tolist()
        self.stats["host_syncs"] += 1
        done = [slot for slot, active in zip(slots, still, strict=True) if not active]
        if not done:
            return
        counts = state.counts[done].tolist()
        tokens = state.out_tokens[done, : max(counts)].tolist()
        logprobs = state.out_logprobs[done, : max(counts)].tolist()
        for slot, n, row_tokens, row_logprobs in zip(done, counts, tokens, logprobs, strict=True):
            item = live.pop(slot)
            item.generated, item.logprobs = row_tokens[:n], row_logprobs[:n]
            with self._slots_lock:
                self.arena.tokens[slot].extend(item.generated[:-1])  # the last was never fed
                self.arena.touch(slot)
            self._free(item)
            reason = "stop" if item.generated[-1] in self.stop_ids else "length"
            stream.deliver(item.handle, Generation(item.generated, item.logprobs, reason))
