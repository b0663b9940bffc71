"""Tian et al.'s "scan, then snap" as an order of events on the Scan and Snap toy (``scan_before_snap``; the
finding's rules: :mod:`analyses.toy_orders`).

Per fact, the main run records the long-context attention composition over the fact's support at every step
(``MainRun.trajectory``). The scan curve is its total-variation distance from the initial composition and the scan
event where that crosses half-way to its held peak; the snap is the rate detector's step (``snap_rate``,
``snap_patience``), none if the composition has not snapped by the end (:func:`probes.dynamics.event_orders.
scan_snap_order`, which says why half-way and how the order can fail). The per-seed value is snap minus scan,
averaged over the facts. Control: the same training with attention's learning rate at 0 (eta_Z = 0): Z keeps its
initial value, so the composition at every recorded step is the initial one; it never moves, so there is neither a
scan nor a snap. Measured on the fast preset (100 steps), seeds 0-2: scan at steps 13-14, snap at 30-31.

Example: ``scan_before_snap(scan_snap_orders(main.trajectory, main.steps, config), config).value`` (steps).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from analyses.curve_series import CurveSeries
from analyses.scansnap.config import ScanSnapConfig
from analyses.toy_orders import events_text, min_effect, order_finding
from probes.dynamics.event_orders import ScanSnapOrder, scan_snap_order
from probes.stats.findings import Finding
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZTransformer

ORDER = "scan_before_snap"
STATISTIC = ("snap step minus scan step, mean over facts (Y/Z toy; scan: where the attention composition's "
             "total-variation distance from its initial composition crosses half-way to its held peak; snap: the "
             "rate detector's step)")
SELECTION = "no search: every fact's composition over its support"


def scan_snap_orders(trajectory: Sequence[Sequence[Tensor]], steps: Sequence[int], config: ScanSnapConfig
                     ) -> tuple[ScanSnapOrder, ...]:
    """Each fact's scan, snap and order from ``trajectory[f][i]``, its composition at ``steps[i]``."""
    return tuple(scan_snap_order(torch.stack(list(fact)), steps, rate=config.snap_rate,
                                 patience=config.snap_patience) for fact in trajectory)


def frozen_attention_trajectory(model: YZTransformer, data: CooccurrenceData, steps: Sequence[int]
                                ) -> list[list[Tensor]]:
    """Every fact's composition at each of ``steps`` in the same training with attention frozen at ``model``'s
    (eta_Z = 0): ``Z`` never moves, so each is the current one."""
    composition = model.expected_attention(data.fact_last, data.context_probs).cpu().float()
    return [[composition[f, data.support(f)]] * len(steps) for f in range(data.n_facts)]


def scan_before_snap(orders: Sequence[ScanSnapOrder], config: ScanSnapConfig) -> Finding:
    """The unadjusted per-seed finding of the facts' orders (module docstring)."""
    exact = [o.order for o in orders]
    return order_finding(exact, statistic=f"{STATISTIC}; events per fact: {events_text(exact)}",
                         min_effect=min_effect(config.train.n_steps), selection=SELECTION)


def order_series(orders: Sequence[ScanSnapOrder], steps: Sequence[int], finding: Finding,
                 name: str = "Scan and Snap toy") -> CurveSeries:
    """The composition's displacement from its start (mean over facts) with every fact's scan (where its own curve
    crosses half-way) and snap (its curve's value at the snap) marked, filled when ``finding``, the order's, holds;
    for :func:`analyses.dynamics.figures.plot_series_together`."""
    curve = [sum(values) / len(orders) for values in zip(*(o.displacement for o in orders))]
    marks = []
    for order in orders:
        if order.scan.step == order.scan.step:
            marks.append((order.scan.step, order.scan.level, finding.holds))
        if order.snap.snapped:
            marks.append((float(order.snap.step), order.displacement[order.snap.index], finding.holds))
    return CurveSeries(name, tuple(steps), {"composition_displacement": curve},
                       {"composition_displacement": tuple(marks)})
