"""Typed configuration: a YAML recipe plus dotted `key=value` overrides, validated up front.

An unknown key is an error naming the key, where it sits and the keys allowed there (with a
did-you-mean); a bad value is an error naming the key, the value and what is allowed. Nothing
is silently ignored.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ConfigError(ValueError):
    """The configuration is invalid; the message says where and what is allowed."""


def _section_type(annotation: Any) -> type[BaseModel] | None:
    """The model class behind a field annotation (unwrapping `X | None`), if it is one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        for member in typing.get_args(annotation):
            found = _section_type(member)
            if found is not None:
                return found
    return None


def _unknown(key: str, where: str, allowed: Sequence[str]) -> ConfigError:
    close = difflib.get_close_matches(key.split(".")[-1], allowed, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(
        f"unknown key {key!r}{hint}; allowed in {where or 'the top level'}: {', '.join(allowed)}"
    )


def check_keys(data: dict[str, Any], model: type[BaseModel], prefix: str = "") -> None:
    """Reject keys the model does not define, recursively."""
    fields = model.model_fields
    for key, value in data.items():
        path = f"{prefix}.{key}" if prefix else key
        if key not in fields:
            raise _unknown(path, prefix, list(fields))
        section = _section_type(fields[key].annotation)
        if section is not None and isinstance(value, dict):
            check_keys(value, section, path)


def apply_override(data: dict[str, Any], assignment: str, model: type[BaseModel]) -> None:
    """Apply one `dotted.key=value` (value parsed as YAML: numbers, booleans, lists, null)."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} is not key=value (e.g. trainer.total_steps=50)")
    key, raw = assignment.split("=", 1)
    parts = key.strip().split(".")
    section: type[BaseModel] | None = model
    target = data
    for depth, part in enumerate(parts):
        assert section is not None
        fields = section.model_fields
        if part not in fields:
            raise _unknown(".".join(parts[: depth + 1]), ".".join(parts[:depth]), list(fields))
        if depth == len(parts) - 1:
            try:
                target[part] = yaml.safe_load(raw) if raw.strip() else None
            except yaml.YAMLError as problem:
                raise ConfigError(
                    f"override {key.strip()!r}: cannot read {raw!r} as a YAML value "
                    f"({problem.__class__.__name__}); quote list items that contain brackets, "
                    "e.g. 'sft.overrides=[\"trainer.loggers=[jsonl]\"]'"
                ) from None
            return
        section = _section_type(fields[part].annotation)
        if section is None:
            raise ConfigError(f"{'.'.join(parts[: depth + 1])!r} takes a value, not sub-keys")
        target = target.setdefault(part, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{'.'.join(parts[: depth + 1])!r} is a section, not a value")


def describe_errors(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        location = ".".join(str(p) for p in item["loc"])
        given = item.get("input")
        shown = "" if item["type"] == "missing" else f" (got {given!r})"
        lines.append(f"{location}: {item['msg']}{shown}")
    return "invalid configuration:\n  " + "\n  ".join(lines)


def read_yaml(path: Path) -> Any:
    """A YAML file's content; a syntax error is a ConfigError at `file:line:column`."""
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; give the config file (e.g. {path}/config.yaml)")
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as problem:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {problem.start}: {problem.object[problem.start]:#x}); "
            "save it as UTF-8"
        ) from None
    except OSError as problem:
        raise ConfigError(f"cannot read {path}: {problem.strerror or problem}") from None
    except yaml.MarkedYAMLError as problem:
        mark = problem.problem_mark or problem.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        context = f" ({problem.context})" if problem.context else ""
        raise ConfigError(f"{where}: {problem.problem}{context}") from None
    except yaml.YAMLError as problem:
        raise ConfigError(f"{path}: not valid YAML ({problem})") from None


def load(model: type[Model], path: Path | None = None, overrides: Sequence[str] = ()) -> Model:
    """Read a YAML recipe (if any), apply overrides, validate; raise ConfigError on any problem."""
    data: dict[str, Any] = {}
    if path is not None:
        if not path.exists():
            raise ConfigError(f"no such config file: {path}")
        loaded = read_yaml(path) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        data = loaded
    check_keys(data, model)
    for assignment in overrides:
        apply_override(data, assignment, model)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise ConfigError(describe_errors(error)) from None


def dump(config: BaseModel) -> str:
    """The resolved configuration as YAML (what a run folder keeps)."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
