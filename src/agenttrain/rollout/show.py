"""`agenttrain show`: one episode as a readable, coloured transcript."""

from __future__ import annotations

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from agenttrain.rollout.trajectory import Trajectory

ROLE_STYLE = {"system": "magenta", "user": "yellow", "assistant": "cyan"}
START_PREVIEW = 400


def render(trajectory: Trajectory, full: bool = False, tokenizer: object = None) -> Group:
    """The transcript; the conversation start is shortened unless `full`.

    Texts are rendered literally (never as Rich markup): observations are full of brackets.
    """
    outcome = "[green]success[/]" if trajectory.success else "[red]no success[/]"
    reward = "none (environment error)" if trajectory.reward is None else f"{trajectory.reward:g}"
    header = Text.from_markup(
        f"[bold]{escape(trajectory.env)}[/] task {trajectory.task_id} · model "
        f"{escape(trajectory.model)} · {outcome} · reward {reward} · {trajectory.num_turns} "
        f"turns · finish {trajectory.finish_reason} · format errors {trajectory.format_errors}"
    )
    parts: list[RenderableType] = [header]
    if trajectory.task_info:
        details = ", ".join(f"{k}={v}" for k, v in trajectory.task_info.items())
        parts.append(Text(f"task: {details}", style="dim"))
    if trajectory.error:
        parts.append(Text(f"environment error: {trajectory.error}", style="bold red"))
    # The last `num_turns` assistant messages are the episode's turns; what precedes the first
    # of them (instructions, acknowledgement, first observation) is its start.
    replies = [i for i, m in enumerate(trajectory.messages) if m["role"] == "assistant"]
    turn_at = replies[len(replies) - trajectory.num_turns :] if trajectory.num_turns else []
    first_turn = turn_at[0] if turn_at else len(trajectory.messages)
    for index, message in enumerate(trajectory.messages):
        content = message["content"]
        if index < first_turn - 1 and not full and len(content) > START_PREVIEW:
            content = f"{content[:START_PREVIEW]} … ({len(content)} characters; --full shows all)"
        title = message["role"]
        if index in turn_at:
            number = turn_at.index(index)
            record = trajectory.turns[number]
            note = "format error" if record.format_error else f"action: {record.action}"
            title = f"assistant · turn {number + 1} · {note}"
        style = ROLE_STYLE.get(message["role"], "white")
        parts.append(
            Panel(Text(content), title=Text(title), title_align="left", border_style=style)
        )
    if trajectory.turns and trajectory.finish_reason == "done":
        last = trajectory.turns[-1]
        title = Text(f"final observation · reward {last.reward:g}")
        parts.append(
            Panel(Text(last.observation), title=title, title_align="left", border_style="green")
        )
    if tokenizer is not None and trajectory.response_ids:
        parts += [Rule("response tokens (trained on: bold)"), _token_view(trajectory, tokenizer)]
    return Group(*parts)


def _token_view(trajectory: Trajectory, tokenizer: object) -> Text:
    text = Text()
    for token, mask in zip(trajectory.response_ids, trajectory.response_mask, strict=True):
        piece = tokenizer.decode([token])  # type: ignore[attr-defined]
        text.append(piece, style="bold cyan" if mask else "dim")
    return text


def show(
    trajectory: Trajectory,
    console: Console | None = None,
    full: bool = False,
    tokenizer: object = None,
) -> None:
    (console or Console()).print(render(trajectory, full, tokenizer))
