"""The snap detectors: reference loops, known answers, still-moving trajectories, run-length independence, errors."""

from __future__ import annotations

import math

import pytest
import torch

from mechprobe import records
from probes.core.errors import ConfigError, InputError
from probes.dynamics.snap import detect_snap, detect_snap_by_rate


def reference_snap_index(trajectory: torch.Tensor, tolerance: float) -> int:
    """The first index from which every later composition is within ``tolerance`` (TV) of the last."""
    compositions = [row / row.sum() for row in trajectory.double()]
    final = compositions[-1]
    for start in range(len(compositions)):
        if all(0.5 * float((c - final).abs().sum()) <= tolerance for c in compositions[start:]):
            return start
    raise AssertionError("unreachable: the last index always qualifies")


def test_known_answer_freezes_at_step_5():
    rows = [torch.tensor([1.0 - 0.1 * t, 0.1 * t]) for t in range(6)] + [torch.tensor([0.5, 0.5])] * 10
    snap = detect_snap(torch.stack(rows), tolerance=0.0, patience=5)
    assert (snap.index, snap.step, snap.snapped) == (5, 5, True)
    assert snap.distance_to_final[0] == pytest.approx(0.5)
    assert records.dump(snap)["step"] == 5


def test_tolerance_and_named_steps():
    rows = torch.tensor([[1.0, 0.0], [0.7, 0.3], [0.52, 0.48], [0.505, 0.495], [0.5, 0.5]])
    steps = [0, 10, 20, 30, 40]
    assert detect_snap(rows, steps, tolerance=0.0, patience=0).step == 40
    assert detect_snap(rows, steps, tolerance=0.01, patience=0).step == 30
    assert detect_snap(rows, steps, tolerance=0.05, patience=0).step == 20
    assert detect_snap(rows * 7, steps, tolerance=0.05, patience=0).step == 20  # rows are normalised


def test_still_moving_trajectory_is_not_snapped():
    rows = torch.stack([torch.tensor([1.0, 0.1 * t + 0.01]) for t in range(30)])
    snap = detect_snap(rows, tolerance=0.001, patience=5)
    assert snap.index >= 28 and not snap.snapped


def test_matches_the_reference_on_random_walks():
    generator = torch.Generator().manual_seed(0)
    for trial in range(20):
        steps = torch.rand(40, 5, generator=generator) * torch.linspace(1.0, 0.0, 40)[:, None] ** 3
        trajectory = 1 + steps.cumsum(0)
        tolerance = [0.0, 0.001, 0.01, 0.05][trial % 4]
        assert detect_snap(trajectory, tolerance=tolerance).index == reference_snap_index(trajectory, tolerance)


def test_errors():
    with pytest.raises(InputError, match=r"\[step, component\]"):
        detect_snap(torch.ones(5))
    with pytest.raises(InputError, match="non-negative"):
        detect_snap(torch.tensor([[1.0, -1.0]]))
    with pytest.raises(InputError, match="positive sum"):
        detect_snap(torch.tensor([[0.0, 0.0]]))
    with pytest.raises(InputError, match="steps names 2 steps"):
        detect_snap(torch.ones(3, 2), steps=[0, 1])
    with pytest.raises(ConfigError, match="tolerance"):
        detect_snap(torch.ones(3, 2), tolerance=1.5)
    with pytest.raises(ConfigError, match="patience"):
        detect_snap(torch.ones(3, 2), patience=-1)


# -- detect_snap_by_rate -----------------------------------------------------------------------------
def reference_rate_snap_index(trajectory: torch.Tensor, rate: float, patience: int) -> int | None:
    """Nested loops over the definition: the first index whose forward speed stays <= rate * total change."""
    c = [row / row.sum() for row in trajectory.double()]

    def tv(a: torch.Tensor, b: torch.Tensor) -> float:
        return 0.5 * float((a - b).abs().sum())

    def slow(i: int) -> bool:
        total = tv(c[i], c[0])
        return total > 0 and tv(c[i + 1], c[i]) <= rate * total

    for start in range(1, len(c) - 1 - patience):
        if all(slow(i) for i in range(start, start + patience + 1)):
            return start
    return None


def test_rate_snap_of_a_ramp_that_stops_is_where_it_stops():
    # moves 0.1 per step for 10 steps, then frozen: the speed leaving step 10 is 0
    rows = [torch.tensor([1.0 - 0.1 * min(t, 10), 0.1 * min(t, 10)]) for t in range(30)]
    snap = detect_snap_by_rate(torch.stack(rows), rate=0.01, patience=5)
    assert (snap.index, snap.step, snap.snapped) == (10, 10, True)
    assert snap.relative_speed[1] == pytest.approx(1.0) and snap.relative_speed[5] == pytest.approx(0.2)
    assert math.isnan(snap.relative_speed[0]) and records.dump(snap)["relative_speed"][0] is None


def test_rate_snap_of_an_exponential_relaxation_has_the_closed_form_answer():
    # a_t = 1 - exp(-t / tau): speed leaving t is exp(-t/tau) (1 - exp(-1/tau)), total change a_t
    tau, rate = 8.0, 0.02
    a = [1 - math.exp(-t / tau) for t in range(200)]
    rows = torch.tensor([[1 - x, x] for x in a])
    expected = next(t for t in range(1, 199)
                    if math.exp(-t / tau) * (1 - math.exp(-1 / tau)) <= rate * a[t])
    snap = detect_snap_by_rate(rows, rate=rate, patience=3)
    assert snap.index == expected == reference_rate_snap_index(rows, rate, 3)
    assert abs(expected - tau * math.log(1 / (rate * tau))) < 2  # speed ~ exp(-t / tau) / tau, a_t ~ 1


def test_rate_snap_does_not_depend_on_the_run_length_but_the_final_distance_one_does():
    # a fast approach, then a slow logarithmic drift that never quite stops
    a = [1 - math.exp(-t / 5) + 0.02 * math.log1p(t) for t in range(400)]
    rows = torch.tensor([[2 - x, x] for x in a])
    short, long = detect_snap_by_rate(rows[:100], rate=0.01), detect_snap_by_rate(rows, rate=0.01)
    assert short.snapped and (short.step, short.index) == (long.step, long.index)
    assert detect_snap(rows[:100], tolerance=0.01).step != detect_snap(rows, tolerance=0.01).step


def test_rate_snap_matches_the_reference_on_random_walks_and_named_steps():
    generator = torch.Generator().manual_seed(1)
    for trial in range(20):
        increments = torch.rand(40, 4, generator=generator) * torch.linspace(1.0, 0.0, 40)[:, None] ** 3
        trajectory = 1 + increments.cumsum(0)
        rate, patience = [0.005, 0.01, 0.05, 0.2][trial % 4], trial % 3
        expected = reference_rate_snap_index(trajectory, rate, patience)
        snap = detect_snap_by_rate(trajectory, rate=rate, patience=patience)
        assert snap.index == (len(trajectory) - 1 if expected is None else expected)
        assert snap.snapped == (expected is not None)
    rows = torch.tensor([[1.0, 0.0], [0.5, 0.5], [0.4, 0.6], [0.4, 0.6], [0.4, 0.6]])
    # the speed is per step: recorded every 10 steps, the step from 10 to 20 moves 0.1 / 10 per step
    assert detect_snap_by_rate(rows, [0, 10, 20, 30, 40], rate=0.05, patience=0).step == 10
    assert detect_snap_by_rate(rows, rate=0.05, patience=0).step == 2


def test_rate_snap_of_a_trajectory_still_moving_or_never_moving_is_not_snapped():
    moving = torch.stack([torch.tensor([1.0, 0.1 * t + 0.01]) for t in range(30)])
    assert not detect_snap_by_rate(moving, rate=0.01, patience=5).snapped
    frozen = detect_snap_by_rate(torch.ones(10, 3), rate=0.01, patience=2)
    assert not frozen.snapped and frozen.index == 9


def test_rate_snap_errors():
    with pytest.raises(InputError, match=r"\[step, component\]"):
        detect_snap_by_rate(torch.ones(5))
    with pytest.raises(InputError, match="strictly increasing"):
        detect_snap_by_rate(torch.ones(3, 2), steps=[0, 2, 2])
    with pytest.raises(ConfigError, match="rate must be a finite number > 0"):
        detect_snap_by_rate(torch.ones(3, 2), rate=0)
    with pytest.raises(ConfigError, match="patience"):
        detect_snap_by_rate(torch.ones(3, 2), patience=-2)
