"""Every attention probe's per-layer work as one batched reduction: linear terms of each layer's softmax, planned once
per batch on the CPU and computed per layer in a fixed handful of operations for all probes and heads together.

What the attention probes read from a layer given as reductions (:class:`~probes.core.attention_rows.LayerAttention`)
is linear in its softmax ``p[b, h, q, k]``: sums of chosen entries (previous token, induction targets, n-gram-matched
keys, same-token pairs, each query on itself) and sums over queries of the label-column mass
``m[b, h, q, c] = sum_k p[b, h, q, k] * columns[b, k, c]``. A probe states them once per batch as
:class:`AttentionTerms` (entries ``(b, q, k)`` with the sum each adds to; query weights ``[batch q_pos row]`` that
reduce the column mass to ``[head row column]``), built from the batch's tokens on the CPU before the forward (no
data is read on the device, no per-layer Python loop over probes, kinds or heads). :class:`TermsPlan` joins every
probe's terms, moves them to the model's device once, and at each layer computes all entries' softmax weights in one
gather of ``q . k`` minus the row log-sum-exp, adds them to their sums in one ``index_add_``, and reduces the column
mass in one contraction per probe that asks for columns. Each layer's sums (over a batch's entries and queries) are
reduced in float32 and stay on the device, stacked by layer, until the batch ends; they reach float64 there
(:meth:`TermsPlan.sums`). Each probe then folds its ``[layer ...]`` sums in a few operations per
batch (``LayerwiseProbe._fold_terms``). The per-probe row path stays the reference these sums are tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from probes.core.attention_rows import LayerAttention
from probes.core.pattern_sums import KeyMask


@dataclass(frozen=True)
class AttentionTerms:
    """What one probe reads from every layer's softmax, for one batch (CPU tensors).

    ``entries`` ``(b, q, k)`` int64 are softmax entries, each added to sum ``entry_sums[i]`` of ``n_sums``;
    ``columns`` ``[batch k_pos column]`` are label columns and ``query_weights`` ``[batch q_pos row]`` reduce their mass
    per query to ``column_sums[h, r, c] = sum_{b, q} query_weights[b, q, r] * m[b, h, q, c]`` (both or neither).
    """

    entries: tuple[Tensor, Tensor, Tensor]
    entry_sums: Int[Tensor, " entry"]
    n_sums: int
    columns: Float[Tensor, "batch k_pos column"] | None = None
    query_weights: Float[Tensor, "batch q_pos row"] | None = None


@dataclass(frozen=True)
class TermSums:
    """One probe's sums over a batch, stacked by layer, on the model's device (float64): ``entries[l, s, h]`` and
    ``columns[l, h, r, c]`` (None without columns)."""

    entries: Float[Tensor, "layer sum head"]
    columns: Float[Tensor, "layer head row column"] | None


def key_mask_terms(masks: Sequence[KeyMask]) -> AttentionTerms | None:
    """The terms of ``sum_{b, q, k} p[b, h, q, k] * mask_i[b, q, k]`` for each of ``masks`` (sum ``i``); None when a
    mask holds dense sequences (those are summed from rows, :meth:`KeyMask.attention_sum`)."""
    if any(mask.dense is not None for mask in masks):
        return None
    parts = [(mask.entries, i) for i, mask in enumerate(masks) if mask.entries is not None]
    if not parts:
        empty = torch.empty(0, dtype=torch.long)
        return AttentionTerms((empty, empty, empty), empty, len(masks))
    b, q, k = (torch.cat([entries[axis] for entries, _ in parts]) for axis in range(3))
    sums = torch.cat([torch.full_like(entries[0], i) for entries, i in parts])
    return AttentionTerms((b.cpu(), q.cpu(), k.cpu()), sums.cpu(), len(masks))


@dataclass(frozen=True)
class _Chunk:
    """Distinct entries gathered together (on the device): ``b, q, k`` and their flat rows, the sums its entries add
    to, and each entry's place among the distinct ones (None where every entry is distinct)."""

    b: Tensor
    q: Tensor
    k: Tensor
    query_rows: Tensor
    key_rows: Tensor
    sums: Tensor
    local: Tensor | None


@dataclass(frozen=True)
class _Reader:
    entry_sums: slice  # its sums in the joined entry sums
    columns: slice | None  # its label columns in the joined columns
    query_weights: Tensor | None  # [batch q_pos row] on the device, float64


class TermsPlan:
    """Every probe's :class:`AttentionTerms` joined for one batch on ``device``; :meth:`fold` each layer's
    reductions, then :meth:`sums` per probe. Each distinct entry is gathered once, a chunk of at most
    ``chunk_bytes`` of gathered rows at a time.

    Example::

        plan = TermsPlan([terms_a, terms_b], n_layers=30, n_heads=9, n_pos=4096, device=torch.device("cuda"),
                         chunk_bytes=2**28)
        with reduced_attention(model, plan.fold, columns=plan.columns):
            forward.run(model, tokens)
        sums_a, sums_b = plan.sums()
    """

    def __init__(self, terms: Sequence[AttentionTerms], *, n_layers: int, n_heads: int, n_pos: int,
                 device: torch.device, chunk_bytes: int = 256 * 2**20) -> None:
        readers, column_parts = [], []
        n_sums = n_columns = 0
        for part in terms:
            where = None
            if part.columns is not None:
                where = slice(n_columns, n_columns + part.columns.shape[-1])
                column_parts.append(part.columns.float())
                n_columns += part.columns.shape[-1]
            weights = None if part.query_weights is None else part.query_weights.to(device, torch.float32)
            readers.append(_Reader(slice(n_sums, n_sums + part.n_sums), where, weights))
            n_sums += part.n_sums
        self._readers = readers
        offsets = torch.tensor([r.entry_sums.start for r in readers], dtype=torch.long)
        b = torch.cat([part.entries[0] for part in terms])
        q = torch.cat([part.entries[1] for part in terms])
        k = torch.cat([part.entries[2] for part in terms])
        sums = torch.cat([part.entry_sums + offset for part, offset in zip(terms, offsets)])
        # host work, once per batch: each distinct (b, q, k) is gathered once however many sums it adds to (the
        # probes share most: previous-token targets, same-token pairs, each query on itself)
        unique, inverse = torch.unique((b * n_pos + q) * n_pos + k, return_inverse=True)
        order = inverse.argsort(stable=True)
        self._entry_index, self._entry_sums = inverse[order], sums[order]
        self._unique = (unique // (n_pos * n_pos), unique // n_pos % n_pos, unique % n_pos)
        self._keep_all = bool((self._unique[2] <= self._unique[1]).all())  # whether causality can forbid an entry
        self._n_pos, self._budget, self._device = n_pos, chunk_bytes, device
        self._chunks: list[_Chunk] | None = None  # made at the first layer, when d_head and dtype are known
        self.columns = torch.cat(column_parts, -1).to(device) if column_parts else None
        self._entries = torch.zeros(n_layers, n_heads, n_sums, dtype=torch.float32, device=device)
        self._column_sums = {i: torch.zeros(n_layers, n_heads, r.query_weights.shape[-1],
                                            r.columns.stop - r.columns.start, dtype=torch.float32, device=device)
                             for i, r in enumerate(readers) if r.columns is not None and r.query_weights is not None}
        self._all_columns = 0 if self.columns is None else self.columns.shape[-1]

    def _chunked(self, attention: LayerAttention) -> list[_Chunk]:
        """The distinct entries in chunks whose gathered rows (``q`` and ``k`` of every head, their product and the
        float32 sums) stay within the plan's byte budget; per chunk on the device: ``b, q, k``, their flat rows, and
        the sums its entries add to with each one's place in the chunk (None where every entry is distinct)."""
        n_heads, d_head = attention.query.shape[1], attention.query.shape[3]
        per_entry = n_heads * (3 * d_head * attention.query.element_size() + 8)
        step = max(1, self._budget // per_entry)
        b, q, k = self._unique
        n_unique = len(b)
        starts = list(range(0, n_unique, step))
        cuts = torch.searchsorted(self._entry_index, torch.tensor([*starts, n_unique]))
        every_once = len(self._entry_index) == n_unique
        chunks = []
        for i, start in enumerate(starts):
            stop = min(n_unique, start + step)
            first, last = int(cuts[i]), int(cuts[i + 1])
            local = None if every_once else self._entry_index[first:last] - start
            chunks.append((b[start:stop], q[start:stop], k[start:stop], b[start:stop] * attention.query.shape[2]
                           + q[start:stop], b[start:stop] * attention.key.shape[2] + k[start:stop],
                           self._entry_sums[first:last], local))
        flat = torch.cat([t for chunk in chunks for t in chunk if t is not None]).to(self._device)  # one copy
        moved, at = [], 0
        for chunk in chunks:
            parts: list[Tensor | None] = []
            for t in chunk:
                parts.append(None if t is None else flat[at : at + len(t)])
                at += 0 if t is None else len(t)
            b, q, k, query_rows, key_rows, sums, local = parts
            assert b is not None and q is not None and k is not None and sums is not None  # only local may be None
            assert query_rows is not None and key_rows is not None
            moved.append(_Chunk(b, q, k, query_rows, key_rows, sums, local))
        return moved

    def fold(self, attention: LayerAttention) -> None:
        """Add ``attention``'s layer: every entry's softmax weight into its sum, every probe's column mass reduced
        over queries."""
        if self._chunks is None:
            self._chunks = self._chunked(attention) if len(self._entry_sums) else []
        layer_sums = self._entries[attention.layer] if self._chunks else self._entries
        for chunk in self._chunks:
            weights = attention.entry_weights(chunk.query_rows, chunk.key_rows, chunk.b, chunk.q, chunk.k,
                                              causal_may_forbid=not self._keep_all)  # [head distinct entry]
            if chunk.local is not None:  # an entry that adds to several sums, once for each
                weights = weights.index_select(1, chunk.local)
            layer_sums.index_add_(1, chunk.sums, weights)
        if self._column_sums:
            mass = attention.column_mass
            if mass is None:
                raise RuntimeError("the layer's attention came without the label columns' mass the plan asked for")
            for i, out in self._column_sums.items():
                reader = self._readers[i]
                whole = reader.columns == slice(0, self._all_columns)
                out[attention.layer] = torch.einsum("bqr,bhqc->hrc", reader.query_weights,
                                                    mass if whole else mass[..., reader.columns])

    def sums(self) -> list[TermSums]:
        """Each probe's sums over the layers folded, in the order its terms were given: ``entries``
        ``[layer sum head]`` and ``columns`` ``[layer head row column]``."""
        entries = self._entries.double()
        return [TermSums(entries[:, :, r.entry_sums].transpose(1, 2),
                         None if i not in self._column_sums else self._column_sums[i].double())
                for i, r in enumerate(self._readers)]
