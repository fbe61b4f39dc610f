"""Guessed tokens (prompt lookup + speculative sampling) against plain decoding: one
evaluation, run with several `draft_tokens` settings in one process, alternating.

Each decode step of the arena decoder can run each row's newest token together with the
tokens that followed the latest earlier occurrence of its last few tokens, and keep the
guesses sampling accepts (`policy/lookup.py`, `LlamaFamilyDecoder._verify`). The workload
is an evaluation as `agenttrain eval` runs it (benchmarks/continuous.py); reported per
setting: time, generated tokens a second, guesses checked and kept, success. Tokens are
distributed as without guesses, but other tokens are drawn, so success differs by sampling
noise only.

Usage: python benchmarks/draft_tokens.py --model runs/textcraft-recipe/sft [--tasks 0-39]
       [-n 2] [--drafts 0,6] [--repeats 1] [--out F]
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

from agenttrain.policy import decoder as decoder_module
from continuous import (
    eval_config,
    machine,
    pop_int_list,
    run_once,
    workload,
    workload_arguments,
    write_report,
)

COUNTS = {"drafted_tokens": 0, "accepted_tokens": 0}


@contextlib.contextmanager
def drafting(tokens: int) -> Iterator[None]:
    """Decoders built inside check `tokens` guesses a step; their counts add up in COUNTS."""
    cls = decoder_module.LlamaFamilyDecoder
    init = cls.__init__
    built: list[decoder_module.LlamaFamilyDecoder] = []

    def with_drafts(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        init(self, *args, **kwargs)
        self.draft_tokens = tokens
        built.append(self)

    cls.__init__ = with_drafts  # type: ignore[method-assign]
    try:
        yield
    finally:
        cls.__init__ = init  # type: ignore[method-assign]
        for key in COUNTS:
            COUNTS[key] = sum(decoder.stats[key] for decoder in built)


def main() -> None:
    drafts = pop_int_list("--drafts", [0, decoder_module.DRAFT_TOKENS])
    args = workload_arguments(__doc__, "draft_tokens.json")
    config = eval_config(args)
    runs = []
    for _ in range(args.repeats):
        for tokens in drafts:
            with drafting(tokens):
                run = run_once(config, streaming=True)
            run = {"draft_tokens": tokens, **run, **COUNTS}
            run.pop("_replies")
            runs.append(run)
            print(json.dumps(run))
    best = {n: max(r["tokens_per_s"] for r in runs if r["draft_tokens"] == n) for n in drafts}
    report = {
        "benchmark": "draft_tokens",
        "model": args.model,
        "workload": workload(args, "continuous batching, "),
        "machine": machine(),
        "runs": runs,
        "identical_episodes": "not compared: guesses spend a row's uniforms differently",
        "speedup_best_of_each": {str(n): round(best[n] / best[drafts[0]], 3) for n in drafts[1:]},
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
