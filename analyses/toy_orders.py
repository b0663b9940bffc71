"""The papers' orders of events on their toys as findings: "W_V moves before W_K/W_Q" (Li, Li & Risteski, the topic
toy) and "scan before snap" (Tian et al., the Scan and Snap toy), tested like the dynamics orders ("copier before
classifier", :mod:`analyses.dynamics.events`) but on curves known exactly.

Per seed the statistic is ``later - earlier`` event steps (:class:`probes.dynamics.event_orders.ExactOrder`; each
event by the dynamics rule, :func:`probes.dynamics.change_point.curve_event`), averaged over the toy's units where it
has several (the Scan and Snap toy's facts). The curves are computed from the weights, with no sampling, so
within a seed:

- the interval is the checkpoint grid's (each event lies between the two recorded steps around it), averaged the
  same way;
- the p-value is 0 when that interval lies above 0 (the order is resolved at the recorded steps) and 1 when not;
- an order whose events did not both happen is no order: it counts as 0, its interval (0, 0), p = 1 (as a tied
  Spearman counts as 0 in the Scan and Snap toy's findings).

Null: 0, no order. Minimum effect: ``MIN_EFFECT_SHARE`` (5%) of the run's steps, so the two events must lie at
least a twentieth of training apart (on the fast presets 20 of 400 topic steps, two recorded steps; 5 of 100 Scan
and Snap steps). Control: the same toy with the relevant weights' learning rate at 0, measured by the same code at
the same recorded steps: the weights never move, so neither event happens (a constant curve never rises) and the
control is 0. Over seeds the seeds are the units: the toy's
:class:`~analyses.toy_findings.ToyFinding` takes the mean difference with its Student-t interval over seeds and
holds when the interval's lower end clears the control and the null by the minimum effect.

Example: ``order_finding([order], statistic="snap step minus scan step", min_effect=5.0).holds``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from probes.core.errors import InputError
from probes.dynamics.event_orders import ExactOrder
from probes.stats.findings import Finding

MIN_EFFECT_SHARE = 0.05
NULL_KIND = ("0: no order (exact curves, nothing sampled within a seed: the interval is the checkpoint grid's, p is 0 "
             "when it lies above 0 and 1 when not; an order whose events did not both happen counts as 0)")


def min_effect(n_steps: int) -> float:
    """The minimum effect of an order over a run of ``n_steps`` steps: ``MIN_EFFECT_SHARE`` of it, in steps."""
    return MIN_EFFECT_SHARE * n_steps


def order_finding(orders: Sequence[ExactOrder], *, statistic: str, min_effect: float, selection: str = "") -> Finding:
    """The unadjusted per-seed :class:`Finding` of ``orders`` (one per unit, e.g. per fact; module docstring)."""
    if not orders:
        raise InputError("An order finding needs at least one order (one per fact, or the toy's one).")
    differences = [o.difference if o.observed else 0.0 for o in orders]
    lows = [o.interval[0] if o.observed else 0.0 for o in orders]
    highs = [o.interval[1] if o.observed else 0.0 for o in orders]
    value = sum(differences) / len(orders)
    ci = (sum(lows) / len(orders), sum(highs) / len(orders))
    p_value = 0.0 if all(o.observed for o in orders) and ci[0] > 0 else 1.0
    return Finding(statistic, value, ci, NULL_KIND, 0.0, p_value, min_effect, selection=selection,
                   n_units=len(orders))


def events_text(orders: Sequence[ExactOrder]) -> str:
    """The events' steps, for the statistic's text: ``"earlier 80 -> later 263"`` per unit, ``;``-separated."""
    def step(value: float) -> str:
        return "none" if math.isnan(value) else f"{value:.0f}"

    return "; ".join(f"{o.earlier} {step(o.earlier_step)} -> {o.later} {step(o.later_step)}" for o in orders)
