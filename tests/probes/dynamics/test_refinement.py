"""Checkpoints where the events are: a rise planted inside one coarse bracket of a log-spaced series is located by
the refinement loop to the planted step within the stated width, with the change-point rule of every dynamics event;
the planner adds steps only inside the brackets an unresolved interval overlaps."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from probes.core.errors import ConfigError
from probes.dynamics.change_point import CurveUnits, change_point
from probes.dynamics.refinement import (
    RefinementSettings,
    interval_share,
    refine_events,
    refinement_steps,
    resolved,
)

COARSE = (0, 10, 15, 22, 33, 49, 72, 107, 158, 235, 348, 516, 766, 1136, 1685, 2500)  # train-lm's default grid


def planted_units(steps, planted: float, *, rise: float = 0.4, sharpness: float = 0.08, noise: float = 0.02,
                  n_units: int = 8) -> CurveUnits:
    """A head score per batch: 0.05 + ``rise`` * a logistic in log(1 + step) centred on ``planted`` (half-way
    there), plus batch noise that depends only on the step (a checkpoint measured twice gives the same value)."""
    rows = []
    for step in steps:
        generator = torch.Generator().manual_seed(int(step))
        centre = (math.log1p(step) - math.log1p(planted)) / sharpness
        value = 0.05 + rise / (1 + math.exp(-centre))
        rows.append(value + noise * torch.randn(n_units, generator=generator, dtype=torch.float64))
    numerator = torch.stack(rows)
    return CurveUnits(numerator, torch.ones_like(numerator))


def reference_bracket_steps(low: int, high: int, spacing: float) -> list[int]:
    """The slow reference: walk from ``low`` in equal pieces no longer than ``spacing``."""
    pieces = 1
    while (high - low) / pieces > spacing:
        pieces += 1
    return [round(low + j * (high - low) / pieces) for j in range(1, pieces)]


@pytest.mark.parametrize("planted", [1900.0, 1200.0, 300.0])
def test_a_rise_planted_inside_a_coarse_bracket_is_resolved_to_the_planted_step(planted):
    steps = list(COARSE)

    def measure():
        point = change_point(planted_units(steps, planted), steps, n_boot=400, seed=0)
        return steps, {"planted": (point.step, point.step_ci)}

    refinement = refine_events(measure, lambda new: steps.extend(new) or steps.sort())
    first_step, first_ci = refinement.rounds[0].events["planted"]
    step, ci = refinement.final["planted"]
    width = refinement.settings.width
    assert interval_share((first_step, first_ci)) > width  # the coarse grid alone cannot locate it
    assert refinement.resolved == {"planted": True}
    assert ci[1] - ci[0] <= width * step
    assert ci[0] <= planted <= ci[1]
    assert abs(step - planted) <= width / 2 * planted
    assert len(refinement.rounds) <= refinement.settings.rounds + 1


def test_a_flat_curve_adds_steps_only_where_its_noisy_event_would_be_and_a_missing_event_adds_none():
    no_event = refinement_steps(COARSE, {"flat": (math.nan, (math.nan, math.nan))})
    assert no_event == {"flat": ()}
    calls = []
    refinement = refine_events(lambda: (COARSE, {"flat": (math.nan, (math.nan, math.nan))}), calls.append)
    assert calls == [] and len(refinement.rounds) == 1 and refinement.resolved == {"flat": False}


def test_new_steps_fall_inside_the_overlapped_brackets_at_the_asked_spacing():
    settings = RefinementSettings(width=0.2, per_width=4, max_new=100)
    plan = refinement_steps(COARSE, {"a": (2000.0, (1685.0, 2500.0)), "b": (40.0, (41.0, 42.0)),
                                     "c": (500.0, (400.0, 700.0))}, settings)
    assert plan["a"] == tuple(reference_bracket_steps(1685, 2500, 100.0))
    assert plan["b"] == ()  # already within 20% of its step
    assert plan["c"] == tuple(reference_bracket_steps(348, 516, 25.0) + reference_bracket_steps(516, 766, 25.0))
    grid = sorted({348, 516, 766, *plan["c"]})
    assert max(b - a for a, b in itertools.pairwise(grid)) <= 25  # no piece longer than width * step / per_width
    capped = refinement_steps(COARSE, {"a": (300.0, (100.0, 2500.0))}, RefinementSettings(max_new=16))["a"]
    assert len(capped) <= 16 and all(100 < s < 2500 for s in capped)


def test_an_event_at_step_zero_or_without_interval_is_never_resolved():
    assert not resolved((0.0, (0.0, 10.0)), 0.2)
    assert resolved((100.0, (95.0, 110.0)), 0.2)
    with pytest.raises(ConfigError, match="width"):
        RefinementSettings(width=0.0)
    with pytest.raises(ConfigError, match="rounds"):
        RefinementSettings(rounds=0)


def test_an_interval_wide_from_noise_over_dense_checkpoints_is_called_noise_limited_and_adds_nothing():
    dense = tuple(range(0, 200))  # every step a checkpoint: no bracket left to cut
    calls = []
    refinement = refine_events(lambda: (dense, {"noisy": (100.0, (60.0, 150.0))}), calls.append)
    assert calls == [] and refinement.resolved == {"noisy": False} and refinement.noise_limited == {"noisy": True}
    sparse = refine_events(lambda: (COARSE, {"wide": (1900.0, (1685.0, 2500.0))}), lambda new: None,
                           RefinementSettings(rounds=1))
    assert sparse.noise_limited == {"wide": False}  # its brackets could still be cut: the rounds ran out
