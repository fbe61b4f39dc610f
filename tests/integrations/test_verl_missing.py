"""Without the verl extra, every verl feature says how to install it (no traceback soup)."""

from __future__ import annotations

import importlib
import sys

import pytest

from agenttrain.integrations.verl import VerlMissing, require_verl


def test_a_missing_verl_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)  # as if not installed
    with pytest.raises(VerlMissing, match=r"pip install 'agenttrain\[verl\]'"):
        require_verl("the agenttrain agent loop")
    monkeypatch.delitem(sys.modules, "agenttrain.integrations.verl.agent_loop", raising=False)
    with pytest.raises(VerlMissing, match="the agenttrain agent loop needs verl"):
        importlib.import_module("agenttrain.integrations.verl.agent_loop")


def test_the_interaction_and_settings_import_without_verl(monkeypatch):
    monkeypatch.setitem(sys.modules, "verl", None)
    for name in ("interaction", "settings", "workers"):
        monkeypatch.delitem(sys.modules, f"agenttrain.integrations.verl.{name}", raising=False)
        importlib.import_module(f"agenttrain.integrations.verl.{name}")
