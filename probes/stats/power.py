"""Power of a finding's design: how many units its interval needs to settle an effect of the minimum size.

A finding is decided against its threshold (:attr:`probes.stats.findings.Finding.threshold`, the reference plus
the minimum effect ``delta``): it holds when its interval lies above, it is absent when the interval lies below.
A design *has power* when a true value ``delta`` away from the threshold on either side (no mechanism at all, at the
reference; or a mechanism of twice the minimum size) is settled with probability ``power``: with a normal
interval of standard error ``se``, that needs ``delta / se >= z(1 - (1 - level) / 2) + z(power)``. At level 0.95
and power 0.8 the sum is 2.80, so the interval's half-width must be at most 0.70 * ``delta``.

The standard error is read from a measured interval (``se = (high - low) / (2 * z)``) and shrinks as one over the
square root of the units, so the units the design needs follow from a measurement at any size:
``n * (se * (z_level + z_power) / delta) ** 2``.

Example: ``units_for_power((0.0, 0.4), 6, 0.1)`` is 50. The interval implies ``se = 0.102``, so the 6 units
settle a value 0.286 from the threshold (:func:`detectable_distance`); settling 0.1 needs ``(0.286 / 0.1) ** 2``
= 8.2 times the units.
"""

from __future__ import annotations

import math
from statistics import NormalDist

from probes.core.errors import ConfigError

POWER = 0.8
"""The probability with which a design should settle an effect one minimum size away from the threshold."""


def _z(probability: float) -> float:
    return NormalDist().inv_cdf(probability)


def power_z(level: float = 0.95, power: float = POWER) -> float:
    """``z(1 - (1 - level) / 2) + z(power)``: the threshold distance, in standard errors, that a design with
    ``power`` settles (2.80 at the defaults)."""
    if not 0.0 < level < 1.0 or not 0.0 < power < 1.0:
        raise ConfigError(f"level and power must lie in (0, 1); got level={level!r}, power={power!r}.")
    return _z(1.0 - (1.0 - level) / 2.0) + _z(power)


def standard_error(ci: tuple[float, float], level: float = 0.95) -> float:
    """The standard error a normal interval ``ci`` at ``level`` implies (NaN for an interval with a NaN end)."""
    low, high = ci
    if not (math.isfinite(low) and math.isfinite(high)):
        return float("nan")
    return (high - low) / (2.0 * _z(1.0 - (1.0 - level) / 2.0))


def units_for_power(ci: tuple[float, float], n_units: int | None, delta: float, *, level: float = 0.95,
                    power: float = POWER) -> int | None:
    """Units an interval of the spread of ``ci`` (measured on ``n_units`` units) needs for the design to settle a
    value ``delta`` away from the threshold with probability ``power`` (module docstring); None where a number is
    missing, ``delta`` is not positive, or the interval has no width (nothing to estimate a spread from)."""
    if n_units is None or n_units < 1 or not math.isfinite(delta) or delta <= 0:
        return None
    se = standard_error(ci, level)
    if not math.isfinite(se) or se <= 0:
        return None
    return max(1, math.ceil(n_units * (se * power_z(level, power) / delta) ** 2))


def detectable_distance(ci: tuple[float, float], level: float = 0.95, power: float = POWER) -> float:
    """The smallest distance from the threshold that an interval like ``ci`` settles with probability ``power``:
    ``se * (z_level + z_power)``."""
    return standard_error(ci, level) * power_z(level, power)
