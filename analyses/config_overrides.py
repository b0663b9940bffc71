"""``--set key=value`` overrides for the typed, frozen experiment configs."""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from probes.errors import ConfigError

C = TypeVar("C")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _describe(annotation: Any) -> str:
    """How a value of ``annotation`` is written on the command line, for error messages."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join("none" if a is type(None) else _describe(a) for a in args)
    if origin is typing.Literal:
        return "one of " + ", ".join(map(str, args))
    if origin in (tuple, list):
        item = args[0] if args else str
        return "comma-separated " + {int: "integers", float: "numbers", bool: "booleans"}.get(item, "values")
    return {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "text"}.get(
        annotation, str(annotation))


def _parse(text: str, annotation: Any) -> Any:
    """``text`` as a value of ``annotation``; raises ValueError when it is not one."""
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if text.lower() == "none" and type(None) in args:
            return None
        for option in (a for a in args if a is not type(None)):
            try:
                return _parse(text, option)
            except ValueError:
                continue
        raise ValueError(text)
    if origin is typing.Literal:
        for option in args:
            if str(option) == text:
                return option
        raise ValueError(text)
    if origin in (tuple, list):
        inner = text.strip()
        if inner[:1] in "([" and inner[-1:] in ")]":
            inner = inner[1:-1]
        if inner.strip() == "":
            return () if origin is tuple else []
        parts = [p.strip() for p in inner.split(",")]
        if len(parts) > 1 and not parts[-1]:
            parts.pop()  # a trailing comma, as in Python's one-item tuple "(10,)"
        if any(not p for p in parts):
            raise ValueError(text)  # an empty item, as in "4,,5"
        values = [_parse(p, args[0] if args else str) for p in parts]
        return tuple(values) if origin is tuple else values
    if annotation is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ValueError(text)
    if annotation is int:
        return int(text)
    if annotation is float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value
    if annotation is str:
        return text
    raise TypeError(annotation)


def _example(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def apply_overrides(config: C, assignments: Sequence[str]) -> C:
    """A copy of the frozen dataclass ``config`` with ``key=value`` assignments applied.

    Values are parsed by the field's annotation (int, float, bool, str, Literal, tuples, optionals;
    numbers must be finite, list items non-empty); unknown keys, keys given twice and unparsable
    values raise :class:`ConfigError` naming the expected form; the config's own validation runs
    on the result. Example: ``apply_overrides(PRESETS["fast"], ["seed=3", "lr=0.01"])``.
    """
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"apply_overrides expects a dataclass instance; got {type(config).__name__}")
    hints = typing.get_type_hints(type(config))
    names = [f.name for f in dataclasses.fields(config) if f.init]
    changes: dict[str, Any] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set expects KEY=VALUE (e.g. --set seed=1); got {assignment!r}.")
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            guess = f" Did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"--set {key}: unknown setting for {type(config).__name__}.{guess} Known settings: {', '.join(names)}."
            )
        if key in changes:
            raise ConfigError(f"--set {key} is given twice; give each setting once.")
        annotation = hints[key]
        try:
            changes[key] = _parse(value.strip(), annotation)
        except TypeError:
            raise ConfigError(f"--set {key}: this setting cannot be set from the command line.") from None
        except ValueError:
            example = _example(getattr(config, key))
            hint = f", e.g. --set {key}={example} (the preset's value)" if example else ""
            raise ConfigError(f"--set {key}={value.strip()}: expected {_describe(annotation)}{hint}.") from None
    try:
        return dataclasses.replace(config, **changes)
    except (ValueError, TypeError) as error:  # the config's own validation (ToyConfigError is a ValueError)
        raise ConfigError(str(error)) from error
