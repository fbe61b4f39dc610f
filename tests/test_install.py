"""The suite runs on the locked stack that `make demo` and `make test` both install."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "constraints.txt"


def locked_versions() -> dict[str, str]:
    pins = {}
    for line in LOCK.read_text().splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line.strip())
        if match:
            pins[match[1]] = match[2]
    return pins


def test_every_installed_package_of_the_lock_is_at_its_locked_version():
    pins = locked_versions()
    assert {"torch", "transformers", "tokenizers", "peft", "verl"} <= pins.keys()
    drifted = {}
    for name, pinned in pins.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # an extra this environment did not install
        if installed.split("+")[0] != pinned:
            drifted[name] = (installed, pinned)
    assert drifted == {}, f"installed (version, locked version) differ: {drifted}"
    assert metadata.version("transformers") == pins["transformers"]
