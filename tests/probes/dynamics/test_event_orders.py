"""Orders of events on exactly known curves: a plain curve's event is the dynamics rule's, a composition that scans
and then freezes orders scan before snap, and the order fails where it should: a composition that drifts at a
constant speed (the rate detector 'snaps' at about 1 / rate steps, long before half the drift), one that pauses and
moves again, and a frozen one (no scan, no snap: no order)."""

from __future__ import annotations

import math

import pytest
import torch

from probes.dynamics.change_point import crossing_bracket, curve_event, peak_index, rise_steps
from probes.dynamics.event_orders import ExactOrder, composition_displacement, scan_snap_order

STEPS = list(range(301))


def _composition(moved: torch.Tensor) -> torch.Tensor:
    """Two-token compositions [step 2] whose TV distance from the first row is ``moved`` (start: [0.9, 0.1])."""
    return torch.stack([0.9 - moved, 0.1 + moved], 1).double()


def test_a_curve_event_is_the_dynamics_rule_on_the_curve():
    values = torch.tensor([0.0, 0.05, 0.25, 0.75, 0.9, 1.0, 0.95], dtype=torch.float64)
    steps = (0, 10, 30, 100, 300, 1000, 3000)
    event = curve_event(values, steps)
    peak = peak_index(values)
    assert event.step == float(rise_steps(values[None], steps, 0.5, peak)[0])
    assert event.bracket == crossing_bracket(values, steps, 0.5, peak) == (30.0, 100.0)
    assert (event.start, event.end, event.peak_step, event.level) == (0.0, 1.0, 1000.0, 0.5)
    # half-way between 0.25 and 0.75 in value, so half-way from 30 to 100 in log(1 + step)
    assert event.step == pytest.approx(math.expm1(0.5 * (math.log1p(30) + math.log1p(100))))
    assert math.isnan(curve_event([0.3] * 4, steps[:4]).step)  # a constant curve never rises


def test_an_exact_order_is_the_difference_with_the_grid_as_its_interval():
    order = ExactOrder("a", "b", 14.0, 31.0, (10.0, 20.0), (30.0, 31.0))
    assert order.observed and order.difference == 17.0 and order.interval == (10.0, 21.0)
    missing = ExactOrder("a", "b", 14.0, math.nan, (10.0, 20.0), (math.nan, math.nan))
    assert not missing.observed and math.isnan(missing.difference)


def test_a_composition_that_scans_then_freezes_snaps_after_its_scan():
    t = torch.arange(len(STEPS), dtype=torch.float64)
    order = scan_snap_order(_composition(0.6 * (1 - torch.exp(-t / 10))), STEPS, rate=0.01, patience=10)
    # D_t = 0.6 (1 - exp(-t / 10)) crosses half its peak at t = 10 ln 2 = 6.9: between steps 6 and 7
    assert order.scan.bracket == (6.0, 7.0) and 6 < order.scan.step < 7
    # relative speed (exp(-t/10) (1 - exp(-1/10))) / (1 - exp(-t/10)) <= 0.01 from t = 24
    assert order.snap.snapped and order.snap.step == 24
    assert order.order.observed and order.order.interval == (16.0, 18.0) and 17 < order.order.difference < 18


def test_a_constant_drift_snaps_before_its_scan_so_the_order_fails():
    # the composition never freezes: it moves 0.002 per step for 300 steps; its speed over its displacement is
    # 1 / t, below the snap rate from t = 100, while half its drift is reached at t = 150
    order = scan_snap_order(_composition(0.002 * torch.arange(len(STEPS), dtype=torch.float64)), STEPS,
                            rate=0.01, patience=10)
    assert order.snap.snapped and order.snap.step == 101
    assert order.scan.step == pytest.approx(150.0)
    assert order.order.difference == pytest.approx(-49.0) and order.order.interval[1] < 0


def test_a_composition_that_pauses_and_moves_again_snaps_at_the_pause_before_most_of_its_move():
    t = torch.arange(len(STEPS), dtype=torch.float64)
    first = 0.1 * (1 - torch.exp(-t / 5))                     # a small move that settles by step ~40
    second = 0.5 * torch.sigmoid((t - 200) / 5)                 # most of the move, around step 200
    order = scan_snap_order(_composition(first + second), STEPS, rate=0.01, patience=10)
    assert order.snap.snapped and order.snap.step < 40 and order.scan.step > 190
    assert order.order.difference < -150


def test_a_frozen_composition_neither_scans_nor_snaps_so_no_order_is_observed():
    frozen = _composition(torch.zeros(len(STEPS), dtype=torch.float64))
    order = scan_snap_order(frozen, STEPS)
    assert order.displacement == (0.0,) * len(STEPS)
    assert math.isnan(order.scan.step) and not order.snap.snapped and not order.order.observed


def test_a_composition_still_moving_at_the_end_has_no_snap():
    # a constant drift slows relative to its displacement (1 / t) below the rate only from step 100
    order = scan_snap_order(_composition(0.002 * torch.arange(60, dtype=torch.float64)), list(range(60)))
    assert not order.snap.snapped and math.isnan(order.order.later_step) and not order.order.observed


def test_displacement_is_the_total_variation_from_the_first_composition():
    assert composition_displacement(torch.tensor([[1.0, 1.0], [3.0, 1.0], [1.0, 3.0]])).tolist() == [0.0, 0.25, 0.25]
