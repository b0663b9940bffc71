"""The in-context n-gram predictors (the induction toy's phase baselines): the vectorised counts against nested
loops, and the chain's own order with its alpha giving the Bayes-optimal predictor."""

from __future__ import annotations

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.induction.data import (
    MarkovConfig,
    bayes_optimal_probs,
    context_ids,
    in_context_ngram_probs,
    sample_markov_icl,
)


def reference_ngram_probs(tokens: torch.Tensor, n: int, n_states: int, alpha: float) -> torch.Tensor:
    """Nested loops: for the token after ``q``, count each ``j <= q`` (``j >= n - 1``) whose ``n - 1`` preceding
    tokens equal the ``n - 1`` tokens ending at ``q``."""
    batch, length = tokens.shape
    probs = torch.empty(batch, length, n_states, dtype=torch.float64)
    for b in range(batch):
        row = tokens[b].tolist()
        for q in range(length):
            counts = [0.0] * n_states
            context = row[q - n + 2 : q + 1] if n > 1 else []
            if n == 1 or q >= n - 2:
                for j in range(n - 1, q + 1):
                    if row[j - n + 1 : j] == context:
                        counts[row[j]] += 1
            total = sum(counts)
            for s in range(n_states):
                probs[b, q, s] = (counts[s] + alpha) / (total + n_states * alpha)
    return probs


def mask_ngram_probs(tokens: torch.Tensor, n: int, n_states: int, alpha: float) -> torch.Tensor:
    """The counts as a [batch q_pos k_pos] mask of the keys whose parents equal the next token's, summed against
    the one-hot tokens in float64 (the straightforward vectorised form, n >= 2)."""
    n_pos = tokens.shape[1]
    ctx = context_ids(tokens, n - 1, n_states)
    next_ctx = torch.full_like(ctx, -1)
    if n_pos >= n - 1:
        next_ctx[:, n - 2:] = context_ids(torch.cat([tokens, tokens[:, :1]], dim=1), n - 1, n_states)[:, n - 1:]
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()
    mask = (next_ctx[:, :, None] == ctx[:, None, :]) & (ctx[:, None, :] >= 0) & (next_ctx[:, :, None] >= 0) & causal
    onehot = torch.nn.functional.one_hot(tokens, n_states).to(torch.float64)
    counts = torch.einsum("bqk,bks->bqs", mask.to(torch.float64), onehot)
    return (counts + alpha) / (counts.sum(-1, keepdim=True) + n_states * alpha)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_sorted_transition_counts_equal_the_mask_counts_bit_for_bit(n):
    """On the fast preset's chains (S = 3, n = 3, L = 100) and chains too short for the context."""
    tokens = sample_markov_icl(MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1), 64, 0).tokens
    assert torch.equal(in_context_ngram_probs(tokens, n, 3, 0.1), mask_ngram_probs(tokens, n, 3, 0.1))
    for length in range(1, n):  # no whole context (n - 1 parents) before the last token, then one just
        short = tokens[:8, :length]
        assert torch.equal(in_context_ngram_probs(short, n, 3, 0.1), mask_ngram_probs(short, n, 3, 0.1))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_in_context_ngram_counts_match_nested_loops(n):
    tokens = sample_markov_icl(MarkovConfig(n_states=3, order=3, seq_len=30, alpha=0.3), 4, 0).tokens
    expected = reference_ngram_probs(tokens, n, 3, 0.3)
    assert torch.allclose(in_context_ngram_probs(tokens, n, 3, 0.3), expected, atol=1e-12)


def test_the_chains_own_order_is_the_bayes_optimal_predictor_and_a_hand_count():
    config = MarkovConfig(n_states=3, order=3, seq_len=30, alpha=0.1)
    tokens = sample_markov_icl(config, 4, 1).tokens
    assert torch.equal(in_context_ngram_probs(tokens, 3, 3, 0.1), bayes_optimal_probs(tokens, config))
    # unigram after 0 0 1 with alpha 1: counts (2, 1) -> (3/5, 2/5); bigram after 0 0 1 0: what followed 0 is (0, 1)
    assert in_context_ngram_probs(torch.tensor([[0, 0, 1]]), 1, 2, 1.0)[0, -1].tolist() == pytest.approx([0.6, 0.4])
    assert in_context_ngram_probs(torch.tensor([[0, 0, 1, 0]]), 2, 2, 1.0)[0, -1].tolist() == pytest.approx([0.5, 0.5])
    with pytest.raises(ToyConfigError, match="n-gram"):
        in_context_ngram_probs(tokens, 0, 3, 0.1)
