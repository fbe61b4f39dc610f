"""GRPO's demonstration loss (`actor.demo_loss`): SFT's loss on a few demonstrations in each
policy update, so behaviour the stage's draws stop rewarding is not unlearnt.

The demonstrations are read, guarded against test tasks, sampled (`limit`, as `agenttrain sft`
samples them) and tokenized exactly as the SFT stage did, with the policy's own chat template.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch

from agenttrain.modeling import ModelConfig
from agenttrain.policy.chat import ChatTemplate
from agenttrain.rl.config import DemoLossConfig
from agenttrain.sft.data import DataError, limit_seed, read_conversations, sample_limit
from agenttrain.sft.guard import HeldOutGuard
from agenttrain.sft.loss import nll_sums
from agenttrain.sft.tokenize import Example, tokenize


class DemoLoss:
    """The demonstrations of a run and the loss term they add to its updates."""

    def __init__(
        self,
        config: DemoLossConfig,
        template: ChatTemplate,
        env_names: list[str],
        run_seed: int,
        pad_id: int,
    ) -> None:
        self.config = config
        self.run_seed = run_seed
        self.pad_id = pad_id
        self.examples = load_demonstrations(config, template, env_names, run_seed)

    def sample(self, step: int, mini_batch: int) -> list[Example]:
        """This optimizer step's demonstrations: a pure function of seed, step and mini-batch,
        so a resumed run trains on the same ones."""
        count = min(self.config.per_update, len(self.examples))
        rng = random.Random(f"{self.run_seed}/demo_loss/{step}/{mini_batch}")
        return [self.examples[i] for i in sorted(rng.sample(range(len(self.examples)), count))]

    def backward(
        self,
        model: torch.nn.Module,
        model_config: ModelConfig,
        micro_batch_tokens: int,
        packing: bool,
        step: int,
        mini_batch: int,
    ) -> float:
        """Accumulate `coef` x the token-mean NLL of this step's demonstrations into the
        gradients; returns that NLL (before the optimizer steps)."""
        loss_sum, tokens = nll_sums(
            model,
            self.sample(step, mini_batch),
            model_config,
            micro_batch_tokens,
            packing,
            pad_id=self.pad_id,
            backward_scale=self.config.coef,
        )
        return loss_sum / max(tokens, 1)


def load_demonstrations(
    config: DemoLossConfig, template: ChatTemplate, env_names: list[str], run_seed: int
) -> list[Example]:
    """Tokenized demonstrations; a missing file, a test task or nothing to train on is a clear
    error before any episode is played."""
    guards = [HeldOutGuard(name) for name in env_names]
    conversations = []
    for path in config.data:
        for conversation in read_conversations(Path(path)):
            for guard in guards:
                guard.check(conversation)
            conversations.append(conversation)
    chosen = sample_limit(conversations, config.limit, limit_seed(run_seed))
    examples = [tokenize(c, template, config.max_length) for c in chosen]
    kept = [e for e in examples if e is not None]
    if not kept:
        names = ", ".join(map(str, config.data))
        raise DataError(f"actor.demo_loss.data: no trainable conversations in {names}")
    return kept
