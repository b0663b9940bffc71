"""Bootstrap intervals: exact estimate, agreement with a loop over resamples, normal-theory width."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_interval
from tests.hooked_models import OracleModel


def test_vectorised_resampling_matches_a_loop():
    sums = torch.rand(7, dtype=torch.float64)
    counts = torch.randint(1, 5, (7,)).double()
    estimate, low, high = bootstrap_interval({"s": sums, "n": counts}, lambda st: st["s"] / st["n"], n_boot=200, seed=4)
    assert float(estimate) == pytest.approx(float(sums.sum() / counts.sum()))
    generator = torch.Generator().manual_seed(4)
    draws = torch.randint(0, 7, (200, 7), generator=generator)
    loop = torch.tensor([float(sums[d].sum() / counts[d].sum()) for d in draws], dtype=torch.float64)
    assert float(low) == pytest.approx(float(torch.quantile(loop, 0.025)))
    assert float(high) == pytest.approx(float(torch.quantile(loop, 0.975)))


def test_interval_of_a_mean_has_normal_theory_width():
    values = torch.randn(400, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    estimate, low, high = bootstrap_interval({"x": values, "n": torch.ones(400, dtype=torch.float64)},
                                             lambda st: st["x"] / st["n"], n_boot=2000)
    half_width = 1.96 * float(values.std()) / 400**0.5
    assert float(high - low) / 2 == pytest.approx(half_width, rel=0.15)
    assert low < estimate < high


def test_recorder_increments_sum_to_the_final_state():
    model = OracleModel()
    probe = probes.HeadScoreProbe()
    recorder = BatchStateRecorder()
    batches = [torch.randint(0, 10, (2, 12), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    probes.feed_probes(model, [probe], batches, progress=False, on_batch=recorder)
    per_batch = recorder.per_unit(0)
    for key, value in probe.state_dict().items():
        torch.testing.assert_close(per_batch[key].sum(0), value)
    assert per_batch["induction/mass"].shape == (3, 2, 4)


def test_bad_bootstrap_input():
    with pytest.raises(probes.InputError, match="at least 2 units"):
        bootstrap_interval({"x": torch.ones(1)}, lambda st: st["x"])
