"""Row sums of one layer's attention pattern against key masks, in query chunks with small temporaries.

Every attention probe reduces a pattern ``A[b, h, q, k]`` over keys against a mask ``M[b, q, k]``
(targets, same-topic pairs, ...). Written as one expression, ``(A * M).sum(-1)`` or an einsum,
that allocates another ``[batch head q_pos k_pos]`` tensor (or a permuted copy) per mask: as much
again as the layer's pattern. Here queries are taken ``rows_per_chunk(...)`` at a time, so the
temporary stays under :data:`CHUNK_BYTES`; the reduction over keys runs in float32 (or float64 for
float64 patterns) and only the per-row results, ``[batch head q_pos]``, reach float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.attention_rows import LayerAttention, float_at_least_32
from probes.core.errors import InputError

CHUNK_BYTES = 64 * 2**20  # the largest [batch head rows k_pos] temporary a reduction makes
SPARSE_SHARE = 1 / 64  # masks with at most this share of True entries are summed by gathering them


def check_pattern_block(pattern: Tensor, n_batch: int | None, n_heads: int | None, n_pos: int, *,
                        whole: bool = False) -> None:
    """Refuse a hook's ``pattern`` that is not ``[batch head q_pos k_pos]`` = ``(n_batch, n_heads, n_pos, n_pos)``
    (None: any size there) or, unless ``whole``, its first block of query rows, with the one message every attention
    probe gives."""
    fits = (pattern.ndim == 4 and n_batch in (None, pattern.shape[0]) and n_heads in (None, pattern.shape[1])
            and pattern.shape[3] == n_pos and (pattern.shape[2] == n_pos if whole else 1 <= pattern.shape[2] <= n_pos))
    if not fits:
        expected = ", ".join("any" if size is None else str(size) for size in (n_batch, n_heads, n_pos, n_pos))
        rows = "" if whole else " (or a first block of its query rows)"
        raise InputError(f"Attention patterns must be [batch head q_pos k_pos] = ({expected}){rows}; the model's hook "
                         f"gave {tuple(pattern.shape)}. Check the model's hook_pattern layout.")


def rows_per_chunk(pattern: Tensor, extra: int = 1) -> int:
    """How many query rows of ``pattern`` [batch head q_pos k_pos] keep a float32 temporary of
    ``extra`` times those rows under :data:`CHUNK_BYTES` (at least one)."""
    n_batch, n_heads, _, n_keys = pattern.shape
    return max(1, CHUNK_BYTES // (4 * n_batch * n_heads * n_keys * extra))


def masked_row_sums(
    pattern: Float[Tensor, "batch head q_pos k_pos"], mask: Tensor
) -> Float[Tensor, "batch head q_pos"]:
    """``out[b, h, q] = sum_k pattern[b, h, q, k] * mask[b, q, k]`` in float64 (``mask`` bool or float,
    broadcastable to [batch q_pos k_pos]); reduced over keys in float32, a chunk of queries at a time.

    Example: ``masked_row_sums(pattern, targets).sum((0, 2))`` is the attention mass on targets per head.
    """
    n_batch, n_heads, n_pos, n_keys = pattern.shape
    mask = mask.expand(n_batch, n_pos, n_keys)
    out = torch.empty(n_batch, n_heads, n_pos, dtype=torch.float64, device=pattern.device)
    step = rows_per_chunk(pattern)
    for start in range(0, n_pos, step):
        rows = slice(start, start + step)
        chunk = float_at_least_32(pattern[:, :, rows])
        out[:, :, rows] = torch.einsum("bhqk,bqk->bhq", chunk, mask[:, rows].to(chunk.dtype)).double()
    return out


@dataclass(frozen=True)
class KeyMask:
    """A ``[batch q_pos k_pos]`` mask prepared once per batch for :meth:`pattern_sum` on every layer. The
    sequences whose mask is sparse (previous token, induction targets, ... on natural text) keep their True
    entries and are summed by gathering them (cost: the entries, not the grid); the others are reduced by
    :func:`masked_row_sums`. The choice is made per sequence, so a result does not depend on how sequences
    are batched (merging halves stays exact).

    Example: ``KeyMask.of(targets).pattern_sum(pattern)`` is the attention mass on targets per head.
    """

    dense: Tensor | None  # the mask of the dense sequences (sparse ones all False); None when there are none
    entries: tuple[Tensor, Tensor, Tensor] | None  # (batch, query, key) of the sparse sequences' True entries
    n_pos: int

    @classmethod
    def of(cls, mask: Tensor) -> KeyMask:
        # per sequence; counted as bytes into int64 (a bool sum converts every entry: twice as slow at 4k tokens)
        counts = mask.view(torch.uint8).sum((1, 2), dtype=torch.int64)
        sparse = counts <= SPARSE_SHARE * mask[0].numel()
        entries = None
        if bool(sparse.all()):
            batch, query, key = mask.nonzero(as_tuple=True)
            entries = (batch, query, key)
        elif bool(sparse.any()):
            batch, query, key = (mask & sparse[:, None, None]).nonzero(as_tuple=True)
            entries = (batch, query, key)
        dense = None if bool(sparse.all()) else mask & ~sparse[:, None, None]
        return cls(dense, entries, mask.shape[1])

    @classmethod
    def from_pairs(cls, pairs: tuple[Tensor, Tensor, Tensor], n_batch: int, n_pos: int) -> KeyMask:
        """The :class:`KeyMask` of the mask whose True entries are ``pairs`` ``(b, q, k)``, built without the mask
        for the sparse sequences (:mod:`probes.core.token_pairs`)."""
        b, q, k = pairs
        sparse = torch.bincount(b, minlength=n_batch) <= SPARSE_SHARE * n_pos * n_pos
        if bool(sparse.all()):
            return cls(None, (b, q, k), n_pos)
        keep = sparse[b]
        entries = (b[keep], q[keep], k[keep]) if bool(sparse.any()) else None
        dense = torch.zeros(n_batch, n_pos, n_pos, dtype=torch.bool, device=b.device)
        dense[b[~keep], q[~keep], k[~keep]] = True
        return cls(dense, entries, n_pos)

    def pattern_sum(self, rows: Float[Tensor, "batch head q_rows k_pos"], start: int = 0) -> Float[Tensor, " head"]:
        """``sum_{b, q, k} rows[b, h, q - start, k] * mask[b, q, k]`` over the queries ``rows`` holds, in float64."""
        n_rows = rows.shape[2]
        total = torch.zeros(rows.shape[1], dtype=torch.float64, device=rows.device)
        if self.dense is not None:
            total += masked_row_sums(rows, self.dense[:, start : start + n_rows]).sum(dim=(0, 2))
        if self.entries is not None:
            b, q, k = self.entries
            if start or n_rows < self.n_pos:
                inside = (q >= start) & (q < start + n_rows)
                b, q, k = b[inside], q[inside], k[inside]
            total += rows[b, :, q - start, k].double().sum(0)
        return total

    def attention_sum(self, attention: LayerAttention) -> Float[Tensor, " head"]:
        """:meth:`pattern_sum` over the whole layer given as reductions: the sparse sequences' entries gathered from
        ``q . k`` and the row log-sum-exp, the dense sequences' rows materialised a block at a time."""
        total = torch.zeros(attention.shape[1], dtype=torch.float64, device=attention.query.device)
        if self.entries is not None:
            total += attention.entries(*self.entries).double().sum(0)
        if self.dense is not None:
            for start, rows in attention.row_blocks():
                total += masked_row_sums(rows, self.dense[:, start : start + rows.shape[2]]).sum(dim=(0, 2))
        return total
