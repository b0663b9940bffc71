"""block_structure: known answers, nested-loop reference, column centring, errors; block_scores against it."""

from __future__ import annotations

import math

import pytest
import torch

from probes.core.errors import InputError
from probes.dynamics.block_structure import block_scores, block_structure, centre_columns, centred_block_ceiling
from probes.stats.nulls import label_permutations

LABELS = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 2])


def test_perfect_block_diagonal_scores_one_and_constant_matrix_zero():
    perfect = (LABELS[:, None] == LABELS[None, :]).float() * 0.5
    result = block_structure(perfect, LABELS)
    assert result.score == pytest.approx(1.0)
    assert result.within_mean == pytest.approx(0.5) and result.between_mean == 0.0
    assert math.isinf(result.separation)
    flat = block_structure(torch.ones(9, 9), LABELS)
    assert flat.score == pytest.approx(0.0, abs=1e-12)
    assert flat.mass_fraction == pytest.approx(flat.chance_fraction)
    anti = block_structure(1.0 - perfect * 2, LABELS)
    assert anti.score == pytest.approx(-flat.chance_fraction / (1 - flat.chance_fraction))


def test_identity_has_no_off_diagonal_block_structure():
    result = block_structure(torch.eye(9) + 0.01 * torch.ones(9, 9), LABELS)
    assert result.score == pytest.approx(0.0, abs=1e-9)
    assert block_structure(torch.eye(9) + 0.01, LABELS, include_diagonal=True).score > 0.5


def test_matches_nested_loop_reference():
    g = torch.Generator().manual_seed(0)
    m = torch.randn(9, 9, generator=g) + 2.0 * (LABELS[:, None] == LABELS[None, :])
    labels = LABELS.clone()
    labels[4] = -1
    within, between = [], []
    for i in range(9):
        for j in range(9):
            if i == j or labels[i] < 0 or labels[j] < 0:
                continue
            (within if labels[i] == labels[j] else between).append(float(m[i, j]))
    mass = sum(x * x for x in within) / (sum(x * x for x in within) + sum(x * x for x in between))
    chance = len(within) / (len(within) + len(between))
    result = block_structure(m, labels)
    assert result.n_within == len(within) and result.n_between == len(between)
    assert result.mass_fraction == pytest.approx(mass)
    assert result.score == pytest.approx((mass - chance) / (1 - chance))
    assert result.within_mean == pytest.approx(sum(within) / len(within))
    assert result.separation > 1.0


def test_centring_removes_column_offsets_and_keeps_the_block_score():
    block = (LABELS[:, None] == LABELS[None, :]).double()
    offsets = torch.tensor([3.0, -1.0, 0.5, 7.0, 2.0, -4.0, 0.0, 1.5, 9.0], dtype=torch.float64)
    shifted = block + offsets[None, :]                       # constant added down each column
    assert block_structure(shifted, LABELS).score < 0.2       # the offsets swamp the blocks ...
    centred = block_structure(shifted, LABELS, centre_columns=True)
    reference = block_structure(block, LABELS, centre_columns=True)
    assert centred.centred and not block_structure(block, LABELS).centred
    for name in ("score", "mass_fraction", "within_mean", "between_mean", "separation"):  # ... centring removes them
        assert getattr(centred, name) == pytest.approx(getattr(reference, name), abs=1e-12)
    assert centred.score == pytest.approx(centred_block_ceiling(LABELS))
    torch.testing.assert_close(centre_columns(shifted, LABELS), centre_columns(block, LABELS))


def test_centre_columns_by_hand_and_unlabelled_rows_are_left_out_of_the_mean():
    torch.testing.assert_close(centre_columns(torch.tensor([[1.0, 5.0], [3.0, 5.0]]), torch.tensor([0, 1])),
                               torch.tensor([[-1.0, 0.0], [1.0, 0.0]], dtype=torch.float64))
    m = torch.tensor([[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [100.0, 100.0, 100.0]])
    torch.testing.assert_close(centre_columns(m, torch.tensor([0, 1, -1])),
                               torch.tensor([[-1.0, -1.0, 0.0], [1.0, 1.0, 0.0], [98.0, 97.0, 100.0]],
                                            dtype=torch.float64))


def test_centred_ceiling_by_hand_for_ten_blocks_of_ten():
    # centred ideal: 1 - 10/100 = 0.9 within, -0.1 between; 900 within and 9000 between off-diagonal entries
    labels = torch.arange(100) // 10
    mass = 900 * 0.81 / (900 * 0.81 + 9000 * 0.01)
    chance = 900 / 9900
    assert centred_block_ceiling(labels) == pytest.approx((mass - chance) / (1 - chance))
    assert centred_block_ceiling(labels) == pytest.approx(0.8791, abs=1e-4)


def test_errors():
    with pytest.raises(InputError, match="square"):
        block_structure(torch.zeros(3, 4), torch.tensor([0, 1, 1]))
    with pytest.raises(InputError, match="one block id per row"):
        block_structure(torch.zeros(3, 3), torch.tensor([0, 1]))
    with pytest.raises(InputError, match="both within-block and between-block"):
        block_structure(torch.zeros(3, 3), torch.tensor([0, 1, 2]))
    with pytest.raises(InputError, match="square"):
        centre_columns(torch.zeros(2, 3), torch.tensor([0, 1]))


@pytest.mark.parametrize("centre", [False, True])
@pytest.mark.parametrize("include_diagonal", [False, True])
def test_block_scores_are_block_structures_scores_bit_for_bit(centre, include_diagonal):
    """The topic toy's null: a W_V-like matrix over 10 topics of 10 words (blocks, noise, column offsets), one index
    unlabelled, scored under 50 label permutations at once and one by one."""
    g = torch.Generator().manual_seed(0)
    labels = torch.arange(101) // 10
    labels[7] = -1
    value = (labels[:, None] == labels[None, :]).float() + 0.3 * torch.randn(101, 101, generator=g) \
        + torch.randn(1, 101, generator=g)
    permuted = label_permutations(labels, 50, seed=3)
    one_by_one = torch.tensor([block_structure(value, row, include_diagonal=include_diagonal,
                                               centre_columns=centre).score for row in permuted], dtype=torch.float64)
    scores = block_scores(value, permuted, include_diagonal=include_diagonal, centre_columns=centre)
    assert torch.equal(scores, one_by_one)
    assert scores.dtype == torch.float64 and len(set(scores.tolist())) > 40


def test_block_scores_errors():
    with pytest.raises(InputError, match="same indices"):
        block_scores(torch.zeros(9, 9), torch.stack([LABELS, LABELS.masked_fill(LABELS == 1, -1)]))
    with pytest.raises(InputError, match="2-d tensor"):
        block_scores(torch.zeros(9, 9), LABELS)
    with pytest.raises(InputError, match="both within-block and between-block"):
        block_scores(torch.zeros(3, 3), torch.tensor([[0, 1, 2]]))
