"""Conversation starts: AgentGym's text kept verbatim, and the default with its bugs fixed."""

from __future__ import annotations

import pytest

from agenttrain.envs import get_spec
from agenttrain.envs.prompts import FIXES, agentgym_conversation_start, fixed_instructions

AGENTGYM_ENVS = ("textcraft", "babyai", "sciworld", "alfworld", "webshop", "sqlgym", "searchqa")
LONG_ACK = "OK. I'll follow your instructions and try my best to solve the task."


def test_agentgym_textcraft_prompt_is_verbatim():
    user, assistant = agentgym_conversation_start("textcraft")
    assert (user.role, assistant.role) == ("user", "assistant")
    assert user.content.startswith("You are given few useful crafting recipes")
    assert 'format:"Thought:\nyour thoughts.\n\nAction:\nyour next action"\n\nReminder: \n1.' in (
        user.content
    )
    assert user.content.endswith('e.g. "dark oak planks" in the command instead.\n\n')
    assert assistant.content == LONG_ACK


@pytest.mark.parametrize("env", AGENTGYM_ENVS)
def test_every_environment_has_both_conversation_starts(env):
    spec = get_spec(env)
    assert [m.role for m in spec.conversation_start] == ["user", "assistant"]
    assert spec.agentgym_conversation_start == agentgym_conversation_start(env)
    expected_ack = "Ok." if env in ("webshop", "sqlgym", "searchqa") else LONG_ACK
    assert spec.conversation_start[1].content == expected_ack


@pytest.mark.parametrize("env", sorted(FIXES))
def test_each_fix_applies_to_agentgym_text(env):
    verbatim = agentgym_conversation_start(env)[0].content
    fixed = fixed_instructions(env)
    for old, new in FIXES[env]:
        assert old in verbatim
        assert new.strip() in fixed
    assert not any(line != line.rstrip() for line in fixed.splitlines())


def test_fixed_prompts_teach_the_actions_the_environments_accept():
    assert "- pickup <obj> <id>" in fixed_instructions("babyai")
    assert "pick up" not in fixed_instructions("babyai")
    textcraft = fixed_instructions("textcraft")
    assert "from the inventory or the environment, look-up" not in textcraft
    assert "you must use a specific type of that ingredient" in textcraft
    assert "Thought:\nyour thoughts.\n\nAction:\nyour next action" in textcraft
