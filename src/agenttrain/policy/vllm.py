"""vLLM as a token policy (optional extra `agenttrain[vllm]`, Linux with a CUDA GPU).

Imported lazily. Prefix caching keeps each episode's context cached across turns, as the
HF backend's arena does. Log-probabilities are requested in vLLM's `processed_logprobs`
mode, i.e. after its logits processors (temperature; in some vLLM versions also the top-p/top-k
cut, renormalised). The HF backend records them before any top-p/top-k cut, so the two agree
only with top_p=1 and top_k=0; the trainer recomputes old log-probs by default and logs the
gap as `training/rollout_probs_diff_*` (docs/rollout.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agenttrain.policy.base import Generation, GenerationRequest, PolicyError, SamplingParams
from agenttrain.policy.chat import ChatTemplate

INSTALL_HINT = "pip install 'agenttrain[vllm]' (Linux with a CUDA GPU)"


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as missing:
        raise PolicyError(
            f"the vllm backend needs vLLM, which is not installed: {INSTALL_HINT}"
        ) from missing
    return vllm


class VLLMPolicy:
    def __init__(
        self,
        model_path: str,
        *,
        name: str,
        system_prompt: str | None = None,
        max_context: int = 8192,
        gpu_memory_utilization: float = 0.7,
        **engine_args: Any,
    ) -> None:
        vllm = import_vllm()
        self.name = name
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=model_path,
            dtype="bfloat16",
            enable_prefix_caching=True,
            max_model_len=max_context,
            gpu_memory_utilization=gpu_memory_utilization,
            logprobs_mode="processed_logprobs",
            **engine_args,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.template = ChatTemplate(self.tokenizer, system_prompt)
        self.max_context = max_context

    def generate(
        self, requests: Sequence[GenerationRequest], sampling: SamplingParams
    ) -> list[Generation]:
        prompts = [{"prompt_token_ids": list(r.prompt_ids)} for r in requests]
        params = [
            self._vllm.SamplingParams(
                temperature=sampling.temperature,
                top_p=sampling.top_p,
                top_k=sampling.top_k or -1,
                max_tokens=r.max_new_tokens or sampling.max_new_tokens,
                seed=r.seed,
                logprobs=0,
                stop_token_ids=sorted(self.template.stop_ids),
                skip_special_tokens=False,
            )
            for r in requests
        ]
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        results = []
        for output in outputs:
            sample = output.outputs[0]
            ids = list(sample.token_ids)
            logprobs = [
                step[token].logprob for step, token in zip(sample.logprobs, ids, strict=True)
            ]
            stopped = bool(ids) and ids[-1] in self.template.stop_ids
            results.append(Generation(ids, logprobs, "stop" if stopped else "length"))
        return results

    def release(self, key: str) -> None:
        """vLLM's prefix cache evicts on its own."""
