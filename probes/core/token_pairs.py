"""Target pairs ``(b, q, k)`` of the attention probes as lists, built without a ``[batch q_pos k_pos]`` mask.

The probes' targets are equalities between tokens at shifted positions (the previous token, an earlier copy, the
key after an earlier copy, the n-gram-matched keys), so their pairs are an equi-join of two ``[batch pos]`` tables:
sort the keys once per sequence, find each query's run of equal keys by binary search, enumerate the runs. The
cost is ``O(T log T)`` plus the number of pairs, against ``O(T^2)`` for a boolean mask (at 4k tokens a single
``[T, T]`` boolean reduction costs about a tenth of a forward pass on a CPU; at 32k the mask alone is 1 GiB).

Example: ``equal_pairs(tokens, tokens, valid, valid, keys="before")`` lists the earlier copies of every token.
"""

from __future__ import annotations

from typing import Literal

import torch
from jaxtyping import Bool, Int
from torch import Tensor

Pairs = tuple[Tensor, Tensor, Tensor]  # (batch, query, key) indices, int64, in the order of mask.nonzero()
KeySide = Literal["before", "up_to", "any", "any_other"]


def _relation_holds(q: Tensor, k: Tensor, keys: KeySide) -> Tensor:
    if keys == "before":
        return k < q
    if keys == "up_to":
        return k <= q
    if keys == "any_other":
        return k != q
    return torch.ones_like(q, dtype=torch.bool)


def equal_pairs(query_values: Int[Tensor, "batch pos"], key_values: Int[Tensor, "batch pos"],
                query_ok: Bool[Tensor, "batch pos"], key_ok: Bool[Tensor, "batch pos"], *,
                keys: KeySide) -> Pairs:
    """Every ``(b, q, k)`` with ``query_values[b, q] == key_values[b, k]``, both ok, and ``k`` on the ``keys``
    side of ``q`` (``before``: k < q; ``up_to``: k <= q; ``any_other``: k != q; ``any``), ordered by (b, q, k): the
    queries are enumerated in order and a stable sort keeps each run of equal keys in position order."""
    n_batch, n_pos = key_values.shape
    device = key_values.device
    # values of rows that are not ok never match: keys take a sentinel below every value, queries another
    low = torch.minimum(query_values.min(), key_values.min()) if key_values.numel() else 0
    key_values = torch.where(key_ok, key_values, low - 1)
    query_values = torch.where(query_ok, query_values, low - 2)
    sorted_values, order = torch.sort(key_values, dim=-1, stable=True)
    first = torch.searchsorted(sorted_values, query_values, right=False)
    last = torch.searchsorted(sorted_values, query_values, right=True)
    counts = (last - first).flatten()
    if int(counts.sum()) == 0:
        empty = torch.empty(0, dtype=torch.long, device=device)
        return empty, empty, empty
    rows = torch.repeat_interleave(torch.arange(n_batch * n_pos, device=device), counts)
    starts = torch.cumsum(counts, 0) - counts  # where each query's run begins in the output
    within = torch.arange(len(rows), device=device) - starts[rows]
    b, q = rows // n_pos, rows % n_pos
    k = order[b, first.flatten()[rows] + within]
    keep = _relation_holds(q, k, keys)
    return b[keep], q[keep], k[keep]


def shifted(values: Int[Tensor, "batch pos"], ok: Bool[Tensor, "batch pos"], shift: int
            ) -> tuple[Tensor, Tensor]:
    """``(values[:, p - shift], ok[:, p - shift])`` at every position ``p`` (not ok where ``p - shift`` is off the
    sequence)."""
    out = torch.zeros_like(values)
    out_ok = torch.zeros_like(ok)
    n_pos = values.shape[1]
    if shift == 0:
        return values, ok
    if 0 < shift < n_pos:
        out[:, shift:], out_ok[:, shift:] = values[:, :-shift], ok[:, :-shift]
    elif -n_pos < shift < 0:
        out[:, :shift], out_ok[:, :shift] = values[:, -shift:], ok[:, -shift:]
    return out, out_ok


def pair_mask(pairs: Pairs, n_batch: int, n_pos: int) -> Bool[Tensor, "batch q_pos k_pos"]:
    """The boolean ``[batch q_pos k_pos]`` mask of ``pairs`` (for references and small dense sequences)."""
    b, q, k = pairs
    mask = torch.zeros(n_batch, n_pos, n_pos, dtype=torch.bool, device=b.device)
    mask[b, q, k] = True
    return mask


def per_query_counts(pairs: Pairs, n_batch: int, n_pos: int) -> Int[Tensor, "batch q_pos"]:
    """How many pairs each query has (``mask.sum(-1)`` of the pair mask)."""
    b, q, _ = pairs
    return torch.bincount(b * n_pos + q, minlength=n_batch * n_pos).view(n_batch, n_pos)
