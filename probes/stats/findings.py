"""A verdict per finding: a statistic with its interval, its null, a control model, and whether it holds.

A finding *holds* only when all of these are true:

1. it beats its null: the p-value, Holm-adjusted over the findings of one model (a family), is
   below ``alpha`` (0.01);
2. the lower end of its 95% interval lies above the null value and above the control model's
   value (the same architecture with random weights, measured the same way);
3. the effect is worth reporting: ``value - reference >= min_effect`` (``effect="difference"``) or
   ``value / reference >= min_effect`` (``effect="ratio"``), with ``reference`` the larger of the
   null value and the control value.

A finding that does not hold is *absent* when the upper end of its interval lies below the threshold
(``reference + min_effect``, or ``reference * min_effect`` for a ratio): whatever the effect is, it is smaller than
what we call a mechanism (an equivalence statement). Otherwise it is *inconclusive*: the interval straddles the
threshold, and :attr:`Finding.units_to_settle` says how many units (batches, sequences, seeds) would make an
interval of the same spread clear it one way or the other. Whatever the verdict, :attr:`Finding.units_for_power`
says how many units the design needs to settle an effect one minimum size away from the threshold with 80%
probability (:mod:`probes.stats.power`): a finding measured on fewer is underpowered for its own threshold.
:attr:`Finding.confidence_sequence` is the interval that stays valid when more units are added and it is looked at
again (:mod:`probes.stats.confidence_sequence`); ``mechprobe report --settle`` decides on it alone.

Searches over heads are accounted for where the statistic is computed (a best head is chosen on
one half of the data and measured on the other); this module only combines the numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Literal

from probes.core.errors import ConfigError
from probes.display.verdict_table import verdict_table_html
from probes.stats.confidence_sequence import sequence_from_interval
from probes.stats.nulls import holm_adjust
from probes.stats.power import units_for_power

ALPHA = 0.01

VERDICTS = ("holds", "absent", "inconclusive")


def threshold_above(reference: float, min_effect: float, effect: str) -> float:
    """The value a statistic must reach to count as a mechanism: ``reference + min_effect`` for a difference,
    ``reference * min_effect`` for a ratio (NaN where the reference is not positive)."""
    if effect == "ratio":
        return reference * min_effect if reference > 0 else float("nan")
    return reference + min_effect


def threshold_distance(reference: float, min_effect: float, effect: str) -> float:
    """How far the threshold lies above the reference, in the statistic's units: ``min_effect`` for a difference,
    ``reference * (min_effect - 1)`` for a ratio (NaN where the reference is not positive)."""
    if effect == "ratio":
        return reference * (min_effect - 1.0) if reference > 0 else float("nan")
    return min_effect


def verdict_of(holds: bool, ci: tuple[float, float], threshold: float) -> str:
    """``holds``; ``absent`` when the interval's upper end lies below ``threshold``; else ``inconclusive``."""
    if holds:
        return "holds"
    if math.isfinite(ci[1]) and math.isfinite(threshold) and ci[1] < threshold:
        return "absent"
    return "inconclusive"


def units_to_settle(value: float, ci: tuple[float, float], threshold: float, n_units: int | None) -> int | None:
    """Units an interval of the observed spread needs to lie wholly on one side of ``threshold`` (its half-width
    shrinks as one over the square root of the units): None where the interval does not straddle the threshold
    or a number is missing."""
    low, high = ci
    if n_units is None or not all(math.isfinite(v) for v in (value, low, high, threshold)):
        return None
    if not low < threshold < high or value == threshold:
        return None
    half = (high - low) / 2
    return max(n_units + 1, math.ceil(n_units * (half / abs(value - threshold)) ** 2))


@dataclass(frozen=True)
class Finding:
    """One statistic of one model with everything needed to judge it (see the module docstring).

    ``n_units``: the units its interval resamples (batches, sequences); ``null_draws``/``null_stop``: how many
    draws a sequential null used and why it stopped (:mod:`probes.stats.sequential`); ``sequence_tuned_at``: the
    units where its confidence sequence is tightest, fixed before the units were seen (None: ``n_units``).

    Example::

        Finding("induction score of the best head", 0.62, (0.55, 0.70), "uniform attention", 0.02, 0.001,
                min_effect=0.1).with_control(0.03, (0.02, 0.04))
    """

    statistic: str
    value: float
    ci: tuple[float, float]
    null_kind: str
    null_value: float
    p_value: float
    min_effect: float
    effect: Literal["difference", "ratio"] = "difference"
    control_value: float | None = None
    control_ci: tuple[float, float] | None = None
    p_adjusted: float | None = None
    selection: str = ""
    n_units: int | None = None
    null_draws: int | None = None
    null_stop: str = ""
    sequence_tuned_at: int | None = None
    # written into summary.json for its readers (mechprobe.records)
    __record_derived__ = ("holds", "verdict", "threshold", "units_to_settle", "units_for_power", "confidence_sequence")

    def __post_init__(self) -> None:
        if self.effect not in ("difference", "ratio"):
            raise ConfigError(f"effect must be 'difference' or 'ratio'; got {self.effect!r}.")

    def with_control(self, value: float, ci: tuple[float, float]) -> Finding:
        return replace(self, control_value=float(value), control_ci=(float(ci[0]), float(ci[1])))

    @property
    def reference(self) -> float:
        """The larger of the null value and the control value: what the statistic must clear."""
        values = [v for v in (self.null_value, self.control_value) if v is not None and math.isfinite(v)]
        return max(values) if values else float("nan")

    @property
    def effect_size(self) -> float:
        if self.effect == "ratio":
            return self.value / self.reference if self.reference > 0 else float("nan")
        return self.value - self.reference

    @property
    def reported_p(self) -> float:
        """The Holm-adjusted p-value once the family is adjusted (:func:`adjust_family`), the raw one before."""
        return self.p_value if self.p_adjusted is None else self.p_adjusted

    @property
    def holds(self) -> bool:
        """Beats the null (adjusted p < ALPHA, interval above the null value), the control, and the effect
        threshold. Any missing number (NaN) means it does not hold."""
        p = self.reported_p
        beats_control = self.control_value is None or self.ci[0] > self.control_value
        return bool(p < ALPHA and self.ci[0] > self.null_value and beats_control
                    and self.effect_size >= self.min_effect)

    @property
    def threshold(self) -> float:
        """What the value must reach: the reference plus (times, for a ratio) the minimum effect."""
        return threshold_above(self.reference, self.min_effect, self.effect)

    @property
    def verdict(self) -> str:
        """``holds``, ``absent`` (the interval lies below :attr:`threshold`) or ``inconclusive``."""
        return verdict_of(self.holds, self.ci, self.threshold)

    @property
    def units_to_settle(self) -> int | None:
        """For an inconclusive finding measured on ``n_units`` units: how many would settle it at the observed
        spread (:func:`units_to_settle`)."""
        return units_to_settle(self.value, self.ci, self.threshold, self.n_units) if not self.holds else None

    @property
    def units_for_power(self) -> int | None:
        """Units at which an interval of the observed spread settles a value one minimum effect away from the
        threshold with 80% probability (:func:`probes.stats.power.units_for_power`); None without ``n_units``."""
        return units_for_power(self.ci, self.n_units, threshold_distance(self.reference, self.min_effect, self.effect))

    @property
    def confidence_sequence(self) -> tuple[float, float]:
        """The 95% confidence sequence at ``n_units``: valid uniformly over the number of units, so it may be
        rechecked after every round of more units (:func:`probes.stats.confidence_sequence.sequence_from_interval`,
        the per-unit spread read from :attr:`ci`); NaN ends without ``n_units``."""
        return sequence_from_interval(self.value, self.ci, self.n_units, tuned_at=self.sequence_tuned_at)

    def _repr_html_(self) -> str:
        """The finding as a one-row verdict table (:mod:`probes.display.verdict_table`)."""
        return verdict_table_html({self.statistic: self})


def adjust_family(findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """The findings of one model with Holm-adjusted p-values (one family per model)."""
    names = list(findings)
    adjusted = holm_adjust([findings[name].p_value for name in names])
    return {name: replace(findings[name], p_adjusted=p) for name, p in zip(names, adjusted)}
