"""Events of a checkpoint series as findings: where each curve rises, and the order of two events.

Each curve's event (:func:`probes.dynamics.change_point.change_point`) is judged as a :class:`~probes.Finding`:
the statistic is the curve at its peak checkpoint (the last one for a curve that keeps rising; see
:mod:`probes.dynamics.change_point`), its null the curve's null there (uniform-attention chance for a
head score, 0 for a loss gain), its control the curve at the first checkpoint (the series before, or as early as it
goes), and its p-value the share of bootstrap draws (batches resampled, paired across checkpoints) in which the
curve did not rise from the first checkpoint to the peak. It holds when the peak checkpoint clears both the null
and the first checkpoint by the curve's minimum effect (0.1 attention mass; 0.1 nats per token) with the whole
interval above them, and the rise's adjusted p-value is below 0.01. The text probes' curves (same-topic attention, a
ratio; co-occurrence ordering) take the report's minimum effects and nulls.

An order ("previous-token forms before induction"; on the induction toy's series, Chen et al.'s "copier forms
before classifier") is a finding on ``step_B - step_A`` (paired draws, null 0:
no order); it is tested only when both events hold (otherwise its p-value is NaN and it does not hold). The
head and text findings of one series are one Holm family, and the phases' (below, with the orders that involve a
phase) another: two questions, so adding the phases leaves the heads' verdicts as they were (a bootstrap p-value
is at least ``1 / (n_boot + 1)``, so a family of more than 10 findings could not pass 0.01 with 1,000 draws).

On the induction toy's series the phases of the in-context solution (:mod:`analyses.dynamics.toy_phases`) are curves
too: the uniform, in-context unigram and in-context bigram predictors' loss minus the model's, whose event is where
the curve passes 0 for good (:data:`CROSSINGS`), minimum effect 0.05 nats per token at the peak. Their orders:
uniform before unigram before bigram passed (Edelman et al. 2024's phases), the unigram passed before the copier
forms (the unigram needs no copying), and the copier and the classifier formed before the bigram is passed (the
in-context bigram needs the previous state copied and matched).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.measure import CheckpointMeasure
from analyses.pretrained.findings import TOPIC_ATTENTION_NULL, min_effect_of
from probes.core.errors import InputError
from probes.dynamics.change_point import ChangePoint, CurveUnits, change_point, event_order
from probes.stats.findings import Finding, adjust_family

EVENT_CURVES: dict[str, tuple[str, str, float, Literal["difference", "ratio"]]] = {
    # curve: (what it is, its null, minimum effect, effect)
    "previous_token": ("previous-token score of the best head on [BOS] X X", "uniform attention", 0.1, "difference"),
    "induction": ("induction score of the best head on [BOS] X X", "uniform attention", 0.1, "difference"),
    "duplicate_token": ("duplicate-token score of the best head on [BOS] X X", "uniform attention", 0.1,
                        "difference"),
    "repeat_loss_gain": ("loss on the first copy of X minus on the repeated copy (nats/token)",
                         "0: the context does not help", 0.1, "difference"),
    "context_loss_gain": ("loss at early minus late positions of natural text (nats/token)",
                          "0: the context does not help", 0.1, "difference"),
    "topic_attention": ("same/different-topic attention ratio of the best head on natural text",
                        TOPIC_ATTENTION_NULL, min_effect_of("topic_attention_best_head"), "ratio"),
    "cooccurrence_ordering": ("Spearman of distance-matched attention with co-occurrence, best head, natural text",
                              "co-occurrence shuffled among each query's keys", min_effect_of("cooccurrence_ordering"),
                              "difference"),
    "copier": ("layer-1 attention on the parent distances (best head per distance) on held-out chains",
               "uniform attention", 0.1, "difference"),
    "classifier": ("generalized induction score of the best layer-2 head on held-out chains", "uniform attention",
                   0.1, "difference"),
    "beats_uniform": ("uniform prediction's loss minus the model's on held-out chains (nats/token)",
                      "0: the model no better than uniform", 0.05, "difference"),
    "beats_unigram": ("in-context unigram's loss minus the model's on held-out chains (nats/token)",
                      "0: the model no better than the in-context unigram", 0.05, "difference"),
    "beats_bigram": ("in-context bigram's loss minus the model's on held-out chains (nats/token)",
                     "0: the model no better than the in-context bigram", 0.05, "difference"),
}
CROSSINGS = {"beats_uniform": 0.0, "beats_unigram": 0.0, "beats_bigram": 0.0}
"""Curves whose event is where they pass a fixed value for good (the model's loss falls below the baseline's),
not half-way up their rise (:func:`probes.dynamics.change_point.change_point`'s ``crossing``)."""
ORDERS = (("previous_token", "induction"), ("copier", "classifier"),
          # the phases of the in-context solution on the induction toy (analyses.dynamics.toy_phases)
          ("beats_uniform", "beats_unigram"), ("beats_unigram", "beats_bigram"), ("beats_unigram", "copier"),
          ("copier", "beats_bigram"), ("classifier", "beats_bigram"))
CONTROL = "the series' first checkpoint"


@dataclass(frozen=True)
class Event:
    """One curve's change point and its finding (module docstring)."""

    curve: str
    change: ChangePoint
    finding: Finding

    @property
    def holds(self) -> bool:
        return self.finding.holds


@dataclass(frozen=True)
class SeriesEvents:
    """The events of every curve, the orders between them, and whether the in-context loss drop's step falls
    inside the induction event's interval: on the repeated half of ``[BOS] X X`` (``repeat_loss_gain``,
    ``loss_drop_within_induction``) and on natural text (``context_loss_gain``, with ``--corpus``:
    ``text_loss_drop_within_induction``); None when either event is missing or does not hold."""

    events: dict[str, Event]
    orders: dict[str, Finding]
    loss_drop_within_induction: bool | None
    text_loss_drop_within_induction: bool | None = None


def _rule(curve: str, fraction: float) -> str:
    return f"where it passes {CROSSINGS[curve]:g}" if curve in CROSSINGS else f"at {fraction:g} of its rise"


def curve_units(measures: Sequence[CheckpointMeasure], curve: str) -> CurveUnits | None:
    """The per-batch sums of ``curve`` at every checkpoint, or None when a checkpoint lacks it."""
    if not all(curve in m.curves for m in measures):
        return None
    points = [m.curves[curve] for m in measures]

    def stack(field: str) -> torch.Tensor | None:
        values = [getattr(p, field) for p in points]
        return None if any(v is None for v in values) else torch.tensor(values, dtype=torch.float64)

    numerator, denominator = stack("numerator"), stack("denominator")
    assert numerator is not None and denominator is not None
    divide = {p.divide for p in points}
    if len(divide) != 1:
        raise InputError(f"The curve {curve} is a ratio at some checkpoints and a difference at others; measure the "
                         f"series again into a new --out.")
    return CurveUnits(numerator, denominator, stack("minus_numerator"), stack("minus_denominator"),
                      divide=divide.pop())


def _event(curve: str, change: ChangePoint, null_value: float) -> Event:
    statistic, null_kind, min_effect, effect = EVENT_CURVES[curve]
    finding = Finding(f"{statistic} at its peak checkpoint (step {change.peak_step:.0f}), beside the first",
                      change.end, change.end_ci,
                      f"{null_kind}; p: share of bootstrap draws (batches) with no rise from the first checkpoint",
                      null_value, change.p_value, min_effect, effect, selection=f"control: {CONTROL}")
    return Event(curve, change, finding.with_control(change.start, change.start_ci))


def _adjust_families(findings: dict[str, Finding], family: dict[str, str]) -> dict[str, Finding]:
    """Holm within each family (module docstring)."""
    adjusted: dict[str, Finding] = {}
    for name in sorted(set(family.values())):
        adjusted.update(adjust_family({key: f for key, f in findings.items() if family[key] == name}))
    return {key: adjusted[key] for key in findings}


def series_events(measures: Sequence[CheckpointMeasure], config: DynamicsConfig) -> SeriesEvents:
    """The events and orders of a measured series (module docstring)."""
    steps = [m.step for m in measures]
    units = {curve: u for curve in EVENT_CURVES if (u := curve_units(measures, curve)) is not None}
    findings: dict[str, Finding] = {}
    changes: dict[str, ChangePoint] = {}
    for curve, curve_units_ in units.items():
        changes[curve] = change_point(curve_units_, steps, n_boot=config.n_boot, seed=config.seed,
                                      fraction=config.fraction, crossing=CROSSINGS.get(curve))
        peak = steps.index(int(changes[curve].peak_step))
        findings[curve] = _event(curve, changes[curve], measures[peak].curves[curve].null_value).finding
    family = {curve: "phases" if curve in CROSSINGS else "heads" for curve in findings}
    event_holds = {curve: finding.holds for curve, finding in _adjust_families(findings, family).items()}
    for earlier, later in ORDERS:
        if earlier not in units or later not in units:
            continue
        order = event_order(units[earlier], units[later], steps, names=(earlier, later), n_boot=config.n_boot,
                            seed=config.seed, fraction=config.fraction,
                            crossings=(CROSSINGS.get(earlier), CROSSINGS.get(later)))
        tested = event_holds[earlier] and event_holds[later]
        family[f"{earlier}_before_{later}"] = "phases" if {earlier, later} & CROSSINGS.keys() else "heads"
        findings[f"{earlier}_before_{later}"] = Finding(
            f"{later} event step minus {earlier} event step", order.difference, order.ci,
            "0: no order (paired bootstrap over batches; tested only when both events hold)", 0.0,
            order.p_value if tested else math.nan, 0.0,
            selection=" and ".join(f"{curve}'s event {_rule(curve, config.fraction)}" for curve in (earlier, later)))
    adjusted = _adjust_families(findings, family)
    events = {curve: Event(curve, changes[curve], adjusted[curve]) for curve in changes}
    orders = {name: finding for name, finding in adjusted.items() if name not in changes}
    def within(gain: str) -> bool | None:
        if "induction" not in events or gain not in events or not events["induction"].holds or \
                not events[gain].holds:
            return None
        low, high = events["induction"].change.step_ci
        return bool(low <= events[gain].change.step <= high)

    return SeriesEvents(events, orders, within("repeat_loss_gain"), within("context_loss_gain"))
