"""Checks of settings shared by every config: each raises the caller's error class with the setting's name,
the allowed range and the value it got.

Example: ``integer("n_steps", self.n_steps, 1)`` in a config's ``__post_init__`` raises
``ConfigError("n_steps must be an integer >= 1; got 0.")``; toy configs pass ``error=ToyConfigError``.
"""

from __future__ import annotations

import errno
import math
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, TypeGuard

from mechprobe.errors import ConfigError, InputError


def is_integer(value: Any) -> TypeGuard[int]:
    """True when ``value`` is an int and not a bool (``True`` is an ``int`` to Python, never a count to us): the one
    integer test, which every hand-made check calls (tests/test_layout.py refuses the spelled-out form elsewhere)."""
    return isinstance(value, int) and not isinstance(value, bool)


def integer(name: str, value: Any, minimum: int = 1, *, error: type[Exception] = ConfigError) -> int:
    """``value`` itself when it is an int (not a bool) >= ``minimum``."""
    if not is_integer(value) or value < minimum:
        raise error(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return value


INT64 = 2**63
SEEDS = 2**32


def int64(name: str, value: Any, *, error: type[Exception] = ConfigError) -> int:
    """``value`` itself when it is an int that fits in 64 bits (what torch and numpy take)."""
    if not is_integer(value) or not -INT64 <= value < INT64:
        raise error(f"{name} must be an integer between -2**63 and 2**63 - 1; got {value!r}.")
    return value


def seed(name: str, value: Any, *, error: type[Exception] = ConfigError) -> int:
    """``value`` itself when it is a seed: an int with ``0 <= value < 2**32`` (numpy's range; every command's)."""
    if not is_integer(value) or not 0 <= value < SEEDS:
        raise error(f"{name} must be an integer with 0 <= seed < 2**32 (4294967296); got {value!r}.")
    return value


def integers(owner: Any, names: Iterable[str], minimum: int = 1, *, prefix: str = "",
             error: type[Exception] = ConfigError) -> None:
    """Each attribute ``names`` of ``owner`` is an int >= ``minimum`` (named ``prefix + name`` in errors: the
    common ``__post_init__`` loop of a config section such as ``wikitext.``)."""
    for name in names:
        integer(f"{prefix}{name}", getattr(owner, name), minimum, error=error)


def at_least(name: str, value: Any, minimum: float, *, error: type[Exception] = ConfigError) -> None:
    """``value`` is a number >= ``minimum`` (finite)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < minimum:
        raise error(f"{name} must be >= {minimum}; got {value!r}.")


def positive(name: str, value: Any, *, error: type[Exception] = ConfigError) -> None:
    """``value`` is a finite number > 0."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise error(f"{name} must be a positive number; got {value!r}.")


def fraction(name: str, value: Any, *, open_low: bool = False, open_high: bool = False,
             error: type[Exception] = ConfigError) -> None:
    """``value`` lies in [0, 1] (``open_low``/``open_high`` exclude the ends)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > 0 if open_low else value >= 0) and (value < 1 if open_high else value <= 1)
    if not ok:
        low, high = "(" if open_low else "[", ")" if open_high else "]"
        raise error(f"{name} must lie in {low}0, 1{high}; got {value!r}.")


def one_of(name: str, value: Any, choices: Iterable[Any], *, error: type[Exception] = ConfigError) -> None:
    """``value`` is one of ``choices``."""
    options = list(choices)
    if value not in options:
        raise error(f"{name} must be one of {', '.join(map(repr, options))}; got {value!r}.")


def real_path(name: str, path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute with its symbolic links followed (``Path.resolve``), for a path a user gave as ``name``
    (a flag): a link on it that points back at itself, which ``Path.resolve`` of Python 3.11 raises RuntimeError for
    (a traceback) and of 3.13 leaves unresolved, raises :class:`InputError` naming ``name``. A path that is not there
    (yet) resolves as far as it exists.

    Example: ``real_path("--out", "runs/loop")`` where ``runs/loop -> loop`` raises
    ``InputError("--out runs/loop: a symbolic link on it loops (...)")``."""
    given = Path(path)
    try:
        return given.resolve(strict=True)
    except RuntimeError as error:  # Python < 3.13: "Symlink loop from ..."
        reason = str(error)
    except OSError as error:
        if error.errno != errno.ELOOP:
            return given.resolve()  # not there yet, under a file, unreadable: the caller's checks say which
        reason = error.strerror or "a symlink loop"
    raise InputError(f"{name} {path}: a symbolic link on it loops ({reason}), so it names no file or folder; give "
                     f"a real path, or point the link at one.")
