"""The snap detector: reference loop, known answers, still-moving trajectories, errors."""

from __future__ import annotations

import pytest
import torch

from probes.errors import ConfigError, InputError
from probes.snap import detect_snap


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
    assert snap.to_dict()["step"] == 5


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
