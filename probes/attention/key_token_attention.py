"""Attention from a query token to each key token, averaged over contexts.

Definitions. A *query row* is a position ``q`` of a sequence that is valid and holds one of the
``query_tokens`` (``query_position="last"``: only the last valid position of each sequence is a
candidate; ``"all"``: every position). Its *visible keys* are the valid positions ``k`` with
``k != q`` (unless ``exclude_self=False``), ``k <= q`` for causal models, and ``|q - k| <= window``
when a window is given. For a query token ``t``, a key token ``s``, a layer and a head::

    mass[t, s]           = sum over query rows q holding t of  sum_{visible k holding s} A[q, k]
                           / #query rows holding t
    occurrences[t, s]    = number of (query row holding t, visible key holding s) pairs
    per_occurrence[t, s] = (summed mass) / occurrences[t, s]

``mass`` is Scan and Snap's attention composition ``c_s`` for query ``t`` (it grows with how often
``s`` occurs); ``per_occurrence`` is the attention one occurrence of ``s`` receives (frequency
removed: ``exp(Z[t, s])`` up to a constant in the Y/Z model). ``occurrences`` is the co-occurrence
count of the corpus that was fed. ``position_entropy`` is the entropy (nats) of each query row's
attention over positions, averaged over the rows of each query token.

Distance-matched attention (``distance_matched=True``). Natural text puts co-occurring tokens
close together, and a head with purely positional attention (recency, a causal prefix) then gives
them more attention without reading their identity. To compare key tokens at matched query-key
distances, each attention weight is first scaled by the number of keys its query row can see
(uniform attention scores 1 everywhere), and the offset ``q - k`` is put into a distance bin
(:func:`distance_bin`: exact up to 16, then half-octaves; sign kept for bidirectional models).
For a query token ``t``, a key token ``s`` and a head::

    expected[t, s]         = sum_d  pairs[t, s, d] * (scaled mass of t's pairs in bin d / t's pairs in bin d)
    distance_matched[t, s] = (scaled mass of the pairs (t, s)) / expected[t, s]

i.e. how much more (> 1) or less (< 1) attention ``s`` gets than the other tracked keys at the same
distances from the same query token. Uniform attention scores exactly 1 for every pair, and so
does any head whose scaled attention depends only on the distance bin; a recency head is matched
on distance but not on the query's position, so it keeps some noise (not a bias toward
co-occurring keys).

Models whose only meaningful query is the last position (Scan and Snap's Y/Z model) are probed
with ``query_position="last"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechprobe.validation import is_integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.pattern_sums import check_pattern_block
from probes.core.probe import LayerwiseProbe
from probes.core.result import ProbeResult, Provenance
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd

QueryPosition = Literal["last", "all"]
MAX_STATE_ENTRIES = 50_000_000
EXACT_DISTANCES = 16


def distance_bin(offset: Tensor, n_ctx: int) -> Tensor:
    """Bin index of each query-key offset ``q - k``: ``|offset|`` itself up to 16, then one bin per
    half-octave; negative offsets (keys after the query) get the bins after the non-negative ones."""
    magnitude = offset.abs()
    far = EXACT_DISTANCES + torch.ceil(2 * torch.log2(magnitude.clamp(min=1).double() / EXACT_DISTANCES)).long()
    bins = torch.where(magnitude <= EXACT_DISTANCES, magnitude, far)
    return torch.where(offset >= 0, bins, bins + n_distance_bins(n_ctx) // 2)


def n_distance_bins(n_ctx: int) -> int:
    """How many bins :func:`distance_bin` uses for a context of ``n_ctx`` positions (both signs)."""
    largest = max(n_ctx, EXACT_DISTANCES + 1)
    return 2 * (EXACT_DISTANCES + math.ceil(2 * math.log2(largest / EXACT_DISTANCES)) + 1)


def entropy_nats(p: Float[Tensor, "... n"], dim: int = -1) -> Float[Tensor, ...]:
    """Shannon entropy in nats of the non-negative weights ``p`` along ``dim`` after normalising them."""
    p = p.double()
    p = p / p.sum(dim, keepdim=True)
    return -torch.where(p > 0, p * p.log(), torch.zeros_like(p)).sum(dim)


def _token_list(tokens: Sequence[int] | Tensor | None, name: str) -> tuple[int, ...] | None:
    if tokens is None:
        return None
    values = tokens.tolist() if isinstance(tokens, Tensor) else list(tokens)
    if not values or any(not is_integer(v) or v < 0 for v in values):
        raise ConfigError(f"{name} must be a non-empty list of non-negative token ids (or None = all); got {values!r}.")
    if len(set(values)) != len(values):
        raise ConfigError(f"{name} must not repeat token ids; got {values!r}.")
    return tuple(values)


def token_index(tokens: Sequence[int], d_vocab: int, name: str) -> Int[Tensor, " d_vocab"]:
    """A lookup table: ``index[token] = position of token in tokens``, -1 for other tokens."""
    if max(tokens) >= d_vocab:
        raise ConfigError(f"{name} holds ids up to {max(tokens)}, outside the vocabulary of {d_vocab}.")
    index = torch.full((d_vocab,), -1, dtype=torch.long)
    index[torch.tensor(tokens, dtype=torch.long)] = torch.arange(len(tokens))
    return index


@dataclass(frozen=True)
class PairSpec:
    """Which (query row, key position) pairs count; shared by attention and co-occurrence counting."""

    query_position: QueryPosition = "all"
    causal: bool = True
    exclude_self: bool = True
    window: int | None = None

    def __post_init__(self) -> None:
        if self.query_position not in ("last", "all"):
            raise ConfigError(f"query_position must be 'last' or 'all'; got {self.query_position!r}.")
        if self.window is not None and (not is_integer(self.window)
                                        or self.window < 1):
            raise ConfigError(f"window must be None or an integer >= 1; got {self.window!r}.")


def query_rows(
    tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"], query_index: Int[Tensor, " d_vocab"],
    query_position: QueryPosition,
) -> tuple[Int[Tensor, " row"], Int[Tensor, " row"], Int[Tensor, " row"]]:
    """``(batch index, position, query index)`` of every query row."""
    is_query = valid & (query_index.to(tokens.device)[tokens] >= 0)
    if query_position == "last":
        n_pos = tokens.shape[1]
        positions = torch.arange(n_pos, device=tokens.device).expand_as(tokens)
        last_valid = torch.where(valid, positions, -1).max(dim=1).values
        is_query = is_query & (positions == last_valid[:, None])
    b_idx, q_idx = is_query.nonzero(as_tuple=True)
    return b_idx, q_idx, query_index.to(tokens.device)[tokens[b_idx, q_idx]]


def visible_pairs(
    tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"], b_idx: Int[Tensor, " row"],
    q_idx: Int[Tensor, " row"], key_index: Int[Tensor, " d_vocab"], spec: PairSpec,
) -> tuple[Bool[Tensor, "row k_pos"], Int[Tensor, "row k_pos"]]:
    """``(mask, key index)``: which key positions of each query row count, and their key-token index."""
    n_pos = tokens.shape[1]
    keys = torch.arange(n_pos, device=tokens.device)[None, :]
    key_idx = key_index.to(tokens.device)[tokens[b_idx]]
    mask = valid[b_idx] & (key_idx >= 0)
    if spec.exclude_self:
        mask &= keys != q_idx[:, None]
    if spec.causal:
        mask &= keys <= q_idx[:, None]
    if spec.window is not None:
        mask &= (q_idx[:, None] - keys).abs() <= spec.window
    return mask, key_idx


def distance_matched_ratio(state: Mapping[str, Tensor]) -> Float[Tensor, "... layer head query key"]:
    """``distance_matched`` (module docstring) of the summed state of a ``distance_matched=True`` probe, float32, NaN
    where the pair never occurred. Entries may carry the same leading axes (e.g. bootstrap resamples): each index
    of them gives what its own state alone gives."""
    bin_pairs = state["bin_pairs"]                                                       # ... query key bin
    per_bin = state["bin_scaled_mass"] / bin_pairs.sum(-2).clamp_min(1)[..., None, None, :, :]  # ... l h q bin
    expected = torch.einsum("...qkd,...lhqd->...lhqk", bin_pairs, per_bin)
    # 0 / 0 (the pair only occurs where the head puts no attention at all) is "as expected"
    ratio = torch.where(expected > 0, state["scaled_mass"] / expected.clamp_min(1e-300), 1.0)
    return torch.where(state["occurrences"][..., None, None, :, :] > 0, ratio, torch.nan).float()


@dataclass(frozen=True)
class KeyTokenAttention(ProbeResult, HeadMapDisplay):
    """Per-(layer, head, query token, key token) attention (definitions in the module docstring).

    ``mass``, ``per_occurrence``: [layer head query key]; ``occurrences``: [query key];
    ``rows``: [query] query rows seen; ``position_entropy``: [layer head query];
    ``query_tokens`` [query] and ``key_tokens`` [key] are the token ids of the axes;
    ``distance_matched`` [layer head query key] (``None`` unless probed with ``distance_matched=True``;
    NaN where the pair never occurred).
    """

    query_tokens: Tensor
    key_tokens: Tensor
    mass: Tensor
    per_occurrence: Tensor
    occurrences: Tensor
    rows: Tensor
    position_entropy: Tensor
    distance_matched: Tensor | None = None

    def _query(self, query: int) -> int:
        hits = (self.query_tokens == query).nonzero()
        if len(hits) == 0 or float(self.rows[int(hits[0])]) == 0:
            raise InputError(f"Query token {query} was not seen as a query; seen: "
                             f"{self.query_tokens[self.rows > 0].tolist()[:20]}.")
        return int(hits[0])

    def _keys(self, keys: Sequence[int] | Tensor | None) -> Tensor:
        if keys is None:
            return torch.arange(len(self.key_tokens))
        keys = torch.as_tensor(keys, dtype=torch.long)
        position = {int(t): i for i, t in enumerate(self.key_tokens)}
        missing = [int(k) for k in keys if int(k) not in position]
        if missing:
            raise InputError(f"Key tokens {missing[:10]} were not tracked by the probe (its key_tokens).")
        return torch.tensor([position[int(k)] for k in keys], dtype=torch.long)

    def composition(self, query: int, keys: Sequence[int] | Tensor | None = None, *, layer: int = 0,
                    head: int = 0, measure: Literal["mass", "per_occurrence"] = "mass") -> Tensor:
        """The attention of ``query`` on ``keys`` (all tracked keys by default), renormalised to sum 1."""
        values: Tensor = getattr(self, measure)[layer, head, self._query(query)][self._keys(keys)]
        return values / values.sum()

    def key_mass(self, query: int, keys: Sequence[int] | Tensor, *, layer: int = 0, head: int = 0) -> float:
        """Mean attention mass per query row of ``query`` on the key tokens ``keys`` (e.g. the common ones)."""
        return float(self.mass[layer, head, self._query(query)][self._keys(keys)].sum())

    def token_entropy(self, query: int, keys: Sequence[int] | Tensor | None = None, *, layer: int = 0,
                      head: int = 0) -> float:
        """Entropy (nats) of ``composition(query, keys)``: Scan and Snap's sparsity statistic."""
        return float(entropy_nats(self.composition(query, keys, layer=layer, head=head)))

    def head_maps(self) -> list[HeadMap]:
        """Entropy over positions, averaged over the query tokens seen (low = attention on few positions)."""
        seen = self.rows > 0
        return [HeadMap("position entropy (mean over queries)", self.position_entropy[:, :, seen].double().mean(-1),
                        label="nats")]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head, query token, key token) with mass, per-occurrence attention and count."""
        import pandas as pd

        n_layers, n_heads, n_q, n_k = self.mass.shape
        index = torch.cartesian_prod(torch.arange(n_layers), torch.arange(n_heads), torch.arange(n_q),
                                     torch.arange(n_k))
        layer, head, q, k = index.unbind(1)
        return pd.DataFrame({
            "layer": layer.numpy(), "head": head.numpy(),
            "query_token": self.query_tokens[q].numpy(), "key_token": self.key_tokens[k].numpy(),
            "mass": self.mass.flatten().double().numpy(),
            "per_occurrence": self.per_occurrence.flatten().double().numpy(),
            "occurrences": self.occurrences[q, k].double().numpy(),
        })


class KeyTokenAttentionProbe(LayerwiseProbe[KeyTokenAttention]):
    """Accumulates per-key-token attention from query tokens (see the module docstring).

    ``query_tokens`` / ``key_tokens`` default to the whole vocabulary (fine for toy vocabularies;
    pass explicit lists on real text). ``causal=None`` takes the model's attention direction
    (causal when the model does not say).

    Example::

        probe = KeyTokenAttentionProbe(query_tokens=[30, 31], query_position="last")
        (result,) = probes.run_probes(model, [probe], batches)
        result.key_mass(30, common_tokens)
    """

    def __init__(
        self,
        query_tokens: Sequence[int] | Tensor | None = None,
        key_tokens: Sequence[int] | Tensor | None = None,
        *,
        query_position: QueryPosition = "all",
        exclude_self: bool = True,
        window: int | None = None,
        causal: bool | None = None,
        layers: Sequence[int] | None = None,
        distance_matched: bool = False,
    ) -> None:
        super().__init__()
        if not isinstance(distance_matched, bool):
            raise ConfigError(f"distance_matched must be True or False; got {distance_matched!r}.")
        self.distance_matched = distance_matched
        self.query_tokens = _token_list(query_tokens, "query_tokens")
        self.key_tokens = _token_list(key_tokens, "key_tokens")
        self.spec = PairSpec(query_position, True if causal is None else causal, exclude_self, window)
        self.causal = causal
        self.query_position, self.exclude_self, self.window = query_position, exclude_self, window
        self.layers = None if layers is None else tuple(int(layer) for layer in layers)
        if self.layers is not None and not self.layers:
            raise ConfigError("layers must be None (all layers) or a non-empty list of layer indices.")


    def _layers(self, info: ModelInfo) -> tuple[int, ...]:
        layers = self.layers if self.layers is not None else tuple(range(info.n_layers))
        bad = [layer for layer in layers if not 0 <= layer < info.n_layers]
        if bad:
            raise ConfigError(f"layers {bad} do not exist in {info.name} ({info.n_layers} layers).")
        return layers

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in self._layers(info))

    def _tokens(self, info: ModelInfo) -> tuple[tuple[int, ...], tuple[int, ...]]:
        queries = self.query_tokens if self.query_tokens is not None else tuple(range(info.d_vocab))
        keys = self.key_tokens if self.key_tokens is not None else tuple(range(info.d_vocab))
        size = len(self._layers(info)) * info.n_heads * len(queries) * len(keys)
        if size > MAX_STATE_ENTRIES:
            raise ConfigError(
                f"Tracking {len(queries)} query x {len(keys)} key tokens over {len(self._layers(info))} layers "
                f"x {info.n_heads} heads needs {size:,} sums (limit {MAX_STATE_ENTRIES:,}). Pass shorter "
                f"query_tokens / key_tokens lists (e.g. the most frequent tokens)."
            )
        return queries, keys

    def _spec(self, info: ModelInfo) -> PairSpec:
        if self.causal is not None or info.causal is None:
            return self.spec
        return PairSpec(self.spec.query_position, info.causal, self.spec.exclude_self, self.spec.window)

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> dict[str, Any]:
        info = self.info
        queries, keys = self._tokens(info)
        n_q, n_k = len(queries), len(keys)
        query_index = token_index(queries, info.d_vocab, "query_tokens")
        key_index = token_index(keys, info.d_vocab, "key_tokens")
        n_batch, n_pos = batch.tokens.shape
        check_pattern_block(first, n_batch, info.n_heads, n_pos)
        spec = self._spec(info)
        b_idx, q_idx, q_tok = query_rows(batch.tokens, batch.valid, query_index, spec.query_position)
        mask, key_idx = visible_pairs(batch.tokens, batch.valid, b_idx, q_idx, key_index, spec)
        pair_ids = (q_tok[:, None] * n_k + key_idx)[mask]
        self._add("occurrences", torch.bincount(pair_ids, minlength=n_q * n_k).reshape(n_q, n_k))
        self._add("rows", torch.bincount(q_tok, minlength=n_q))
        pair_query = q_idx[:, None].expand_as(mask)[mask]  # the query position of each pair (row-major order)
        context = {"rows": (b_idx, q_idx, q_tok), "mask": mask, "pair_ids": pair_ids, "pair_query": pair_query,
                   "shape": (n_q, n_k)}
        if self.distance_matched:
            context["matched"] = self._distance_context(batch, spec, (b_idx, q_idx, q_tok), mask, pair_ids, (n_q, n_k))
        return context

    def _update_rows(self, index: int, block: Tensor, start: int, batch: TokenBatch, context: dict[str, Any]) -> None:
        b_idx, q_idx, q_tok = context["rows"]
        n_q, n_k = context["shape"]
        n_heads, n_layers = self.info.n_heads, len(self.hook_names(self.info))
        stop = start + block.shape[2]
        here = (q_idx >= start) & (q_idx < stop)  # the tracked query rows this block holds
        pairs_here = (context["pair_query"] >= start) & (context["pair_query"] < stop)
        # only the tracked query rows reach float64 (gathered, one block of a layer at a time)
        rows = block[b_idx[here], :, q_idx[here] - start].transpose(0, 1).double()  # head row k
        pair_ids = context["pair_ids"][pairs_here]
        offsets = torch.arange(n_heads, device=pair_ids.device)[:, None] * (n_q * n_k)
        values = rows[:, context["mask"][here]]  # [head pair]
        mass = torch.bincount((offsets + pair_ids[None, :]).flatten(), weights=values.flatten(),
                              minlength=n_heads * n_q * n_k)
        self._add_at("mass", index, n_layers, mass.reshape(n_heads, n_q, n_k))
        if self.distance_matched:
            n_visible, query_bins = context["matched"]
            self._update_distance_matched(index, n_layers, (n_visible[pairs_here], query_bins[pairs_here]), pair_ids,
                                          values, (n_q, n_k))
        entropy = entropy_nats(rows)  # [head row]
        summed = torch.zeros(n_heads, n_q, dtype=torch.float64, device=entropy.device)
        self._add_at("entropy", index, n_layers, summed.index_add_(1, q_tok[here], entropy))

    def _distance_context(self, batch: TokenBatch, spec: PairSpec, query: tuple[Tensor, Tensor, Tensor],
                          mask: Tensor, pair_ids: Tensor, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
        """Per pair: the visible-key count of its query row, and its (query token, distance bin) index.

        ``query`` is (batch index, position, query index) of each query row."""
        b_idx, q_idx, q_tok = query
        n_q, n_k = shape
        n_bins = n_distance_bins(self.info.n_ctx)
        n_pos = batch.tokens.shape[1]
        device = batch.tokens.device
        attended = (torch.ones_like(batch.tokens) if batch.attention_mask is None else batch.attention_mask)
        attended = attended.to(torch.float64)[b_idx]
        n_visible = attended.cumsum(-1).gather(1, q_idx[:, None]).squeeze(1) if spec.causal else attended.sum(-1)
        row_of = torch.arange(len(q_idx), device=device)[:, None].expand(-1, n_pos)[mask]
        bins = distance_bin(q_idx[:, None] - torch.arange(n_pos, device=device)[None, :], self.info.n_ctx)[mask]
        self._add("bin_pairs", torch.bincount(pair_ids * n_bins + bins, minlength=n_q * n_k * n_bins)
                  .reshape(n_q, n_k, n_bins))
        return n_visible[row_of], q_tok[row_of] * n_bins + bins

    def _update_distance_matched(self, index: int, n_layers: int, matched: tuple[Tensor, Tensor], pair_ids: Tensor,
                                 values: Tensor, shape: tuple[int, int]) -> None:
        """Sum one layer's attention scaled by the visible-key count, per pair and per (query token,
        distance bin); ``values`` [head pair]."""
        n_visible, query_bins = matched
        n_q, n_k = shape
        n_bins = n_distance_bins(self.info.n_ctx)
        n_heads = values.shape[0]
        scaled = values * n_visible[None, :]
        head_offsets = torch.arange(n_heads, device=values.device)[:, None]
        self._add_at("scaled_mass", index, n_layers,
                     torch.bincount((head_offsets * (n_q * n_k) + pair_ids[None, :]).flatten(),
                                    weights=scaled.flatten(), minlength=n_heads * n_q * n_k).reshape(n_heads, n_q, n_k))
        self._add_at("bin_scaled_mass", index, n_layers,
                     torch.bincount((head_offsets * (n_q * n_bins) + query_bins[None, :]).flatten(),
                                    weights=scaled.flatten(), minlength=n_heads * n_q * n_bins)
                     .reshape(n_heads, n_q, n_bins))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> KeyTokenAttention:
        queries, keys = self._tokens(info)
        rows = state["rows"]
        per_row = rows.clamp_min(1)
        matched = distance_matched_ratio(state) if self.distance_matched else None
        return KeyTokenAttention(
            provenance=provenance,
            query_tokens=torch.tensor(queries, dtype=torch.long),
            key_tokens=torch.tensor(keys, dtype=torch.long),
            mass=(state["mass"] / per_row[None, None, :, None]).float(),
            per_occurrence=(state["mass"] / state["occurrences"]).float(),
            occurrences=state["occurrences"].float(),
            rows=rows.long(),
            position_entropy=(state["entropy"] / per_row).float(),
            distance_matched=matched,
        )
