"""Co-occurrence counting and the ordering statistics (Spearman, Kendall tau-b)."""

from __future__ import annotations

import pytest
import torch
from scipy import stats

from probes.attention.key_token_attention import KeyTokenAttentionProbe
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.text.cooccurrence import (
    average_ranks,
    cooccurrence_ordering,
    cooccurrence_probability,
    cooccurring_spearman,
    count_cooccurrence,
    kendall_tau_b,
    masked_spearman,
    spearman,
)


def reference_counts(tokens, queries, keys, *, query_position, causal, exclude_self, window):
    counts = torch.zeros(len(queries), len(keys), dtype=torch.float64)
    for row in tokens.tolist():
        for q, query in enumerate(row):
            if query not in queries or (query_position == "last" and q != len(row) - 1):
                continue
            for k, key in enumerate(row):
                if key not in keys or (exclude_self and k == q) or (causal and k > q):
                    continue
                if window is not None and abs(q - k) > window:
                    continue
                counts[queries.index(query), keys.index(key)] += 1
    return counts


@pytest.mark.parametrize("query_position, causal, exclude_self, window", [
    ("all", True, True, None), ("all", False, True, None), ("all", False, False, 3), ("last", True, True, None),
])
def test_counts_match_the_nested_loop_reference(query_position, causal, exclude_self, window):
    tokens = torch.randint(0, 8, (6, 12), generator=torch.Generator().manual_seed(0))
    queries, keys = [0, 3, 7], [0, 1, 3, 5, 6]
    counts = count_cooccurrence(tokens, queries, keys, query_position=query_position, causal=causal,
                                exclude_self=exclude_self, window=window)
    expected = reference_counts(tokens, queries, keys, query_position=query_position, causal=causal,
                                exclude_self=exclude_self, window=window)
    assert torch.equal(counts, expected)


def test_known_counts_and_chunking(monkeypatch):
    assert count_cooccurrence(torch.tensor([[5, 7, 5]]), [5], [7]).tolist() == [[1.0]]
    assert count_cooccurrence(torch.tensor([[5, 7, 5]]), [5], [7], causal=False).tolist() == [[2.0]]
    assert count_cooccurrence(torch.tensor([[5, 7, 5]]), [5], [5], causal=False).tolist() == [[2.0]]
    tokens = torch.randint(0, 5, (9, 7), generator=torch.Generator().manual_seed(1))
    whole = count_cooccurrence(tokens, [0, 1, 2], [0, 1, 2, 3, 4])
    halves = count_cooccurrence([tokens[:4], tokens[4:]], [0, 1, 2], [0, 1, 2, 3, 4])
    monkeypatch.setattr("probes.text.cooccurrence.CHUNK_PAIRS", 60)  # one sequence per chunk
    chunked = count_cooccurrence(tokens, [0, 1, 2], [0, 1, 2, 3, 4])
    assert torch.equal(whole, halves) and torch.equal(whole, chunked)


def test_probe_occurrences_are_the_corpus_counts():
    info = ModelInfo(name="fake", n_layers=1, n_heads=1, n_ctx=10, d_vocab=6, causal=True, bos_token_id=None,
                     special_token_ids=())
    tokens = torch.randint(0, 6, (5, 10), generator=torch.Generator().manual_seed(2))
    pattern = torch.full((5, 1, 10, 10), 0.1)
    probe = KeyTokenAttentionProbe([1, 2], [0, 3, 4]).bind(info)
    probe.update({pattern_hook(0): pattern}, TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool)))
    assert torch.equal(probe.compute().occurrences.double(), count_cooccurrence(tokens, [1, 2], [0, 3, 4]))


def test_rank_statistics_match_scipy_with_ties():
    generator = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randint(0, 5, (15,), generator=generator).double()
        y = x + torch.randint(0, 3, (15,), generator=generator).double()
        assert float(spearman(x, y)) == pytest.approx(stats.spearmanr(x, y).statistic, abs=1e-10)
        assert float(kendall_tau_b(x, y)) == pytest.approx(stats.kendalltau(x, y).statistic, abs=1e-10)
    assert average_ranks(torch.tensor([10.0, 20.0, 10.0, 5.0])).tolist() == [2.5, 4.0, 2.5, 1.0]
    assert torch.isnan(spearman(torch.ones(4), torch.arange(4.0)))
    batched = spearman(torch.stack([torch.arange(5.0), -torch.arange(5.0)]), torch.arange(5.0).expand(2, 5))
    assert batched.tolist() == pytest.approx([1.0, -1.0])


def test_masked_spearman_is_the_spearman_of_each_rows_selection_bit_for_bit():
    generator = torch.Generator().manual_seed(3)
    x = torch.randint(0, 4, (300, 9), generator=generator).double() / 3  # ties, and values that are not dyadic
    y = torch.rand(300, 9, generator=generator).round(decimals=1)
    selected = torch.rand(300, 9, generator=generator) < 0.6  # from 0 to 9 entries a row
    rho = masked_spearman(x, y, selected)
    expected = torch.stack([spearman(a[s], b[s]) for a, b, s in zip(x, y, selected)])
    assert torch.equal(rho.nan_to_num(9.0), expected.nan_to_num(9.0))
    assert rho.isnan().any() and not rho.isnan().all()


def test_cooccurring_spearman_of_stacked_results_is_each_ones_ordering():
    info = ModelInfo(name="fake", n_layers=1, n_heads=2, n_ctx=12, d_vocab=8, causal=True, bos_token_id=None,
                     special_token_ids=())
    orderings, values, counts = [], [], []
    for seed in range(6):
        generator = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, 8, (4, 12), generator=generator)
        pattern = torch.rand(4, 2, 12, 12, generator=generator).round(decimals=1)  # tied attention too
        if seed == 0:
            pattern = torch.full_like(pattern, 0.1)  # attention the same on every key: no ordering (NaN)
        probe = KeyTokenAttentionProbe([1, 2, 3], [0, 2, 4, 5, 6, 7]).bind(info)
        probe.update({pattern_hook(0): pattern}, TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool)))
        result = probe.compute()
        orderings.append(cooccurrence_ordering(result))
        values.append(result.per_occurrence[0].double())
        counts.append(result.occurrences.expand(2, -1, -1))
    rho, n_keys = cooccurring_spearman(torch.stack(values), torch.stack(counts))  # result head query
    expected = torch.stack([ordering.spearman[0] for ordering in orderings])
    assert torch.equal(rho.float().nan_to_num(9.0), expected.nan_to_num(9.0))
    assert torch.equal(n_keys[:, 0], torch.stack([ordering.n_keys for ordering in orderings]))
    assert n_keys.unique().numel() > 1 and rho.isnan().any() and not rho.isnan().all()


def attention_result(per_key: list[float], counts: list[float]):
    """A one-query result whose per-occurrence attention on key k is ``per_key[k]``."""
    n = len(per_key)
    info = ModelInfo(name="fake", n_layers=1, n_heads=1, n_ctx=n + 1, d_vocab=n + 1, causal=True,
                     bos_token_id=None, special_token_ids=())
    tokens = torch.tensor([[*range(n), n]])
    row = torch.tensor([*per_key, 0.0])
    pattern = torch.zeros(1, 1, n + 1, n + 1)
    pattern[0, 0, -1] = row / row.sum()
    probe = KeyTokenAttentionProbe([n], list(range(n)), query_position="last").bind(info)
    probe.update({pattern_hook(0): pattern}, TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool)))
    return probe.compute(), torch.tensor([counts])


def test_ordering_known_answers():
    result, known = attention_result([1.0, 2.0, 3.0, 4.0], [0.1, 0.2, 0.3, 0.4])
    ordering = cooccurrence_ordering(result, known)
    assert float(ordering.spearman[0, 0, 0]) == pytest.approx(1.0)
    assert float(ordering.kendall[0, 0, 0]) == pytest.approx(1.0)
    reversed_ordering = cooccurrence_ordering(result, known.flip(-1))
    assert float(reversed_ordering.spearman[0, 0, 0]) == pytest.approx(-1.0)
    subset = cooccurrence_ordering(result, torch.tensor([[0.1, 0.2, 0.4, 0.3]]), keys=[0, 1, 2])
    assert int(subset.n_keys[0]) == 3 and float(subset.spearman[0, 0, 0]) == pytest.approx(1.0)
    corpus = cooccurrence_ordering(result)  # every key occurs once: co-occurrence is constant
    assert corpus.source == "corpus" and torch.isnan(corpus.spearman[0, 0, 0])
    assert len(ordering.to_dataframe()) == 1


def test_mass_measure_is_trivially_ordered_under_uniform_attention():
    """Uniform attention gives mass proportional to counts, but constant per-occurrence attention."""
    info = ModelInfo(name="fake", n_layers=1, n_heads=1, n_ctx=7, d_vocab=4, causal=True, bos_token_id=None,
                     special_token_ids=())
    tokens = torch.tensor([[0, 1, 1, 2, 2, 2, 3]])
    pattern = torch.zeros(1, 1, 7, 7)
    pattern[0, 0, -1, :6] = 1 / 6
    probe = KeyTokenAttentionProbe([3], [0, 1, 2], query_position="last").bind(info)
    probe.update({pattern_hook(0): pattern}, TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool)))
    result = probe.compute()
    assert float(cooccurrence_ordering(result, measure="mass").spearman[0, 0, 0]) == pytest.approx(1.0)
    assert torch.isnan(cooccurrence_ordering(result).spearman[0, 0, 0])


def test_probability_and_errors():
    assert cooccurrence_probability(torch.tensor([[1.0, 3.0], [0.0, 0.0]])).tolist() == [[0.25, 0.75], [0.0, 0.0]]
    result, known = attention_result([1.0, 2.0], [1.0, 2.0])
    with pytest.raises(InputError, match=r"cooccurrence must be \[query, key\]"):
        cooccurrence_ordering(result, torch.ones(2, 2))
    with pytest.raises(InputError, match="not tracked"):
        cooccurrence_ordering(result, known, keys=[9])
    with pytest.raises(ConfigError, match="measure"):
        cooccurrence_ordering(result, known, measure="logits")
    with pytest.raises(InputError, match="integer tensors"):
        count_cooccurrence(torch.ones(2, 3), [1], [1])
    with pytest.raises(InputError, match="empty"):
        count_cooccurrence([], [1], [1])
    with pytest.raises(ConfigError, match="non-empty"):
        count_cooccurrence(torch.ones(2, 3, dtype=torch.long), [], [1])
