"""ALFWorld (AgentGym): household tasks in TextWorld, in-process when `alfworld` and its data
are installed, else through AgentGym's server.

`register_alfworld()` decides which: with the package and `$ALFWORLD_DATA` it registers the
in-process environment (in worker processes); without, the server-only spec whose
requirements name what is missing, so `agenttrain envs` and every refusal say it.
"""

from __future__ import annotations

from dataclasses import replace

from agenttrain.envs.agentgym import ALFWORLD
from agenttrain.envs.alfworld.env import SPEC, AlfWorldEnv
from agenttrain.envs.alfworld.requirements import ALFWorldUnavailable, describe_missing, missing
from agenttrain.envs.registry import Registration, register

WORKERS = 4


def register_alfworld(*, replace_existing: bool = False) -> Registration:
    gaps = missing()
    if gaps:
        remote = replace(ALFWORLD, requirements=describe_missing(gaps))
        return register("alfworld", spec=remote, replace=replace_existing)
    return register("alfworld", AlfWorldEnv, process_workers=WORKERS, replace=replace_existing)


__all__ = ["SPEC", "ALFWorldUnavailable", "AlfWorldEnv", "register_alfworld"]
