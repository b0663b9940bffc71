"""Toy findings over seeds: each paper toy judged like a pretrained model, against itself at initialisation.

One seed of a toy gives a :class:`SeedFindings`: for every finding the trained model's
:class:`~probes.stats.findings.Finding` (its control value is the same toy at initialisation, same seed,
same data; Holm-adjusted over the toy's findings) and the initialised model's own finding (judged against
its null only: it should never hold). :func:`aggregate_seeds` turns the seeds into one
:class:`ToyFinding` per name:

- ``value``: the mean over seeds; ``ci``: the 95% Student-t interval of that mean over seeds;
- ``null_value``: the mean of the per-seed null values; ``control_value`` / ``control_ci``: the same for the
  initialised toy;
- it *holds* when the interval clears the null, the control and the effect threshold: the interval's lower
  end exceeds the larger of the null and the control's upper end (its value with one seed), and
  ``low - reference >= min_effect`` (``low / reference`` for ratios);
- otherwise it is *absent* when the interval's upper end lies below that threshold, else *inconclusive*
  (``units_to_settle``: the seeds an interval of the observed spread would need);
- with one seed there is no interval over seeds: the value, interval and verdict are that seed's;
- ``seeds``: how many seeds held on their own (per-seed verdicts are kept in ``per_seed``).

Example::

    findings = aggregate_seeds("topic", [seed_findings(config, s) for s in range(5)])
    findings["topic_attention_best_head"].held, findings["topic_attention_best_head"].holds
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from analyses.toy_registry import TOYS
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import (
    Finding,
    adjust_family,
    threshold_above,
    threshold_distance,
    units_to_settle,
    verdict_of,
)
from probes.stats.power import units_for_power

LEVEL = 0.95

TOY_OF_FINDING = {finding: spec.name for spec in TOYS for finding in spec.findings}
"""Which toy carries each finding (each toy's record lists its own: :mod:`analyses.toy_registry`): the seven
pretrained findings, two of the pretrained head ablations (the induction toy's parent copiers, the topic toy's
attention made uniform), the papers' own headline claims (with their orders of events) and the Scan and Snap toy's
attention made uniform."""

TOY_ONLY_FINDINGS = ("scan_order", "generalized_induction", "value_block_structure", "scansnap_attention_causal",
                     "scan_before_snap", "value_before_key_query")
"""The papers' own claims, measured on their toys only (Tian et al., Chen et al., Li et al.; the orders of events:
:mod:`analyses.toy_orders`), and the loss the Scan and Snap toy loses with uniform attention (no pretrained
counterpart)."""


@dataclass(frozen=True)
class SeedFindings:
    """One seed of one toy: the trained model's findings (with the initialised toy as control, Holm-adjusted
    as one family) and the initialised toy's own findings (judged against their nulls only)."""

    seed: int
    findings: Mapping[str, Finding]
    control: Mapping[str, Finding]

    def __post_init__(self) -> None:
        if set(self.findings) != set(self.control):
            raise InputError(f"A toy's findings and its control's must name the same statistics; got "
                             f"{sorted(self.findings)} vs {sorted(self.control)}.")


def judge_against_init(trained: Mapping[str, Finding], init: Mapping[str, Finding], seed: int) -> SeedFindings:
    """:class:`SeedFindings` from the unadjusted findings of the trained toy and of the toy at initialisation:
    each trained finding takes the initialised toy's value as its control; both families are Holm-adjusted."""
    control = adjust_family(init)
    own = {name: finding.with_control(control[name].value, control[name].ci) for name, finding in trained.items()}
    return SeedFindings(seed, adjust_family(own), control)


def _mean_interval(values: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """Mean and 95% Student-t interval over ``values`` (NaN when a value is missing)."""
    n = len(values)
    mean = sum(values) / n
    if any(not math.isfinite(v) for v in values):
        return float("nan"), (float("nan"), float("nan"))
    from scipy.stats import t as student_t  # here, not at import: scipy.stats costs every mechprobe process 0.6 s

    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = float(student_t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
    return mean, (mean - half, mean + half)


def _finite_max(values: Sequence[float | None]) -> float:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return max(finite) if finite else float("nan")


@dataclass(frozen=True)
class ToyFinding:
    """One finding of one toy over seeds (see the module docstring); ``per_seed[i]`` and ``control_per_seed[i]``
    are seed ``seeds[i]``'s trained and initialised toy (``control_per_seed`` is empty for the initialised toy's
    own finding, :meth:`control_finding`, which is judged against its null only)."""

    toy: str
    name: str
    seeds: tuple[int, ...]
    per_seed: tuple[Finding, ...]
    control_per_seed: tuple[Finding, ...]
    # what summary.json's readers need besides the fields (mechprobe.records writes them, and skips them on load)
    __record_derived__ = ("statistic", "value", "ci", "null_value", "p_value", "control_value", "control_ci",
                          "held", "holds", "verdict", "threshold", "units_to_settle", "units_for_power",
                          "confidence_sequence")

    def __post_init__(self) -> None:
        if not self.seeds or len(self.seeds) != len(self.per_seed) or \
                len(self.control_per_seed) not in (0, len(self.seeds)):
            raise InputError(f"{self.toy}/{self.name}: need one trained and one control finding per seed; got "
                             f"{len(self.seeds)} seeds, {len(self.per_seed)} and {len(self.control_per_seed)}.")

    @property
    def first(self) -> Finding:
        return self.per_seed[0]

    @property
    def statistic(self) -> str:
        return self.first.statistic

    @property
    def effect(self) -> Literal["difference", "ratio"]:
        return self.first.effect

    @property
    def min_effect(self) -> float:
        return self.first.min_effect

    @property
    def value(self) -> float:
        return self._over_seeds([f.value for f in self.per_seed], self.first.value)[0]

    @property
    def ci(self) -> tuple[float, float]:
        return self._over_seeds([f.value for f in self.per_seed], self.first.value, self.first.ci)[1]

    @property
    def null_kind(self) -> str:
        return self.first.null_kind

    @property
    def null_value(self) -> float:
        return sum(f.null_value for f in self.per_seed) / len(self.per_seed)

    @property
    def p_value(self) -> float:
        """The largest per-seed (Holm-adjusted) p-value: every seed beat its null at least this well."""
        return _finite_max([f.reported_p for f in self.per_seed])

    @property
    def control_value(self) -> float | None:
        if not self.control_per_seed:
            return None
        return self._over_seeds([f.value for f in self.control_per_seed], self.control_per_seed[0].value)[0]

    @property
    def control_ci(self) -> tuple[float, float] | None:
        if not self.control_per_seed:
            return None
        return self._over_seeds([f.value for f in self.control_per_seed], self.control_per_seed[0].value,
                                self.control_per_seed[0].ci)[1]

    def _over_seeds(self, values: list[float], one: float, one_ci: tuple[float, float] | None = None
                    ) -> tuple[float, tuple[float, float]]:
        if len(values) == 1:
            return one, one_ci if one_ci is not None else (one, one)
        return _mean_interval(values)

    @property
    def reported_p(self) -> float:
        return self.p_value

    @property
    def held(self) -> int:
        """How many seeds held on their own."""
        return sum(f.holds for f in self.per_seed)

    @property
    def reference(self) -> float:
        """What the interval must clear: the larger of the null and the control (its interval's upper end)."""
        control_ci = self.control_ci
        control_high = None if control_ci is None else (control_ci[1] if len(self.seeds) > 1 else self.control_value)
        return _finite_max([self.null_value, control_high])

    @property
    def holds(self) -> bool:
        if len(self.seeds) == 1:
            return self.first.holds
        low, reference = self.ci[0], self.reference
        if not (math.isfinite(low) and math.isfinite(reference)) or low <= reference:
            return False
        if self.effect == "ratio":
            return reference > 0 and low / reference >= self.min_effect
        return low - reference >= self.min_effect

    @property
    def threshold(self) -> float:
        """What the interval must clear: :attr:`reference` plus (times, for a ratio) the minimum effect."""
        if len(self.seeds) == 1:
            return self.first.threshold
        return threshold_above(self.reference, self.min_effect, self.effect)

    @property
    def verdict(self) -> str:
        """``holds``, ``absent`` (the interval over seeds lies below :attr:`threshold`) or ``inconclusive``."""
        if len(self.seeds) == 1:
            return self.first.verdict
        return verdict_of(self.holds, self.ci, self.threshold)

    @property
    def units_to_settle(self) -> int | None:
        """Seeds that would settle an inconclusive finding at the observed spread (one seed: the seed's own units)."""
        if len(self.seeds) == 1:
            return self.first.units_to_settle
        return None if self.holds else units_to_settle(self.value, self.ci, self.threshold, len(self.seeds))

    @property
    def units_for_power(self) -> int | None:
        """Seeds at which the interval over seeds settles a value one minimum effect from the threshold with 80%
        probability (:func:`probes.stats.power.units_for_power`; one seed: the seed's own units)."""
        if len(self.seeds) == 1:
            return self.first.units_for_power
        return units_for_power(self.ci, len(self.seeds), threshold_distance(self.reference, self.min_effect,
                                                                            self.effect))

    @property
    def confidence_sequence(self) -> tuple[float, float]:
        """One seed: that seed's sequence over its units. Several: NaN, since seeds are not monitored (their number
        is fixed before training), so the fixed interval over seeds is the valid one."""
        if len(self.seeds) == 1:
            return self.first.confidence_sequence
        return float("nan"), float("nan")

    def control_finding(self) -> ToyFinding:
        """The initialised toy's own finding over the same seeds (its control slot empty): it should not hold."""
        return ToyFinding(self.toy, self.name, self.seeds, self.control_per_seed, ())


def aggregate_seeds(toy: str, seeds: Sequence[SeedFindings]) -> dict[str, ToyFinding]:
    """One :class:`ToyFinding` per finding name from the seeds of ``toy`` (each seed must name the same findings)."""
    if not seeds:
        raise ConfigError(f"The {toy} toy needs at least one seed of findings.")
    names = list(seeds[0].findings)
    for one in seeds[1:]:
        if list(one.findings) != names:
            raise InputError(f"Seed {one.seed} of the {toy} toy measured {list(one.findings)}; seed "
                             f"{seeds[0].seed} measured {names}.")
    order = tuple(one.seed for one in seeds)
    if len(set(order)) != len(order):
        raise ConfigError(f"The {toy} toy's seeds repeat: {list(order)}.")
    return {name: ToyFinding(toy, name, order, tuple(one.findings[name] for one in seeds),
                             tuple(one.control[name] for one in seeds)) for name in names}


def seed_findings_of(findings: Mapping[str, ToyFinding]) -> list[SeedFindings]:
    """The per-seed findings back from aggregated ones (inverse of :func:`aggregate_seeds`)."""
    if not findings:
        return []
    seeds = next(iter(findings.values())).seeds
    return [SeedFindings(seed, {name: f.per_seed[i] for name, f in findings.items()},
                         {name: f.control_per_seed[i] for name, f in findings.items()})
            for i, seed in enumerate(seeds)]
