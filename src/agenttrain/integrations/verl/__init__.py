"""agenttrain inside verl (scale-out on Ray with FSDP/Megatron and vLLM/SGLang), without a fork.

- `agent_loop`: an `AgentLoopBase` (verl >= 0.8) that plays one episode of any agenttrain
  environment per dataset row (`agent_name: agenttrain`).
- `interaction`: a `BaseInteraction`-compatible class for verl <= 0.7.
- `data`: verl parquet for any environment and split.
- `overrides`: our recipe as verl's Hydra overrides; `launch`: `python -m verl.trainer.main_ppo`.

verl is the optional extra `agenttrain[verl]` (tested with verl 0.9.1); nothing here imports it
at module level except the agent loop, which only exists inside verl.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any

VERL_VERSION = "0.9.1"
"""The verl release these modules are tested against."""
INSTALL_HINT = "pip install 'agenttrain[verl]'  (verl[verl-core]==0.9.1, CPU or GPU)"


class VerlMissing(ImportError):
    """verl (or a piece of it this feature needs) is not installed."""


def require_verl(feature: str) -> Any:
    """Import verl, or fail with the install command for `feature`."""
    try:
        import verl
    except ImportError as missing:
        raise VerlMissing(f"{feature} needs verl, which is not installed: {INSTALL_HINT}") from (
            missing
        )
    return verl


def installed_verl_version() -> str | None:
    try:
        return metadata.version("verl")
    except metadata.PackageNotFoundError:
        return None
