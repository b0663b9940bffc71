"""In-context n-gram Markov chains: settings, determinism, the chain law and the Bayes-optimal predictor."""

from __future__ import annotations

import math

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.induction.data import (
    MarkovConfig,
    bayes_optimal_loss,
    bayes_optimal_probs,
    context_ids,
    sample_markov_icl,
)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"n_states": 1}, "n_states"),
        ({"order": 1}, "order"),
        ({"order": 3, "seq_len": 3}, "seq_len"),
        ({"order": 3, "seq_len": 2}, "seq_len"),
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -0.5}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
    ],
)
def test_bad_settings_raise_clear_errors(kwargs, words):
    with pytest.raises(ToyConfigError, match=words):
        MarkovConfig(**kwargs)


def test_same_seed_same_chains_and_other_seed_differs():
    config = MarkovConfig(n_states=4, order=3, seq_len=30, alpha=0.3)
    a = sample_markov_icl(config, 16, torch.Generator().manual_seed(5))
    b = sample_markov_icl(config, 16, 5)
    c = sample_markov_icl(config, 16, 6)
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.kernels, b.kernels)
    assert not torch.equal(a.tokens, c.tokens)
    assert a.tokens.shape == (16, 31) and a.inputs.shape == (16, 30) and a.targets.shape == (16,)
    assert a.kernels.shape == (16, 16, 4)
    assert int(a.tokens.min()) >= 0 and int(a.tokens.max()) < 4


def test_transitions_follow_each_sequences_own_kernel():
    """E[onehot(x_i) - K_b[ctx_i]] = 0 at every transition: a martingale check of the chain law."""
    config = MarkovConfig(n_states=3, order=3, seq_len=40, alpha=0.5)
    batch = sample_markov_icl(config, 4000, 0)
    tokens = batch.tokens
    ctx = context_ids(tokens, 2, 3)[:, 2:]
    expected = batch.kernels.double().gather(1, ctx[..., None].expand(-1, -1, 3))
    observed = torch.nn.functional.one_hot(tokens[:, 2:], 3).double()
    residual = (observed - expected).mean(dim=(0, 1))
    assert residual.abs().max() < 0.01  # about 5 standard errors with 4000 * 39 draws
    # the first n - 1 tokens are uniform
    first = torch.nn.functional.one_hot(tokens[:, :2], 3).double().mean(dim=(0, 1))
    assert torch.allclose(first, torch.full((3,), 1 / 3, dtype=torch.float64), atol=0.02)


def test_kernel_rows_are_dirichlet():
    """Dirichlet(alpha 1_S): entries have mean 1/S and variance (1/S)(1 - 1/S) / (S alpha + 1)."""
    S, alpha = 3, 0.1
    kernels = sample_markov_icl(MarkovConfig(n_states=S, order=2, seq_len=3, alpha=alpha), 20000, 1).kernels.double()
    assert torch.allclose(kernels.sum(-1), torch.ones(1, dtype=torch.float64), atol=1e-5)
    assert abs(float(kernels.mean()) - 1 / S) < 0.005
    expected_var = (1 / S) * (1 - 1 / S) / (S * alpha + 1)
    assert abs(float(kernels.var()) - expected_var) / expected_var < 0.03


def reference_bayes_probs(tokens: torch.Tensor, S: int, n: int, alpha: float) -> torch.Tensor:
    """Nested loops: P(x_{q+1} = s | x_0..x_q) = (N(ctx, s) + alpha) / (N(ctx) + S alpha)."""
    n_batch, n_pos = tokens.shape
    out = torch.zeros(n_batch, n_pos, S, dtype=torch.float64)
    for b in range(n_batch):
        seq = tokens[b].tolist()
        for q in range(n_pos):
            i = q + 1  # the predicted position
            if i < n - 1:
                out[b, q] = 1 / S
                continue
            ctx = tuple(seq[i - n + 1 : i])
            counts = [0] * S
            for j in range(n - 1, i):
                if tuple(seq[j - n + 1 : j]) == ctx:
                    counts[seq[j]] += 1
            total = sum(counts)
            out[b, q] = torch.tensor([(c + alpha) / (total + S * alpha) for c in counts], dtype=torch.float64)
    return out


@pytest.mark.parametrize("S, n, alpha", [(3, 3, 0.1), (2, 2, 1.0), (3, 4, 0.5)])
def test_bayes_optimal_probs_match_the_nested_loop_reference(S, n, alpha):
    config = MarkovConfig(n_states=S, order=n, seq_len=25, alpha=alpha)
    tokens = sample_markov_icl(config, 6, 3).tokens
    fast = bayes_optimal_probs(tokens, config)
    assert torch.allclose(fast, reference_bayes_probs(tokens, S, n, alpha), atol=1e-12)


def test_bayes_optimal_loss_orders_against_weaker_predictors():
    """Bayes with the true order beats the wrong-order (bigram) Bayes and uniform on trigram chains,
    and loses to the oracle that knows each sequence's kernel."""
    config = MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1)
    batch = sample_markov_icl(config, 800, 2)
    optimal = bayes_optimal_loss(batch.tokens, config)
    bigram = bayes_optimal_loss(batch.tokens, MarkovConfig(n_states=3, order=2, seq_len=100, alpha=0.1))
    ctx = context_ids(batch.tokens, 2, 3)[:, -1]
    oracle = float(-batch.kernels.double()[torch.arange(800), ctx, batch.tokens[:, -1]].log().mean())
    assert oracle < optimal < bigram < math.log(3)
    assert 0.15 < optimal < 0.3  # the paper's setting: about 0.2 nats


def test_bayes_loss_all_positions_averages_every_prediction():
    config = MarkovConfig(n_states=2, order=2, seq_len=10, alpha=1.0)
    tokens = sample_markov_icl(config, 5, 0).tokens
    probs = reference_bayes_probs(tokens[:, :-1], 2, 2, 1.0)
    nll = -probs.gather(-1, tokens[:, 1:, None]).log()
    assert bayes_optimal_loss(tokens, config, positions="all") == pytest.approx(float(nll.mean()), abs=1e-12)
    assert bayes_optimal_loss(tokens, config) == pytest.approx(float(nll[:, -1].mean()), abs=1e-12)
    with pytest.raises(ToyConfigError, match="positions"):
        bayes_optimal_loss(tokens, config, positions="first")
