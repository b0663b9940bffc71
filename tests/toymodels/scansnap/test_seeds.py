"""Stacked Y/Z runs equal separate runs (SGD with momentum and Adam), and record the compositions."""

from __future__ import annotations

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.scansnap.seeds import YZRun, support_compositions, train_yz_runs
from toymodels.scansnap.training import TwoRateConfig, train_on_cooccurrence

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.parametrize("optimizer, runs", [
    ("sgd", [YZRun(0, 2.0, 1.0), YZRun(3, 0.5, 0.5), YZRun(0, 1.0, 3.0)]),
    ("adam", [YZRun(0, 0.05, 0.02), YZRun(2, 0.01, 0.01)]),
])
def test_stacked_runs_equal_separate_runs(optimizer, runs):
    data = CooccurrenceData(CooccurrenceConfig(num_last=2, num_next_per_last=2, seq_len=32))
    result = train_yz_runs(data, runs, n_steps=12, batch_size=16, optimizer=optimizer)
    assert result.loss.shape == (12, len(runs)) and result.support_trajectory.shape == (13, len(runs), 4, 20)
    for i, run in enumerate(runs):
        model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=32, init="linear", seed=run.seed))
        history = train_on_cooccurrence(model, data, TwoRateConfig(
            eta_y=run.eta_y, eta_z=run.eta_z, optimizer=optimizer, batch_size=16, n_steps=12, seed=run.seed))
        torch.testing.assert_close(result.Z[i], model.Z.detach(), atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(result.Y[i], model.Y.detach(), atol=2e-6, rtol=1e-5)
        torch.testing.assert_close(result.loss[:, i], torch.tensor(history.values["loss"]), atol=1e-5, rtol=1e-5)
        expected = model.expected_attention(data.fact_last, data.context_probs)
        for f in range(data.n_facts):
            torch.testing.assert_close(result.support_trajectory[-1, i, f],
                                       expected[f, data.support(f)].float(), atol=1e-5, rtol=1e-4)


def test_support_compositions_start_at_the_prior_from_zero_weights():
    data = CooccurrenceData(CooccurrenceConfig())
    c = support_compositions(torch.zeros(3, data.d_vocab, data.d_vocab), data)
    prior = torch.stack([data.context_probs[f, data.support(f)] for f in range(data.n_facts)])
    torch.testing.assert_close(c, prior.expand(3, -1, -1))
    assert torch.allclose(c.sum(-1), torch.ones(3, data.n_facts, dtype=torch.float64))


def test_bad_arguments():
    data = CooccurrenceData(CooccurrenceConfig())
    with pytest.raises(ToyConfigError, match="eta_z must be a finite number > 0"):
        YZRun(0, 1.0, 0.0)
    with pytest.raises(ToyConfigError, match="seed"):
        YZRun(-1, 1.0, 1.0)
    with pytest.raises(ToyConfigError, match="non-empty sequence of YZRun"):
        train_yz_runs(data, [])
    with pytest.raises(ToyConfigError, match="optimizer"):
        train_yz_runs(data, [YZRun(0, 1.0, 1.0)], optimizer="rmsprop")
    with pytest.raises(ToyConfigError, match="diverged"):
        train_yz_runs(data, [YZRun(0, 1e38, 1e38)], n_steps=5, init="zero")
