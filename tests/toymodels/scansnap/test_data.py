"""The co-occurrence generator: the paper's vocabulary, context distributions and vectorised sampling."""

from __future__ import annotations

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData


def test_paper_vocabulary_and_layout():
    data = CooccurrenceData(CooccurrenceConfig())
    assert data.d_vocab == 34
    assert data.common_tokens.tolist() == list(range(10))
    assert data.distinct_tokens.tolist() == [list(range(10, 20)), list(range(20, 30))]
    assert data.fact_last.tolist() == [30, 31]
    assert data.fact_next.tolist() == [32, 33]


def test_context_probabilities_are_the_normalised_linspace_weights():
    data = CooccurrenceData(CooccurrenceConfig())
    total = 10 + sum(torch.linspace(0.1, 1.0, 10).tolist())  # 15.5
    probs = data.context_probs[0]
    assert torch.allclose(probs[:10], torch.full((10,), 1 / total, dtype=torch.float64))
    assert torch.allclose(probs[10:20], torch.linspace(0.1, 1.0, 10, dtype=torch.float64) / total)
    assert probs[20:].sum() == 0
    assert torch.allclose(data.context_probs.sum(-1), torch.ones(2, dtype=torch.float64))


def test_sweep_layout_two_next_tokens_per_last_token():
    data = CooccurrenceData(CooccurrenceConfig(num_last=3, num_next_per_last=2))
    assert data.n_facts == 6 and data.d_vocab == 10 + 6 * 10 + 3 + 6
    assert data.fact_last.tolist() == [70, 70, 71, 71, 72, 72]
    co = data.cooccurrence_with_last()
    assert torch.allclose(co[0], (data.context_probs[0] + data.context_probs[1]) / 2)


def test_sampling_is_seeded_and_follows_the_distribution():
    data = CooccurrenceData(CooccurrenceConfig())
    a = data.sample(2000, torch.Generator().manual_seed(3))
    b = data.sample(2000, torch.Generator().manual_seed(3))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    tokens, labels, facts = a
    assert tokens.shape == (2000, 128) and labels.shape == facts.shape == (2000,)
    assert torch.equal(tokens[:, -1], data.fact_last[facts]) and torch.equal(labels, data.fact_next[facts])
    for fact in range(2):
        context = tokens[facts == fact, :-1]
        frequency = torch.bincount(context.flatten(), minlength=34).double() / context.numel()
        assert (frequency - data.context_probs[fact]).abs().max() < 0.005
    assert abs(float((facts == 0).double().mean()) - 0.5) < 0.05


def test_sample_one_fact():
    data = CooccurrenceData(CooccurrenceConfig(seq_len=5))
    tokens, labels, facts = data.sample(4, torch.Generator().manual_seed(0), fact=1)
    assert facts.tolist() == [1] * 4 and labels.tolist() == [33] * 4 and tokens.shape == (4, 5)
    assert set(tokens[:, :-1].flatten().tolist()) <= set(data.support(1).tolist())


@pytest.mark.parametrize("kwargs, fragment", [
    ({"num_last": 0}, "num_last must be an integer >= 1"),
    ({"seq_len": 1}, "at least one context token"),
    ({"num_distinct": 2.5}, "num_distinct"),
    ({"num_common": -1}, "num_common must be an integer >= 0"),
])
def test_bad_settings_raise_clear_errors(kwargs, fragment):
    with pytest.raises(ToyConfigError, match=fragment):
        CooccurrenceConfig(**kwargs)


def test_bad_sample_arguments():
    data = CooccurrenceData(CooccurrenceConfig())
    with pytest.raises(ToyConfigError, match="fact must be an integer in"):
        data.sample(2, torch.Generator(), fact=2)
    with pytest.raises(ToyConfigError, match="batch_size"):
        data.sample(0, torch.Generator())
