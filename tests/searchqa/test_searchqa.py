"""SearchQA in-process: BM25 retrieval over the bundled corpus, AgentGym's reply rules and
exact-match reward, corpus errors, the oracle through `agenttrain eval`, and the server
driven in AgentGym's searchqa dialect (reference: agentgym.md section 1.7)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests
from typer.testing import CliRunner

from agenttrain.cli import app
from agenttrain.envs import get_spec, make_env
from agenttrain.envs.agentgym import SEARCHQA
from agenttrain.envs.searchqa import CorpusError, SearchQAEnv
from agenttrain.envs.searchqa.bundled import build, jsonl, records
from agenttrain.envs.searchqa.env import CORRECT, INCORRECT, INVALID, first_observation
from agenttrain.envs.searchqa.reward import answer_reward, normalize_answer
from agenttrain.serving.launch import start_server


@pytest.fixture(scope="module")
def env() -> SearchQAEnv:
    return SearchQAEnv()


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_bundled_files_are_what_the_generator_writes():
    for path, rows in records(build()):
        assert path.read_text(encoding="utf-8") == jsonl(rows), path.name


def test_every_bundled_question_retrieves_its_gold_passage_among_distractors(env):
    top_one = 0
    for question in env.questions.questions:
        found = [p.id for p in env.index.search(question.question, 3)]
        assert question.gold in found, question.question
        top_one += found[0] == question.gold
    assert top_one >= 0.95 * len(env.questions)  # 417 of 420 when written


def test_search_shows_three_passages_in_agentgyms_format(env):
    env.reset_sync(0)
    result = env.step_sync(
        "<think>I need the founder.</think>\n<search>Who founded Gosby?</search>"
    )
    assert (result.reward, result.done) == (0.0, False)
    text = result.observation
    assert text.startswith("<information>Doc 1(Title: Gosby) Gosby is a harbour town")
    assert text.endswith("</information>") and "\n</information>" not in text
    assert [line.split("(")[0] for line in text.splitlines()] == [
        "<information>Doc 1",
        "Doc 2",
        "Doc 3",
    ]


def test_query_punctuation_is_text_not_fts_syntax(env):
    env.reset_sync(0)
    for query in ('"Gosby', "Gosby AND NOT (", "founded: Gosby*", "NEAR(a b)"):
        result = env.step_sync(f"<search>{query}</search>")
        assert result.observation.startswith("<information>Doc 1"), query
    assert env.step_sync("<search> ?! </search>").observation == "<information></information>"


@pytest.mark.parametrize(
    ("prediction", "gold", "same"),
    [
        ("The Amber Sea", "amber sea", True),
        ("  amber   sea. ", "Amber Sea", True),
        ("an apple", "Apple", True),
        ("Mount Vel-dor", "mount veldor", True),
        ("theory", "ory", False),  # articles only as whole words
        ("Amber Seas", "Amber Sea", False),
        ("Amber Sea and Grey Sound", "Amber Sea", False),  # exact, not substring
    ],
)
def test_answers_are_normalised_as_agentgym_does(prediction, gold, same):
    assert (normalize_answer(prediction) == normalize_answer(gold)) is same


def test_reward_reads_the_last_answer_of_the_reply():
    assert answer_reward("<answer>Paris</answer> no, <answer>Rome</answer>", ["Rome"]) == 1.0
    assert answer_reward("<answer>Rome</answer> no, <answer>Paris</answer>", ["Rome"]) == 0.0
    assert answer_reward("<answer>  the rome </answer>", ["Rome", "Roma"]) == 1.0
    assert answer_reward("Rome", ["Rome"]) == 0.0


def test_answer_ends_the_episode_only_when_correct(env):
    first = env.reset_sync(0)
    assert first.text == first_observation("Who founded the town of Gosby?")
    assert first.text.endswith(
        "Follow this process every time.\n\n Question: Who founded the town of Gosby?"
    )
    wrong = env.step_sync("<answer>Gosby</answer>")
    assert (wrong.observation, wrong.reward, wrong.done) == (INCORRECT, 0.0, False)
    invalid = env.step_sync("I think it is Baefor Brurk.")
    assert (invalid.observation, invalid.reward, invalid.done) == (INVALID, 0.0, False)
    # The first tag decides the action: a search before an answer is a search.
    searched = env.step_sync("<search>Gosby</search><answer>Baefor Brurk</answer>")
    assert searched.observation.startswith("<information>") and searched.reward == 0.0
    right = env.step_sync("<think>Found it.</think><answer>baefor brurk</answer>")
    assert (right.observation, right.reward, right.done) == (CORRECT, 1.0, True)


def test_spec_keeps_agentgyms_dialect_turns_and_splits():
    spec = get_spec("searchqa")
    assert (spec.protocol.id_field, spec.protocol.task_field) == ("env_idx", "id")
    assert spec.default_max_turns == 5
    splits = spec.splits()
    assert (len(splits["train"]), len(splits["test"])) == (315, 105)
    assert set(splits["train"]).isdisjoint(splits["test"])
    # AgentGym's server's own task ids stay available, for runs against it (--server)
    for name, ids in SEARCHQA.splits().items():
        assert splits[f"agentgym_{name}"] == ids


def test_a_user_corpus_and_questions_from_kwargs_and_env_vars(tmp_path, monkeypatch):
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl",
        [
            {"id": "a", "title": "Kettle", "text": "A kettle boils water for tea."},
            {"id": "b", "title": "Teapot", "text": "A teapot steeps the leaves."},
        ],
    )
    questions = write_jsonl(
        tmp_path / "questions.jsonl",
        [{"question": "What boils water?", "answers": ["a kettle"], "gold": "a"}],
    )
    from_kwargs = make_env("searchqa", corpus=str(corpus), questions=str(questions))
    monkeypatch.setenv("AGENTTRAIN_SEARCHQA_CORPUS", str(corpus))
    monkeypatch.setenv("AGENTTRAIN_SEARCHQA_QUESTIONS", str(questions))
    for env in (from_kwargs, SearchQAEnv()):
        env.reset_sync(0)
        found = env.step_sync("<search>boils water</search>").observation
        assert found.startswith("<information>Doc 1(Title: Kettle) A kettle boils water")
        assert env.step_sync("<answer>Kettle</answer>").reward == 1.0
        with pytest.raises(CorpusError, match=r"task 1 is not in .*1 questions: task ids 0-0"):
            env.reset_sync(1)


@pytest.mark.parametrize(
    ("corpus_text", "questions_rows", "message"),
    [
        (None, None, r"corpus file .*missing.jsonl does not exist"),
        (
            '{"id": "a", "title": "T", "text": "x"}\n{"id": "a"',
            None,
            r"corpus.jsonl:2: not valid JSON",
        ),
        (
            '{"id": "a", "title": "T"}\n',
            None,
            r"corpus.jsonl:1: field 'text' must be a string \(missing\)",
        ),
        ('{"id": 3, "title": "T", "text": "x"}\n', None, r"field 'id' must be a string \(a int\)"),
        (
            '{"id": "a", "title": "T", "text": "x"}\n{"id": "a", "title": "U", "text": "y"}\n',
            None,
            r"corpus.jsonl:2: passage id 'a' already on line 1",
        ),
        ("\n", None, r"corpus file .* has no passages"),
        (
            '{"id": "a", "title": "T", "text": "x"}\n',
            [{"question": "q?", "answers": []}],
            r"questions.jsonl:1: field 'answers' must be a non-empty list",
        ),
        (
            '{"id": "a", "title": "T", "text": "x"}\n',
            [{"question": "q?", "answers": ["x"], "gold": "zz"}],
            r"1 question\(s\) of .* name a gold passage that is not in the corpus .*'zz'",
        ),
    ],
)
def test_corpus_errors_name_the_file_line_and_field(tmp_path, corpus_text, questions_rows, message):
    corpus = tmp_path / ("missing.jsonl" if corpus_text is None else "corpus.jsonl")
    if corpus_text is not None:
        corpus.write_text(corpus_text)
    questions = write_jsonl(
        tmp_path / "questions.jsonl",
        questions_rows or [{"question": "q?", "answers": ["x"]}],
    )
    with pytest.raises(CorpusError, match=message):
        SearchQAEnv(corpus=corpus, questions=questions)


def test_oracle_solves_every_test_question_through_agenttrain_eval(tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(
        app,
        ["eval", "--env", "searchqa", "--model", "oracle", "--split", "test", "--out", str(out)],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    episodes = [json.loads(line) for line in (out / "oracle" / "episodes.jsonl").open()]
    assert len(episodes) == 105
    assert all(e["reward"] == 1.0 and e["num_turns"] == 2 for e in episodes)


@pytest.fixture(scope="module")
def searchqa_url():
    server = start_server("searchqa")
    yield server.url
    server.stop()


def test_served_in_agentgyms_searchqa_dialect(searchqa_url):
    """What AgentGym's SearchQAEnvClient sends, and the shapes it reads back."""

    def post(route: str, body: dict):
        response = requests.post(f"{searchqa_url}/{route}", json=body, timeout=30)
        assert response.status_code == 200
        return response.json()

    assert requests.get(searchqa_url, timeout=5).json() == "ok"
    env_idx = post("create", {"id": 0})
    assert isinstance(env_idx, int)
    question = post("reset", {"env_idx": env_idx, "id": 3})
    assert question == first_observation("What are the workshops of Pemmoor known for?")
    observed = requests.get(f"{searchqa_url}/observation", params={"env_idx": env_idx}, timeout=5)
    assert observed.json() == question
    searched = post("step", {"env_idx": env_idx, "action": "<search>Pemmoor workshops</search>"})
    assert set(searched) == {"observation", "reward", "done", "info"}
    assert searched["observation"].startswith("<information>Doc 1(Title: Pemmoor)")
    assert (searched["reward"], searched["done"], searched["info"]) == (0, False, None)
    answered = post("step", {"env_idx": env_idx, "action": "<answer>Clay lamps.</answer>"})
    assert (answered["observation"], answered["reward"], answered["done"]) == (CORRECT, 1, True)
    assert post("close", {"env_idx": env_idx}) is True
    assert post("close", {"env_idx": env_idx}) is False
