"""`envs/` stands alone: nothing in it imports the rollout, policy or training layers.

Environments are the bottom layer; a plug-in author or the verl agent loop must be able to
use them without pulling in a trainer (and torch) behind them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import agenttrain.envs

ABOVE = ("agenttrain.rl", "agenttrain.policy", "agenttrain.rollout")


def imported_modules(source: Path) -> set[str]:
    """Every module an `import` names in `source`, lazy and type-checking imports included."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_no_module_of_envs_imports_a_layer_above_it():
    package = Path(agenttrain.envs.__file__).parent
    offending = {
        f"{source.relative_to(package)}: {name}"
        for source in package.rglob("*.py")
        for name in imported_modules(source)
        if name.startswith(ABOVE)
    }
    assert not offending


def test_using_every_environment_loads_no_layer_above_envs():
    script = (
        "import sys\n"
        "from agenttrain.envs import make_env, registrations\n"
        "for entry in registrations():\n"
        "    entry.spec.splits()\n"
        "    if entry.in_process:\n"
        "        make_env(entry.spec.name)\n"
        f"print(sorted(m for m in sys.modules if m.startswith({ABOVE!r})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120
    )
    assert result.stdout.strip() == "[]"
