"""Nulls for probe statistics: label permutations, permutation and bootstrap p-values, Holm's correction.

A permutation null keeps everything about the data but the labels the statistic is about:
:func:`label_permutations` shuffles topic labels among the labelled vocabulary entries (each
topic keeps its size), so a statistic computed under each permutation is a draw from "the
labels carry no information". p-values count the observed value as one of the draws, so the
smallest reachable p-value is ``1 / (n_permutations + 1)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechprobe.validation import integer
from probes.core.errors import ConfigError, InputError


def label_permutations(labels: Int[Tensor, " d_vocab"], n_permutations: int, *, seed: int, start: int = 0
                       ) -> Int[Tensor, "permutation d_vocab"]:
    """``n_permutations`` relabellings of ``labels``: the labels of the entries ``>= 0`` shuffled among them.

    Unlabelled entries (-1) stay -1, so every topic keeps its size and the same vocabulary entries
    stay labelled. Row ``p`` is permutation ``start + p`` of one sequence drawn from ``torch.Generator(seed)``,
    so a null drawn in groups (:mod:`probes.stats.sequential`) uses the same permutations as one drawn at once.

    Example: ``label_permutations(torch.tensor([0, -1, 1, 1]), 2, seed=0)`` keeps index 1 at -1.
    """
    integer("n_permutations", n_permutations)
    integer("start", start, 0)
    labels = torch.as_tensor(labels).to("cpu", torch.long)
    labelled = (labels >= 0).nonzero().squeeze(1)
    if labelled.numel() < 2:
        raise InputError(f"A label permutation needs at least 2 labelled entries; got {labelled.numel()}.")
    generator = torch.Generator().manual_seed(seed)
    order = torch.rand(start + n_permutations, labelled.numel(), generator=generator)[start:].argsort(dim=1)
    permuted = labels.expand(n_permutations, -1).clone()
    permuted[:, labelled] = labels[labelled][order]
    return permuted


TIE_TOLERANCE = 1e-9


def permutation_p_value(observed: Float[Tensor, ...], null: Float[Tensor, "draw ..."], *,
                        alternative: str = "greater") -> Float[Tensor, ...]:
    """``(1 + #{null >= observed}) / (1 + n)`` per entry (``"less"``: ``<=``); NaN draws are ignored (an entry with
    none that is a number gets a NaN p-value).

    ``null`` holds ``n`` draws of the statistic under the null along its first axis. A draw within
    ``TIE_TOLERANCE`` (relative) of ``observed`` counts as reaching it: the same value computed along two
    paths (a rank correlation of 1 as 0.9999999999999998) is a tie, and dropping ties makes p too small.
    """
    if alternative not in ("greater", "less"):
        raise ConfigError(f"alternative must be 'greater' or 'less'; got {alternative!r}.")
    observed = torch.as_tensor(observed, dtype=torch.float64)
    null = torch.as_tensor(null, dtype=torch.float64)
    if null.ndim < 1 or null.shape[0] < 1:
        raise InputError("The null needs at least one draw along its first axis.")
    finite = torch.isfinite(null)
    slack = TIE_TOLERANCE * observed.abs().clamp_min(1.0)
    beyond = (null >= observed - slack) if alternative == "greater" else (null <= observed + slack)
    hits = (beyond & finite).sum(0).double()
    p = (1.0 + hits) / (1.0 + finite.sum(0).double())
    return torch.where(torch.isfinite(observed) & finite.any(0), p, torch.full_like(p, float("nan")))


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error control; NaN stays NaN and is not counted).

    Example: ``holm_adjust([0.01, 0.04, 0.03])`` is ``[0.03, 0.06, 0.06]``.
    """
    values = [float(p) for p in p_values]
    finite = sorted((p, i) for i, p in enumerate(values) if p == p)
    m = len(finite)
    adjusted = [float("nan")] * len(values)
    running = 0.0
    for rank, (p, i) in enumerate(finite):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def fixed_sequence_adjust(p_values: Sequence[float]) -> list[float]:
    """Fixed-sequence adjusted p-values for hypotheses tested in a pre-registered order: each is tested at the
    full level while every earlier one rejected, which controls the family-wise error without a Bonferroni
    factor. The adjusted p of hypothesis ``i`` is the largest raw p among the first ``i + 1``; a NaN (not
    tested) makes every later one NaN.

    Example: ``fixed_sequence_adjust([0.005, 0.02, 0.001])`` is ``[0.005, 0.02, 0.02]``.
    """
    adjusted, running = [], 0.0
    for p in (float(v) for v in p_values):
        running = max(running, p) if p == p and running == running else float("nan")
        adjusted.append(running)
    return adjusted


def sign_flip_p_value(differences: Tensor, *, n_flips: int = 10_000, seed: int) -> float:
    """One-sided p-value that the per-unit ``differences`` [unit] have a positive mean: each unit's difference
    keeps or flips its sign at random (``n_flips`` draws from ``seed``), the observed sum counting as one draw,
    ``(1 + #{flipped sum >= observed sum}) / (1 + n_flips)``. Valid when, under the null, each unit's difference
    is symmetric about 0 (the two conditions are exchangeable within a unit).

    Example: 16 units all positive give about ``1 / 10001`` (exactly ``2 ** -16`` over all sign patterns).
    """
    d = differences.detach().cpu().double()
    generator = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (n_flips, d.shape[0]), generator=generator).double() * 2 - 1
    return float(permutation_p_value(d.sum(), signs @ d))
