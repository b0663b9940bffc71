"""A verdict per finding: a statistic with its interval, its null, a control model, and whether it holds.

A finding *holds* only when all of these are true:

1. it beats its null: the p-value, Holm-adjusted over the findings of one model (a family), is
   below ``alpha`` (0.01);
2. the lower end of its 95% interval lies above the null value and above the control model's
   value (the same architecture with random weights, measured the same way);
3. the effect is worth reporting: ``value - reference >= min_effect`` (``effect="difference"``) or
   ``value / reference >= min_effect`` (``effect="ratio"``), with ``reference`` the larger of the
   null value and the control value.

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
from probes.stats.nulls import holm_adjust

ALPHA = 0.01


@dataclass(frozen=True)
class Finding:
    """One statistic of one model with everything needed to judge it (see the module docstring).

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
    __record_derived__ = ("holds",)  # written into summary.json for its readers (mechprobe.records)

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

    def _repr_html_(self) -> str:
        """The finding as a one-row verdict table (:mod:`probes.display.verdict_table`)."""
        return verdict_table_html({self.statistic: self})


def adjust_family(findings: Mapping[str, Finding]) -> dict[str, Finding]:
    """The findings of one model with Holm-adjusted p-values (one family per model)."""
    names = list(findings)
    adjusted = holm_adjust([findings[name].p_value for name in names])
    return {name: replace(findings[name], p_adjusted=p) for name, p in zip(names, adjusted)}
