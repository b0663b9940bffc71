"""Scan order: peak steps of hand-made attention trajectories and their correlation with co-occurrence."""

from __future__ import annotations

import math

import pytest
import torch

from mechprobe import records
from probes.core.errors import ConfigError, InputError
from probes.dynamics.scan_order import peak_steps, scan_order


def bump(peak: int, n_steps: int = 50, width: float = 6.0) -> torch.Tensor:
    """An attention curve that rises to a maximum at ``peak`` and falls after it."""
    t = torch.arange(n_steps, dtype=torch.float64)
    return torch.exp(-((t - peak) / width) ** 2)


def test_known_peaks_and_the_scan_order_of_the_paper():
    # four distinct tokens, co-occurrence 0.1 < 0.2 < 0.3 < 0.4; low co-occurrence peaks (and falls) first,
    # the most frequent token rises until the end: Scan and Snap's "low to high co-occurrence" order
    curves = torch.stack([bump(5), bump(12), bump(30), torch.linspace(0.1, 1.0, 50, dtype=torch.float64)], 1)
    assert peak_steps(curves, tolerance=0.0) == [5, 12, 30, 49]
    order = scan_order(curves, torch.tensor([0.1, 0.2, 0.3, 0.4]), tolerance=0.0)
    assert order.peak_steps == (5, 12, 30, 49)
    assert order.spearman == pytest.approx(1.0) and order.kendall == pytest.approx(1.0)
    reverse = scan_order(curves, torch.tensor([0.4, 0.3, 0.2, 0.1]), tolerance=0.0)
    assert reverse.spearman == pytest.approx(-1.0)
    assert scan_order(curves, torch.tensor([0.1, 0.2, 0.3, 0.4]), steps=range(0, 500, 10),
                      tolerance=0.0).peak_steps == (50, 120, 300, 490)


def test_tolerance_puts_a_drifting_plateau_at_its_start():
    # rises to 1 by step 10, then drifts up by 1e-4 per step (a snapped attention creeping logarithmically)
    t = torch.arange(60, dtype=torch.float64)
    plateau = torch.where(t < 10, t / 10, 1 + 1e-4 * (t - 10))
    falling = 1 - t / 100
    curves = torch.stack([plateau, falling], 1)
    assert peak_steps(curves, tolerance=0.0) == [59, 0]
    assert peak_steps(curves, tolerance=0.05) == [10, 0]  # within 5% of the range below the top: step 10 (1.0)


def test_reference_loop_on_random_curves():
    generator = torch.Generator().manual_seed(0)
    curves = torch.rand(30, 7, generator=generator).cumsum(0) * torch.rand(30, 7, generator=generator)
    for tolerance in (0.0, 0.1, 0.5):
        expected = []
        for column in curves.T.tolist():
            top, bottom = max(column), min(column)
            expected.append(next(i for i, v in enumerate(column) if v >= top - tolerance * (top - bottom)))
        assert peak_steps(curves, tolerance=tolerance) == expected


def test_constant_cooccurrence_gives_nan_and_errors():
    curves = torch.stack([bump(3), bump(9)], 1)
    assert math.isnan(scan_order(curves, torch.tensor([0.5, 0.5])).spearman)
    assert records.dump(scan_order(curves, torch.tensor([0.5, 0.5])))["spearman"] is None
    with pytest.raises(InputError, match="one value per trajectory column"):
        scan_order(curves, torch.tensor([0.1, 0.2, 0.3]))
    with pytest.raises(InputError, match=r"\[step, token\]"):
        peak_steps(torch.ones(4))
    with pytest.raises(InputError, match="steps names 2 steps"):
        peak_steps(curves, steps=[0, 1])
    with pytest.raises(ConfigError, match="tolerance"):
        peak_steps(curves, tolerance=1.0)
