"""Checks of settings shared by every config: each raises the caller's error class with the setting's name,
the allowed range and the value it got.

Example: ``integer("n_steps", self.n_steps, 1)`` in a config's ``__post_init__`` raises
``ConfigError("n_steps must be an integer >= 1; got 0.")``; toy configs pass ``error=ToyConfigError``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, TypeGuard

from mechprobe.errors import ConfigError


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
