"""How block-diagonal a square matrix is under a partition of its indices (e.g. words into topics).

For ``M`` [n, n] and ``labels`` [n] (the block of each index; -1 = in no block, its row and
column are ignored), the *entries* are the pairs ``(i, j)`` of labelled indices, ``i != j``
unless ``include_diagonal``. They split into *within* (same block) and *between* entries.

- ``within_mean`` / ``between_mean``: the mean entry of each kind;
- ``mass_fraction``: ``sum_within M_ij^2 / sum_all M_ij^2``, and ``chance_fraction`` =
  ``#within / #entries`` (its value when the squared mass is spread evenly);
- ``score = (mass_fraction - chance_fraction) / (1 - chance_fraction)``: 1 for a perfectly
  block-diagonal matrix, about 0 for an unstructured one, negative when the mass avoids the blocks;
- ``separation = (within_mean - between_mean) / std``: the gap of the means in units of the
  pooled within-kind standard deviation (large and positive for blocks of similar values).

Works for any square matrix: W_V (value matrix with one-hot embeddings), E E^T (embedding
Gram matrix), W_K^T W_Q, a decoder-W_V product.

``centre_columns=True`` first subtracts from every column its mean over the labelled rows
(:func:`centre_columns`). Use it for a matrix that is only defined up to a constant per column:
under a cross-entropy (softmax) loss, a one-hot model's logits ``W_V Z a`` (attention weights
``a`` summing to 1) do not change when a constant ``c_j`` is added to every entry of column ``j``,
so such offsets are arbitrary and would otherwise dominate the score. A perfectly
block-diagonal matrix keeps a score below 1 after centring (:func:`centred_block_ceiling`).

:func:`block_scores` gives the score under many labellings of the same indices at once (a permutation null).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from probes.core.errors import InputError


@dataclass(frozen=True)
class BlockStructure:
    """Block-structure numbers of one matrix (definitions in the module docstring)."""

    score: float
    mass_fraction: float
    chance_fraction: float
    within_mean: float
    between_mean: float
    separation: float
    n_within: int
    n_between: int
    centred: bool = False


def centre_columns(matrix: Float[Tensor, "n n"], labels: Int[Tensor, " n"]) -> Float[Tensor, "n n"]:
    """``matrix`` (float64) minus, in each column, that column's mean over the labelled rows (``labels >= 0``).

    Example: ``centre_columns(torch.tensor([[1., 5.], [3., 5.]]), torch.tensor([0, 1]))`` is
    ``[[-1, 0], [1, 0]]``.
    """
    m, labels = _checked(matrix, labels)
    return _centred(m, labels >= 0)


def centred_block_ceiling(labels: Int[Tensor, " n"], *, include_diagonal: bool = False) -> float:
    """The score of the ideal block matrix (1 within a block, 0 between) after :func:`centre_columns`.

    The largest score a column-centred matrix with exactly that block pattern reaches (e.g. 0.879
    for 10 blocks of 10); 1 without centring.
    """
    labels = labels.detach().to("cpu", torch.long)
    ideal = ((labels[:, None] == labels[None, :]) & (labels[:, None] >= 0)).to(torch.float64)
    return block_structure(ideal, labels, include_diagonal=include_diagonal, centre_columns=True).score


def _checked(matrix: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
    """Validated float64 CPU copies of ``matrix`` and ``labels``."""
    if not isinstance(matrix, Tensor) or matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise InputError(
            f"matrix must be a square 2-d tensor; got "
            f"{tuple(matrix.shape) if isinstance(matrix, Tensor) else type(matrix).__name__}."
        )
    if not isinstance(labels, Tensor) or labels.ndim != 1 or labels.shape[0] != matrix.shape[0] \
            or labels.dtype.is_floating_point:
        raise InputError(
            f"labels must be a 1-d integer tensor with one block id per row ({matrix.shape[0]}); got "
            f"{tuple(labels.shape) if isinstance(labels, Tensor) else type(labels).__name__}."
        )
    return matrix.detach().to("cpu", torch.float64), labels.detach().to("cpu", torch.long)


def block_structure(matrix: Float[Tensor, "n n"], labels: Int[Tensor, " n"], *,
                    include_diagonal: bool = False, centre_columns: bool = False) -> BlockStructure:
    """Block-structure numbers of ``matrix`` under the partition ``labels`` (module docstring).

    Example: ``block_structure(torch.block_diag(*[torch.ones(3, 3)] * 2), torch.tensor([0,0,0,1,1,1])).score == 1.0``.
    """
    m, labels = _checked(matrix, labels)
    labelled = labels >= 0
    if centre_columns:
        m = _centred(m, labelled)
    entries = _entries(labelled, include_diagonal)
    same = labels[:, None] == labels[None, :]
    within, between = entries & same, entries & ~same
    n_within, n_between = _counted(int(within.sum()), int(between.sum()))
    squares = m**2
    total = float(squares[entries].sum())
    mass_fraction = _mass_fraction(float(squares[within].sum()), total)
    chance = n_within / (n_within + n_between)
    within_values, between_values = m[within], m[between]
    pooled = ((within_values - within_values.mean()) ** 2).sum() + ((between_values - between_values.mean()) ** 2).sum()
    std = math.sqrt(float(pooled) / (n_within + n_between))
    gap = float(within_values.mean() - between_values.mean())
    separation = gap / std if std > 0 else (math.inf if gap > 0 else -math.inf if gap < 0 else math.nan)
    return BlockStructure(
        score=(mass_fraction - chance) / (1 - chance),
        mass_fraction=mass_fraction,
        chance_fraction=chance,
        within_mean=float(within_values.mean()),
        between_mean=float(between_values.mean()),
        separation=separation,
        n_within=n_within,
        n_between=n_between,
        centred=centre_columns,
    )


def block_scores(matrix: Float[Tensor, "n n"], labellings: Int[Tensor, "labelling n"], *,
                 include_diagonal: bool = False, centre_columns: bool = False) -> Float[Tensor, " labelling"]:
    """``block_structure(matrix, labels).score`` for each row ``labels`` of ``labellings`` (float64), the same numbers
    computed in one pass: the rows must label the same indices (e.g. :func:`~probes.stats.nulls.label_permutations`
    of one partition, a permutation null of the score), so the centring, the entries and their total squared mass
    are those of every row, and only each row's within-block mass is summed on its own (the sums of
    :func:`block_structure`, in its order). Holds ``labelling x n x n`` booleans at once.

    Example: ``block_scores(value, label_permutations(labels, 100, seed=0), centre_columns=True)``.
    """
    if not isinstance(labellings, Tensor) or labellings.ndim != 2 or labellings.shape[0] == 0:
        raise InputError(
            f"labellings must be a 2-d tensor with at least one row of block ids; got "
            f"{tuple(labellings.shape) if isinstance(labellings, Tensor) else type(labellings).__name__}."
        )
    m, first = _checked(matrix, labellings[0])
    labellings = labellings.detach().to("cpu", torch.long)
    labelled = first >= 0
    if not bool(((labellings >= 0) == labelled).all()):
        raise InputError("Every row of labellings must label the same indices (the entries >= 0); permute the labels "
                         "among the labelled indices, as label_permutations does.")
    if centre_columns:
        m = _centred(m, labelled)
    entries = _entries(labelled, include_diagonal)
    within = entries & (labellings[:, :, None] == labellings[:, None, :])  # [labelling n n]
    n_entries = int(entries.sum())
    squares = m**2
    total = float(squares[entries].sum())
    rows, positions = within.flatten(1).nonzero(as_tuple=True)  # row-major, the order of block_structure's sum
    counts = torch.bincount(rows, minlength=len(within)).tolist()
    scores = []
    for row, count in zip(torch.split(squares.reshape(-1)[positions], counts), counts):  # each row summed alone
        n_within, n_between = _counted(count, n_entries - count)
        chance = n_within / (n_within + n_between)
        scores.append((_mass_fraction(float(row.sum()), total) - chance) / (1 - chance))
    return torch.tensor(scores, dtype=torch.float64)


def _centred(m: Float[Tensor, "n n"], labelled: Bool[Tensor, " n"]) -> Float[Tensor, "n n"]:
    """``m`` minus, in each column, that column's mean over the ``labelled`` rows."""
    return m - m[labelled].mean(0, keepdim=True)


def _entries(labelled: Bool[Tensor, " n"], include_diagonal: bool) -> Bool[Tensor, "n n"]:
    """The entries ``(i, j)`` of labelled indices, off the diagonal unless ``include_diagonal``."""
    entries = labelled[:, None] & labelled[None, :]
    if not include_diagonal:
        entries &= ~torch.eye(len(labelled), dtype=torch.bool)
    return entries


def _counted(n_within: int, n_between: int) -> tuple[int, int]:
    """``(n_within, n_between)``, checked to be both nonzero."""
    if n_within == 0 or n_between == 0:
        raise InputError(
            f"The partition must give both within-block and between-block entries; got {n_within} within "
            f"and {n_between} between. Use at least two blocks, one of them with two or more indices."
        )
    return n_within, n_between


def _mass_fraction(within: float, total: float) -> float:
    """The within-block share of the total squared mass (NaN when there is none)."""
    return within / total if total > 0 else math.nan
