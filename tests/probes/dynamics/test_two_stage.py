"""Two-stage detector on synthetic norm histories with known event times."""

from __future__ import annotations

import math

import pytest
import torch

from probes.core.errors import ConfigError, InputError
from probes.dynamics.two_stage import detect_two_stage, norm_events

STEPS = list(range(0, 1001, 5))


def sigmoid_curve(start, end, centre, width=10.0):
    t = torch.tensor(STEPS, dtype=torch.float64)
    return (start + (end - start) * torch.sigmoid((t - centre) / width)).tolist()


def test_separated_stages_are_found_at_the_right_steps():
    norms = {"w_v_norm": sigmoid_curve(1, 20, 150), "w_k_norm": sigmoid_curve(1, 10, 500),
             "w_q_norm": sigmoid_curve(1, 12, 520)}
    result = detect_two_stage(STEPS, norms)
    # sigmoid reaches 5% of its change at centre - width * ln(19) ~ centre - 29
    assert result.first_moves_at == pytest.approx(150 - 29, abs=5)
    assert result.second_moves_at == pytest.approx(500 - 29, abs=5)
    assert 150 < result.first_plateaus_at < 250
    assert result.separated
    assert result.second_progress_at_first_plateau < 0.01


def test_overlapping_stages_are_not_separated():
    norms = {"w_v_norm": sigmoid_curve(1, 20, 300, 60), "w_k_norm": sigmoid_curve(1, 10, 250, 60),
             "w_q_norm": sigmoid_curve(1, 10, 260, 60)}
    result = detect_two_stage(STEPS, norms)
    assert not result.separated
    assert result.second_progress_at_first_plateau > 0.5


def test_constant_series_never_moves_and_nan_records_are_skipped():
    events = norm_events(STEPS, [2.0] * len(STEPS))
    assert events.moves_at is None and events.plateaus_at is None and events.change == 0
    values = sigmoid_curve(0, 1, 500)
    values[::2] = [math.nan] * len(values[::2])
    assert norm_events(STEPS, values).moves_at == pytest.approx(500 - 29, abs=10)


def test_errors():
    with pytest.raises(InputError, match="no columns"):
        detect_two_stage(STEPS, {"w_v_norm": [1.0] * len(STEPS)})
    with pytest.raises(InputError, match="at least two"):
        norm_events([1], [1.0])
    with pytest.raises(ConfigError, match="move_fraction"):
        norm_events(STEPS, [1.0] * len(STEPS), move_fraction=1.5)
