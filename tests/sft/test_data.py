"""SFT data: three input formats, assistant-only loss masks laid out like rollout episodes."""

from __future__ import annotations

import json

import pytest

from agenttrain.policy.chat import ChatTemplate
from agenttrain.rollout.trajectory import read_jsonl
from agenttrain.sft.data import DataError, read_conversations
from agenttrain.sft.tokenize import long_replies, reply_lengths, tokenize

END = "<|im_end|>"


def trained_text(example, tokenizer) -> list[str]:
    """The trained spans of an example, decoded (one string per contiguous span)."""
    spans, current = [], []
    for token, flag in zip(example.ids, example.mask, strict=True):
        if flag:
            current.append(token)
        elif current:
            spans.append(tokenizer.decode(current))
            current = []
    if current:
        spans.append(tokenizer.decode(current))
    return spans


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.mark.parametrize("fixture", ["demos_file", "adapt_demos_file"])
def test_trajectories_train_on_the_episode_turns_not_the_conversation_start(
    fixture, request, tokenizer
):
    demos_file = request.getfixturevalue(fixture)
    template = ChatTemplate(tokenizer)
    episode = next(read_jsonl(demos_file))
    conversation = next(read_conversations(demos_file))
    example = tokenize(conversation, template, max_length=8192)
    replies = [m["content"] for m in episode.messages if m["role"] == "assistant"]
    acknowledgement, actions = replies[0], replies[1:]
    assert len(actions) == episode.num_turns
    assert trained_text(example, tokenizer) == [reply + END for reply in actions]
    assert acknowledgement not in "".join(trained_text(example, tokenizer))
    # the token layout is the chat template's rendering of the transcript (as in rollouts)
    last = max(i for i, m in enumerate(conversation.messages) if m["role"] == "assistant")
    rendered = tokenizer.apply_chat_template(
        conversation.messages[: last + 1], tokenize=False, add_generation_prompt=False
    )
    full = tokenizer.encode(rendered, add_special_tokens=False)
    assert full[: len(example.ids)] == example.ids
    assert tokenizer.decode(full[len(example.ids) :]).strip() == ""


def test_reply_lengths_count_each_trained_reply_with_its_end_of_turn(demos_file, tokenizer):
    """Deep TextCraft goals' demonstrations quote three or four recipes before the action:
    135 tokens, where GRPO and evaluation let the policy write 96. The check counts each
    reply as generating it costs, so the warning names the replies that get cut."""
    template = ChatTemplate(tokenizer)
    conversation = next(read_conversations(demos_file))
    example = tokenize(conversation, template, max_length=8192)
    trained = [
        len(template.encode(m["content"])) + 1  # the reply and its end-of-turn
        for m, flag in zip(conversation.messages, conversation.trainable, strict=True)
        if flag
    ]
    assert reply_lengths(example) == trained
    longest = max(trained)
    assert long_replies([example], longest) is None
    warning = long_replies([example, example], longest - 1)
    count = 2 * trained.count(longest)
    assert warning.startswith(f"{count} of {2 * len(trained)} trained replies are longer than")
    assert f"(longest {longest}," in warning


def test_agenttraj_trains_gpt_turns_unless_loss_is_false(tmp_path, tokenizer):
    path = write(
        tmp_path / "agenttraj.jsonl",
        [
            {
                "item_id": "textcraft_7",
                "conversations": [
                    {"from": "human", "loss": None, "value": "Instructions."},
                    {"from": "gpt", "loss": False, "value": "OK."},
                    {"from": "human", "loss": None, "value": "Goal: craft stick."},
                    {
                        "from": "gpt",
                        "loss": True,
                        "value": "Thought: planks.\nAction: get 2 oak planks",
                    },
                    {"from": "human", "loss": None, "value": "Got 2 oak planks"},
                    {
                        "from": "gpt",
                        "value": "Thought: now.\nAction: craft 4 stick using 2 oak planks",
                    },
                ],
            }
        ],
    )
    (conversation,) = read_conversations(path)
    assert conversation.env == "textcraft" and conversation.task_id is None
    example = tokenize(conversation, ChatTemplate(tokenizer), max_length=4096)
    assert trained_text(example, tokenizer) == [
        "Thought: planks.\nAction: get 2 oak planks" + END,
        "Thought: now.\nAction: craft 4 stick using 2 oak planks" + END,
    ]
    assert "Goal: craft stick." in tokenizer.decode(example.ids)


def test_chat_messages_train_assistant_turns_and_keep_the_system_prompt(tmp_path, tokenizer):
    path = write(
        tmp_path / "chat.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "2+2?"},
                    {"role": "assistant", "content": "4"},
                    {"role": "user", "content": "and 3+3?"},
                    {"role": "assistant", "content": "6", "loss": False},
                    {"role": "user", "content": "5+5?"},
                    {"role": "assistant", "content": "10"},
                ]
            }
        ],
    )
    (conversation,) = read_conversations(path)
    example = tokenize(conversation, ChatTemplate(tokenizer), max_length=4096)
    assert trained_text(example, tokenizer) == ["4" + END, "10" + END]
    text = tokenizer.decode(example.ids)
    assert text.startswith("<|im_start|>system\nBe brief.") and "and 3+3?" in text


def test_truncation_keeps_what_fits_and_drops_conversations_with_nothing_left(
    demos_file, tokenizer
):
    template = ChatTemplate(tokenizer)
    conversation = next(read_conversations(demos_file))
    full = tokenize(conversation, template, max_length=8192)
    cut = tokenize(conversation, template, max_length=len(full.ids) - 5)
    assert cut.truncated and cut.ids == full.ids[: len(full.ids) - 5]
    assert tokenize(conversation, template, max_length=64) is None  # only instructions fit


def test_unsuccessful_trajectories_are_skipped_unless_asked_for(tmp_path, demos_file):
    records = [json.loads(line) for line in demos_file.read_text().splitlines()[:2]]
    records[1]["success"] = False
    path = write(tmp_path / "mixed.jsonl", records)
    assert len(list(read_conversations(path))) == 1
    assert len(list(read_conversations(path, successful_only=False))) == 2


def test_bad_lines_name_the_file_and_line(tmp_path):
    path = write(tmp_path / "bad.jsonl", [{"messages": [{"role": "user", "content": "hi"}]}])
    path.write_text(path.read_text() + '{"conversations": [{"from": "robot", "value": "x"}]}\n')
    with pytest.raises(DataError, match=r"bad.jsonl:2: unknown speaker 'robot'"):
        list(read_conversations(path))
    with pytest.raises(DataError, match="no such data file"):
        list(read_conversations(tmp_path / "missing.jsonl"))
    (tmp_path / "broken.jsonl").write_text("{not json\n")
    with pytest.raises(DataError, match=r"broken\.jsonl:1"):
        list(read_conversations(tmp_path / "broken.jsonl"))


def test_a_reply_cut_off_by_the_token_limit_does_not_train_its_end_of_turn(
    tmp_path, demos_file, tokenizer
):
    record = json.loads(demos_file.read_text().splitlines()[0])
    assert len(record["turns"]) >= 2
    record["turns"][0]["cut_off"] = True  # as the engine marks a reply that hit max_new_tokens
    path = write(tmp_path / "cut.jsonl", [record])
    template = ChatTemplate(tokenizer)
    example = tokenize(next(read_conversations(path)), template, max_length=8192)
    spans = trained_text(example, tokenizer)
    actions = [m["content"] for m in record["messages"] if m["role"] == "assistant"][1:]
    # As in RL, where the template closes a cut-off turn with mask 0: the first reply is
    # trained without its end-of-turn token, the later ones with it.
    assert spans == [actions[0]] + [reply + END for reply in actions[1:]]
