"""ALFWorld's games in AgentGym's order: task id -> game file under `$ALFWORLD_DATA`.

`games.txt` lists AgentGym's `configs/mappings_train.json` (ids 0-2419, under
`json_2.1.1/train`) then `mappings_test.json` (ids 2420-2619, under `json_2.1.1/valid_train`),
one `<folder>/<task type>/<trial>` a line (reference: agentgym.md section 1.4).
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path

GAME_FILE = "game.tw-pddl"


@cache
def game_paths() -> tuple[str, ...]:
    text = resources.files("agenttrain.envs.alfworld").joinpath("games.txt").read_text()
    return tuple(text.split())


def game_file(data_dir: Path, task_id: int) -> Path:
    """The game file of AgentGym's task `task_id` inside an ALFWorld data folder."""
    paths = game_paths()
    if not 0 <= task_id < len(paths):
        raise IndexError(f"ALFWorld has games 0-{len(paths) - 1}, not {task_id}")
    return data_dir / "json_2.1.1" / paths[task_id] / GAME_FILE
