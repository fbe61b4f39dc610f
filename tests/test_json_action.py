"""The strict JSON action rule: exactly one object of the schema, or a reason and -1."""

from __future__ import annotations

import pytest

from agenttrain.envs.actions import InvalidAction
from agenttrain.envs.json_action import (
    JsonField,
    JsonFormatError,
    JsonSchema,
    compose_reward,
)

DECISION = JsonSchema(
    (JsonField("work", "number", 0.0, 1.0), JsonField("consumption", "number", 0.0, 1.0))
)


def test_one_object_of_the_schema_is_read_with_whitespace_around_it():
    assert DECISION.parse('  {"work": 0.83, "consumption": 0.69}\n') == {
        "work": 0.83,
        "consumption": 0.69,
    }
    assert DECISION.parse('{"consumption": 0, "work": 1}') == {"work": 1, "consumption": 0}


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ('{"work": 0.5, "consumption": 0.2', "malformed JSON"),
        ("{'work': 0.5, 'consumption': 0.2}", "malformed JSON"),
        ('Sure! {"work": 0.5, "consumption": 0.2}', "text before the JSON object"),
        ('{"work": 0.5, "consumption": 0.2} Hope this helps.', "text after the JSON object"),
        ('{"work": 0.5, "consumption": 0.2}{"work": 0.1, "consumption": 0.1}', "text after"),
        ('```json\n{"work": 0.5, "consumption": 0.2}\n```', "text before the JSON object"),
        ('{"work": 0.5}', "missing field(s) 'consumption'"),
        ('{"work": 1.2, "consumption": 0.2}', "'work' is 1.2, outside its range [0, 1]"),
        ('{"work": 0.5, "consumption": -0.01}', "'consumption' is -0.01, outside"),
        ('{"work": NaN, "consumption": 0.2}', "NaN is not a JSON number"),
        ('{"work": 0.5, "consumption": Infinity}', "Infinity is not a JSON number"),
        ('{"work": 1e999, "consumption": 0.2}', "1e999 overflows"),
        ('{"work": "0.5", "consumption": 0.2}', "'work' must be a number, got \"0.5\""),
        ('{"work": true, "consumption": 0.2}', "'work' must be a number, got true"),
        ('{"work": 0.5, "consumption": 0.2, "why": "x"}', "unexpected field(s) 'why'"),
        ('{"work": 0.5, "work": 0.4, "consumption": 0.2}', "'work' appears twice"),
        ("[0.5, 0.2]", "no JSON object"),
        ("", "empty reply"),
    ],
)
def test_every_break_of_the_rule_is_a_format_error_with_its_reason(reply, reason):
    with pytest.raises(JsonFormatError) as refused:
        DECISION.parse(reply)
    assert reason in str(refused.value)
    assert isinstance(refused.value, InvalidAction)  # ReAct's parsers may raise it too


def test_fences_are_tolerated_only_when_the_schema_says_so():
    fenced = '```json\n{"work": 0.5, "consumption": 0.2}\n```'
    lenient = JsonSchema(DECISION.fields, fences=True)
    assert lenient.parse(fenced) == {"work": 0.5, "consumption": 0.2}
    with pytest.raises(JsonFormatError, match="text before the JSON object"):
        lenient.parse(fenced + " done")  # a fence with text after it is no fence


def test_extra_fields_can_be_ignored_and_optional_fields_left_out():
    schema = JsonSchema(
        (JsonField("work", minimum=0, maximum=1), JsonField("note", "string", required=False)),
        extra_fields="ignore",
    )
    assert schema.parse('{"work": 1, "why": "x"}') == {"work": 1}
    assert schema.parse('{"work": 1, "note": "ok"}') == {"work": 1, "note": "ok"}
    with pytest.raises(JsonFormatError, match="'note' must be a string"):
        schema.parse('{"work": 1, "note": 3}')


def test_integer_fields_refuse_fractions():
    schema = JsonSchema((JsonField("count", "integer", 1, 3),))
    assert schema.parse('{"count": 2}') == {"count": 2}
    with pytest.raises(JsonFormatError, match="must be an integer"):
        schema.parse('{"count": 2.5}')


def test_composed_reward_is_the_penalty_on_format_failure_else_the_environments():
    def reward_of(action):
        return action["work"] + action["consumption"]

    good = compose_reward('{"work": 0.25, "consumption": 0.5}', DECISION, reward_of)
    assert (good.reward, good.format_error) == (0.75, None)
    assert good.action == {"work": 0.25, "consumption": 0.5}
    bad = compose_reward('{"work": 2, "consumption": 0.5}', DECISION, reward_of)
    assert (bad.reward, bad.action) == (-1.0, None)
    assert "outside its range" in bad.format_error
    assert compose_reward("no", DECISION, reward_of, format_penalty=-5.0).reward == -5.0


def test_example_shows_fields_and_ranges_for_prompts():
    assert DECISION.example() == ('{"work": <number in [0, 1]>, "consumption": <number in [0, 1]>}')
