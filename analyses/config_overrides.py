"""Typed, frozen experiment configs from text: ``--set key=value`` overrides, TOML files, saved settings.

:func:`apply_overrides` applies ``key=value`` assignments (dotted keys reach nested sections),
:func:`toml_assignments` reads them from a TOML file, and :func:`config_from_dict` rebuilds a config
from the ``dataclasses.asdict`` document a run saved (``summary.json["settings"]``).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from mechprobe import records, type_hints, validation
from mechprobe.errors import RecordError
from mechprobe.validation import is_integer
from probes.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def _describe(annotation: Any) -> str:
    """How a value of ``annotation`` is written on the command line, for error messages."""
    return type_hints.describe(annotation, none="none", option=str, other=_text_word)


def _text_word(shape: type_hints.Shape) -> str:
    if shape.kind == "sequence":
        return "comma-separated " + {int: "integers", float: "numbers", bool: "booleans"}.get(shape.item, "values")
    return {bool: "a boolean (true/false)", int: "an integer", float: "a number", str: "non-empty text"}.get(
        shape.hint, str(shape.hint))


def _parse(text: str, annotation: Any) -> Any:
    """``text`` as a value of ``annotation``; raises ValueError when it is not one, TypeError when no text is (a
    section, a mapping, a tensor, ...)."""
    shape = type_hints.shape(annotation)
    if shape.kind == "union":
        if text.lower() == "none" and shape.admits_none:
            return None
        for option in shape.options:
            try:
                return _parse(text, option)
            except ValueError:
                continue
        raise ValueError(text)
    if shape.kind == "literal":
        for option in shape.args:
            if str(option) == text:
                return option
        raise ValueError(text)
    if shape.kind == "sequence":
        inner = text.strip()
        if inner[:1] in "([" and inner[-1:] in ")]":
            inner = inner[1:-1]
        if inner.strip() == "":
            return shape.container()
        parts = [p.strip() for p in inner.split(",")]
        if len(parts) > 1 and not parts[-1]:
            parts.pop()  # a trailing comma, as in Python's one-item tuple "(10,)"
        if any(not p for p in parts):
            raise ValueError(text)  # an empty item, as in "4,,5"
        values = [_parse(p, shape.item) for p in parts]  # every item of the first item's type (tuple[int, int, int])
        return shape.container(values)
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
        if not text.strip():
            raise ValueError(text)  # an empty name, path or spec is never a setting's value
        return text
    raise TypeError(annotation)


def _check_integers(name: str, value: Any) -> None:
    """Integers set from text fit in 64 bits, and a seed (a setting named ``seed`` or ``*_seed``) lies in
    ``0 <= seed < 2**32``, as every command's ``--seed`` does."""
    for item in value if isinstance(value, (tuple, list)) else (value,):
        if is_integer(item):
            validation.int64(name, item)
            if name.rpartition(".")[2].rpartition(" ")[2] == "seed" or name.endswith("_seed"):
                validation.seed(name, item)


def _example(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def apply_overrides(config: C, assignments: Sequence[str], *, flag: str = "--set") -> C:
    """A copy of the frozen dataclass ``config`` with ``key=value`` assignments applied.

    Values are parsed by the field's annotation (int, float, bool, str, Literal, tuples, optionals;
    numbers must be finite, list items non-empty); a dotted key sets a field of a nested config
    (``topics.n_topics=20``). Unknown keys, keys given twice and unparsable values raise
    :class:`ConfigError` naming the expected form (``flag`` names where the assignment came from);
    each config's own validation runs on the result.
    Example: ``apply_overrides(PRESETS["paper"], ["seed=3", "train.eta_z=2"])`` (a Scan and Snap config).
    """
    return _apply(config, assignments, flag, "")


def _apply(config: C, assignments: Sequence[str], flag: str, prefix: str) -> C:
    """apply_overrides on a section whose dotted path is ``prefix`` ("" at the top)."""
    if not dataclasses.is_dataclass(config):
        raise TypeError(f"apply_overrides expects a dataclass instance; got {type(config).__name__}")
    hints = type_hints.field_hints(type(config))
    names = [f.name for f in dataclasses.fields(config) if f.init]
    changes: dict[str, Any] = {}
    nested: dict[str, list[str]] = {}
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"{flag} expects KEY=VALUE (e.g. {flag} seed=1); got {assignment!r}.")
        head, dot, rest = key.partition(".")
        if head not in names:
            close = difflib.get_close_matches(head, names, n=1)
            guess = f" Did you mean {close[0]}?" if close else ""
            raise ConfigError(
                f"{flag} {prefix}{key}: unknown setting for {type(config).__name__}.{guess} Known settings: "
                f"{', '.join(names)}."
            )
        if dot:
            if not dataclasses.is_dataclass(getattr(config, head)):
                raise ConfigError(f"{flag} {prefix}{key}: {head} is a single value, not a section with settings of "
                                  f"its own.")
            nested.setdefault(head, []).append(f"{rest}={value}")
            continue
        if key in changes or key in nested:
            raise ConfigError(f"{flag} {prefix}{key} is given twice; give each setting once.")
        annotation = hints[key]
        try:
            changes[key] = _parse(value.strip(), annotation)
        except TypeError:
            if dataclasses.is_dataclass(getattr(config, key)):
                raise ConfigError(f"{flag} {prefix}{key}: a section; set its fields as "
                                  f"{prefix}{key}.NAME=VALUE.") from None
            raise ConfigError(f"{flag} {prefix}{key}: this setting cannot be set from the command line.") from None
        except ValueError:
            example = _example(getattr(config, key))
            hint = f", e.g. {flag} {prefix}{key}={example} (the current value)" if example else ""
            raise ConfigError(
                f"{flag} {prefix}{key}={value.strip()}: expected {_describe(annotation)}{hint}.") from None
        _check_integers(f"{flag} {prefix}{key}", changes[key])
    for head, inner in nested.items():
        if head in changes:
            raise ConfigError(f"{flag} {prefix}{head} is given twice; give each setting once.")
        changes[head] = _apply(getattr(config, head), inner, flag, f"{prefix}{head}.")
    try:
        return dataclasses.replace(config, **changes)
    except (ValueError, TypeError) as error:  # the config's own validation (ToyConfigError is a ValueError)
        raise ConfigError(str(error)) from error


def refuse_unused(unused: Mapping[str, str], assignments: Sequence[str], *, where: str, flag: str = "--set") -> None:
    """Refuse every ``key=value`` of ``assignments`` that sets a setting named in ``unused`` (dotted name -> why
    it is not used; a section's name covers its fields), by name: a setting that changes nothing is never
    recorded as if used. ``where`` names what does not use it (``"the induction toy's fast preset"``).
    Example: ``refuse_unused(config.unused_settings(), ["train.n_steps=0"], where="the fast preset")``.
    """
    for assignment in assignments:
        key = assignment.partition("=")[0].strip()
        for name, why in unused.items():
            if key == name or key.startswith(name + "."):
                raise ConfigError(f"{flag} {key}: {where} does not use {name} ({why}); drop the setting.")


def refuse_flag_and_set(flags: Mapping[str, str], assignments: Sequence[str], *, flag: str = "--set") -> None:
    """Refuse a ``key=value`` of ``assignments`` that sets what an explicit flag set too (``flags``: setting -> the
    flag given), by name: one of the two would silently win."""
    for assignment in assignments:
        key = assignment.partition("=")[0].strip()
        if key in flags:
            raise ConfigError(f"{flags[key]} and {flag} {key}=... both set {key}; give only one of them.")


def config_sections(kind: type) -> dict[str, type]:
    """The fields of the config class ``kind`` that are configs of their own (its sections), by name."""
    hints = type_hints.field_hints(kind)
    return {f.name: hints[f.name] for f in dataclasses.fields(kind) if type_hints.shape(hints[f.name]).kind == "record"}


def config_from_dict(kind: type[C], values: Mapping[str, Any]) -> C:
    """The ``kind`` config whose ``dataclasses.asdict`` is ``values`` (:func:`mechprobe.records.load`: sections
    rebuilt as their own configs, lists as tuples, derived ``init=False`` fields skipped, unknown keys refused
    with a :class:`ConfigError`).

    Example: ``config_from_dict(ScanSnapConfig, dataclasses.asdict(config)) == config``.
    """
    try:
        return records.load(kind, values, where="settings")
    except RecordError as error:
        raise ConfigError(f"{error} (Settings written by an older mechprobe: run the experiment again.)") from None


def toml_assignments(path: str | Path) -> list[str]:
    """The ``key=value`` assignments of a TOML file (tables become dotted keys), for :func:`apply_overrides`.

    Example: a file with ``seed = 3`` and ``[topics]`` / ``n_topics = 20`` gives
    ``["seed=3", "topics.n_topics=20"]``.
    """
    path = Path(path)
    example = "such as seed = 3, then a [topics] table with n_topics = 20"
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"--config {path}: no such file; give a TOML file of settings, {example}.") from None
    except IsADirectoryError:
        raise ConfigError(f"--config {path} is a folder; give a TOML file of settings, {example}.") from None
    except (OSError, UnicodeDecodeError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise ConfigError(f"--config {path}: cannot read it ({reason}); give a UTF-8 TOML file of settings, "
                          f"{example}.") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"--config {path} is not valid TOML: {error}; correct that line ({example}).") from None

    def flatten(table: dict[str, Any], prefix: str) -> list[str]:
        out = []
        for key, value in table.items():
            if isinstance(value, dict):
                out += flatten(value, f"{prefix}{key}.")
            elif isinstance(value, list):
                if any(isinstance(v, (dict, list)) for v in value):
                    raise ConfigError(f"--config {path}: {prefix}{key} must be a flat list of values.")
                out.append(f"{prefix}{key}=" + ",".join(_example(v) for v in value) + ("," if len(value) == 1 else ""))
            else:
                out.append(f"{prefix}{key}={_example(value)}")
        return out

    return flatten(document, "")
