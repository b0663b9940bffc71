"""Target pairs from token joins (probes.core.token_pairs) equal the True entries of the masks they replace, on
hand-made sequences with known answers and on random ones (small vocabularies, so runs of equal tokens are long;
padding and invalid positions included)."""

from __future__ import annotations

import pytest
import torch

from probes.attention.generalized_induction import parent_match_mask, parent_match_pairs
from probes.attention.head_patterns import HEAD_PATTERNS, head_pattern
from probes.core.pattern_sums import KeyMask
from probes.core.token_pairs import equal_pairs, pair_mask, per_query_counts


def _random(seed: int, n_batch: int = 3, n_pos: int = 19, vocab: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (n_batch, n_pos), generator=generator)
    valid = torch.rand(n_batch, n_pos, generator=generator) > 0.2
    valid[0] = True
    valid[-1] = False  # a sequence with no valid position at all
    return tokens, valid


def test_earlier_copies_on_a_hand_made_sequence():
    tokens = torch.tensor([[7, 8, 7, 9, 7]])
    valid = torch.ones_like(tokens, dtype=torch.bool)
    b, q, k = equal_pairs(tokens, tokens, valid, valid, keys="before")
    assert list(zip(q.tolist(), k.tolist())) == [(2, 0), (4, 0), (4, 2)]
    b, q, k = equal_pairs(tokens, tokens, valid, valid, keys="any_other")
    assert list(zip(q.tolist(), k.tolist())) == [(0, 2), (0, 4), (2, 0), (2, 4), (4, 0), (4, 2)]
    assert per_query_counts((b, q, k), 1, 5).tolist() == [[2, 0, 2, 0, 2]]


@pytest.mark.parametrize("spec", [*HEAD_PATTERNS, "offset:3", "offset:-2", "offset:50", "induction:2", "induction:40"])
def test_every_built_in_target_lists_the_pairs_of_its_mask(spec):
    pattern = head_pattern(spec)
    assert pattern.pairs is not None
    for seed in range(10):
        tokens, valid = _random(seed)
        expected = pattern.mask(tokens, valid).nonzero(as_tuple=True)
        got = pattern.target_pairs(tokens, valid)
        assert all(torch.equal(a, b) for a, b in zip(expected, got)), (spec, seed)


@pytest.mark.parametrize("distances", [(1,), (1, 2), (2,), (1, 3), (2, 3, 4)])
def test_parent_match_pairs_are_the_parent_match_mask(distances):
    for seed in range(10):
        tokens, valid = _random(seed, vocab=3)
        expected = parent_match_mask(tokens, valid, distances).nonzero(as_tuple=True)
        got = parent_match_pairs(tokens, valid, distances)
        assert all(torch.equal(a, b) for a, b in zip(expected, got)), (distances, seed)


def test_a_key_mask_from_pairs_sums_a_pattern_like_the_mask():
    """Sparse sequences are gathered, dense ones (a 3-token vocabulary: a third of all pairs) summed by mask."""
    tokens = torch.cat([torch.randint(0, 3, (1, 40)), torch.arange(40)[None] % 38], 0)  # ~260 pairs vs 2
    valid = torch.ones_like(tokens, dtype=torch.bool)
    pairs = equal_pairs(tokens, tokens, valid, valid, keys="before")
    mask = pair_mask(pairs, 2, 40)
    from_pairs = KeyMask.from_pairs(pairs, 2, 40)
    assert from_pairs.dense is not None and from_pairs.entries is not None  # one sequence each way
    pattern = torch.rand(2, 4, 40, 40, generator=torch.Generator().manual_seed(0))
    expected = (pattern * mask[:, None]).sum((0, 2, 3)).double()
    assert torch.allclose(from_pairs.pattern_sum(pattern), expected, rtol=1e-6)
    assert torch.allclose(KeyMask.of(mask).pattern_sum(pattern), expected, rtol=1e-6)
