"""Action parsing follows AgentGym's clients per environment; other formats round-trip."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

import agenttrain.agent
from agenttrain.agent.formats import ONE_ACTION, REACT_HELP, get_format
from agenttrain.envs import InvalidAction, get_spec


def test_textcraft_react_keeps_the_action_line_and_strips_punctuation():
    parsed = get_format("react", "textcraft").parse(
        "Thought: I need planks.\n\nAction: craft 4 oak planks using 1 oak logs.\nmore text"
    )
    assert parsed.action == "craft 4 oak planks using 1 oak logs"
    assert parsed.thought == "I need planks."
    assert not parsed.format_error


def test_textcraft_rejects_two_actions_like_agentgym():
    parsed = get_format("react", "textcraft").parse("Action: get 1 a\nAction: get 1 b")
    assert parsed.action is None and parsed.feedback == ONE_ACTION and parsed.format_error


@pytest.mark.parametrize("reply", ["I will get wheat.", "Action:", "Thought: hmm"])
def test_a_reply_without_an_action_is_a_format_error(reply):
    parsed = get_format("react", "textcraft").parse(reply)
    assert parsed.action is None and parsed.format_error and parsed.feedback == REACT_HELP


def test_webshop_takes_everything_after_the_last_action_or_a_bare_click():
    react = get_format("react", "webshop")
    assert react.parse("Thought: x\nAction: a\nAction: click[Buy Now]").action == "click[Buy Now]"
    assert react.parse("search[red shirt]").action == "search[red shirt]"


def test_sqlgym_reads_the_sql_block():
    reply = "Thought: count them\n\nAction: ```sql\nSELECT COUNT(*) FROM t;\n```"
    assert get_format("react", "sqlgym").parse(reply).action == "SELECT COUNT(*) FROM t;"
    assert get_format("react", "sqlgym").parse("SELECT 1").format_error


def test_babyai_reads_one_action_line_cleaned_as_agentgyms_client_and_rejects_two():
    react = get_format("react", "babyai")
    parsed = react.parse("Thought: go.\nAction: go to  red-ball 1.\nThen more")
    assert parsed.action == "go to redball 1" and parsed.thought == "go."
    assert react.parse("Action: turn left\nAction: turn right").feedback == ONE_ACTION


def test_searchqa_sends_the_whole_reply():
    reply = "  <think>who?</think><search>capital of France</search>\n"
    assert get_format("react", "searchqa").parse(reply).action == reply.strip()


@pytest.mark.parametrize("env", ["alfworld", "sciworld", "webshop", "largest"])
def test_other_environments_take_everything_after_the_last_action(env):
    react = get_format("react", env)
    assert react.parse("Thought: a\nAction: x\nAction: open fridge 1.\n").action == (
        "open fridge 1."
    )
    assert react.parse("Thought: only thinking").feedback == REACT_HELP


def test_react_uses_the_parser_of_the_spec_it_is_given():
    def shout(reply: str) -> str:
        if "!" not in reply:
            raise InvalidAction("Say it louder.")
        return reply.split("Action:")[-1].strip().upper()

    spec = dataclasses.replace(get_spec("largest"), name="shout-test", parse_action=shout)
    react = get_format("react", spec)
    assert react.parse("Thought: t\nAction: go!").action == "GO!"
    refused = react.parse("Thought: t\nAction: go")
    assert refused.format_error and refused.feedback == "Say it louder." and refused.thought == "t"


def test_the_agent_package_names_no_environment():
    from agenttrain.envs import registrations

    names = {r.spec.name for r in registrations()}
    for source in Path(agenttrain.agent.__file__).parent.glob("*.py"):
        text = source.read_text().lower()
        assert not [n for n in names if re.search(rf"\b{n}\b", text)], source.name


def test_adapt_thought_lines_are_answered_ok_without_acting():
    adapt = get_format("adapt", "textcraft")
    thinking = adapt.parse("> think: I need 3 wheat first.")
    assert thinking.action is None and thinking.feedback == "OK." and not thinking.format_error
    acting = adapt.parse("> think: now bread\n> craft 1 bread using 3 wheat")
    assert acting.action == "craft 1 bread using 3 wheat" and acting.thought == "now bread"
    assert adapt.parse("> get 1 a\n> get 1 b").format_error


def test_json_format_needs_an_action_field():
    json_format = get_format("json", "textcraft")
    parsed = json_format.parse('```json\n{"thought": "t", "action": "get 3 wheat"}\n```')
    assert parsed.action == "get 3 wheat" and parsed.thought == "t"
    assert json_format.parse('{"thought": "t"}').format_error
    assert json_format.parse("not json").format_error


@pytest.mark.parametrize("name", ["react", "adapt", "json", "raw"])
def test_every_format_parses_what_it_renders(name):
    action_format = get_format(name, "textcraft")
    parsed = action_format.parse(action_format.render("I need wheat.", "get 3 wheat"))
    assert parsed.action == "get 3 wheat"


def test_unknown_formats_name_the_choices():
    with pytest.raises(ValueError, match="react, adapt, json, raw"):
        get_format("xml", "textcraft")
