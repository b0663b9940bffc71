"""``--set key=value`` overrides for the typed, frozen experiment configs."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Sequence
from typing import Any, TypeVar

from probes.errors import ConfigError

C = TypeVar("C")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _parse(text: str, annotation: Any, key: str) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        if text.lower() == "none" and type(None) in args:
            return None
        errors = []
        for option in (a for a in args if a is not type(None)):
            try:
                return _parse(text, option, key)
            except ConfigError as error:
                errors.append(str(error))
        raise ConfigError(f"--set {key}={text}: {' / '.join(errors)}")
    if origin is typing.Literal:
        for option in args:
            if str(option) == text:
                return option
        raise ConfigError(f"--set {key}={text}: expected one of {', '.join(map(str, args))}.")
    if origin in (tuple, list):
        item_type = args[0] if args else str
        parts = [p for p in text.strip("()[]").split(",") if p.strip()]
        values = [_parse(p.strip(), item_type, key) for p in parts]
        return tuple(values) if origin is tuple else values
    if annotation is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise ConfigError(f"--set {key}={text}: expected a boolean (true/false).")
    if annotation is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"--set {key}={text}: expected an integer.") from None
    if annotation is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--set {key}={text}: expected a number.") from None
    if annotation is str:
        return text
    raise ConfigError(f"--set {key}: fields of type {annotation} cannot be set from the command line.")


def apply_overrides(config: C, assignments: Sequence[str]) -> C:
    """A copy of the frozen dataclass ``config`` with ``key=value`` assignments applied.

    Values are parsed by the field's annotation (int, float, bool, str, Literal, tuples, optionals);
    unknown keys and unparsable values raise :class:`ConfigError`; the config's own validation
    runs on the result. Example: ``apply_overrides(PRESETS["fast"], ["seed=3", "lr=0.01"])``.
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
            raise ConfigError(f"--set expects key=value; got {assignment!r}.")
        if key not in names:
            raise ConfigError(
                f"--set {key}: unknown setting for {type(config).__name__}. Known settings: {', '.join(names)}."
            )
        changes[key] = _parse(value.strip(), hints[key], key)
    try:
        return dataclasses.replace(config, **changes)
    except ValueError as error:  # the config's own validation (ToyConfigError is a ValueError)
        raise ConfigError(str(error)) from error
