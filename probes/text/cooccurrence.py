"""Co-occurrence ordering: does attention on key tokens follow their co-occurrence with the query?

Co-occurrence counts use the same pairs as :mod:`probes.attention.key_token_attention`: for every query row
holding a query token, every visible key position holding a key token adds one to
``counts[query, key]`` (by default: all positions, keys before the query, the query excluded).
:func:`count_cooccurrence` does this on a corpus without a model: each sequence is compacted to
the positions holding tracked tokens and the pairs among them are counted with one
``torch.bincount`` per chunk; the attention probe records the same counts of the
tokens it was fed (``KeyTokenAttention.occurrences``). A generator's known distribution (e.g.
``P(l | m)``) can be used instead.

:func:`cooccurrence_ordering` ranks, for each (layer, head, query token), the key tokens by their
attention and by their co-occurrence and reports Spearman's rho (Pearson correlation of average
ranks) and Kendall's tau-b, over the keys that co-occur with the query at least once (optionally
restricted to a given subset, e.g. a fact's distinct tokens). The default attention measure is
``per_occurrence`` (the attention one occurrence receives): the ``mass`` measure correlates with
co-occurrence even under uniform attention, because frequent keys collect more mass. On natural
text ``per_occurrence`` is still confounded by position (co-occurring tokens sit close together,
and causal attention over a short prefix is large): ``distance_matched`` (see
:mod:`probes.attention.key_token_attention`) compares each key with the other keys at the same distances
from the same query token, so purely positional attention scores 0. :func:`ordering_null` gives
the null distribution of the mean Spearman with the co-occurrence values shuffled among the keys
of each query token.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from probes.attention.key_token_attention import (
    KeyTokenAttention,
    PairSpec,
    QueryPosition,
    token_index,
)
from probes.core.errors import ConfigError, InputError
from probes.core.result import ProbeResult
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd

CHUNK_PAIRS = 20_000_000
MATCHED_DECIMALS = 1e4


def count_cooccurrence(
    corpus: Tensor | Iterable[Tensor],
    query_tokens: Sequence[int] | Tensor,
    key_tokens: Sequence[int] | Tensor,
    *,
    query_position: QueryPosition = "all",
    causal: bool = True,
    exclude_self: bool = True,
    window: int | None = None,
) -> Float[Tensor, "query key"]:
    """``counts[i, j]``: (query row holding ``query_tokens[i]``, visible key holding ``key_tokens[j]``) pairs.

    ``corpus`` is an integer tensor [batch pos] or an iterable of them (sequences of one batch
    have equal length; every position counts). Each sequence is first compacted to its tracked
    positions (those holding a query or a key token, in order), so only pairs of tracked
    positions are enumerated (as one [row, slot, slot] grid of pair ids); rows are processed in
chunks of at most about ``CHUNK_PAIRS`` pairs.

    Example: ``count_cooccurrence(torch.tensor([[5, 7, 5]]), [5], [7])`` is ``[[1.]]`` (only the
    second 5 sees the 7 before it).
    """
    spec = PairSpec(query_position, causal, exclude_self, window)
    queries, keys = list(torch.as_tensor(query_tokens).tolist()), list(torch.as_tensor(key_tokens).tolist())
    if not queries or not keys:
        raise ConfigError("query_tokens and key_tokens must be non-empty lists of token ids.")
    batches = [corpus] if isinstance(corpus, Tensor) else list(corpus)
    if not batches:
        raise InputError("The corpus is empty: pass an integer tensor [batch, pos] or a list of them.")
    counts = torch.zeros((len(queries) + 1) * (len(keys) + 1), dtype=torch.long)
    for tokens in batches:
        if not isinstance(tokens, Tensor) or tokens.ndim != 2 or tokens.dtype.is_floating_point:
            raise InputError(
                f"Corpus batches must be integer tensors [batch, pos]; got "
                f"{type(tokens).__name__} {tuple(getattr(tokens, 'shape', ()))}."
            )
        if tokens.numel() == 0:
            continue
        if int(tokens.min()) < 0:
            raise InputError(f"Token ids must be >= 0; got {int(tokens.min())}.")
        d_vocab = int(max(tokens.max().item(), max(queries), max(keys))) + 1
        # untracked tokens go to an extra row / column that is dropped at the end
        query_index = token_index(queries, d_vocab, "query_tokens").to(tokens.device)
        key_index = token_index(keys, d_vocab, "key_tokens").to(tokens.device)
        query_index[query_index < 0] = len(queries)
        key_index[key_index < 0] = len(keys)
        counts += _count_pairs(tokens.long(), query_index, key_index, len(queries), len(keys), spec).cpu()
    return counts.reshape(len(queries) + 1, len(keys) + 1)[:-1, :-1].double()


def _count_pairs(tokens: Int[Tensor, "batch pos"], query_index: Int[Tensor, " d_vocab"],
                 key_index: Int[Tensor, " d_vocab"], n_q: int, n_k: int, spec: PairSpec) -> Int[Tensor, " bucket"]:
    """Pair counts of one batch over (n_q + 1) x (n_k + 1) buckets; index n_q / n_k means untracked."""
    q_of, k_of = query_index[tokens], key_index[tokens]
    if spec.query_position == "last":
        q_of[:, :-1] = n_q
    tracked = (q_of < n_q) | (k_of < n_k)
    # positions of the tracked tokens of each row, in order, then untracked ones (sorted stably)
    order = torch.argsort((~tracked).to(torch.uint8), dim=1, stable=True)
    n_tracked = tracked.sum(1, keepdim=True)
    width = int(n_tracked.max())
    buckets = (n_q + 1) * (n_k + 1)
    counts = torch.zeros(buckets, dtype=torch.long, device=tokens.device)
    if width == 0:
        return counts
    order = order[:, :width]
    live = torch.arange(width, device=tokens.device) < n_tracked
    q_c = torch.where(live, q_of.gather(1, order), n_q)
    k_c = torch.where(live, k_of.gather(1, order), n_k)
    id_dtype = torch.int32 if buckets < 2**31 else torch.long  # int32 halves the memory traffic
    q_c, k_c = q_c.to(id_dtype), k_c.to(id_dtype)
    dropped = _dropped_slots(width, spec, tokens.device)
    rows = max(1, CHUNK_PAIRS // (width * width))
    for start in range(0, tokens.shape[0], rows):
        part = slice(start, start + rows)
        ids = q_c[part, :, None] * (n_k + 1) + k_c[part, None, :]  # [row, query slot, key slot]
        drop = dropped
        if spec.window is not None:
            drop = drop | ((order[part, :, None] - order[part, None, :]).abs() > spec.window)
        ids.masked_fill_(drop, buckets - 1)  # the (untracked, untracked) bucket, dropped later
        counts += torch.bincount(ids.flatten(), minlength=buckets)
    return counts


def _dropped_slots(width: int, spec: PairSpec, device: torch.device) -> Bool[Tensor, "q_slot k_slot"]:
    """Which (query slot, key slot) pairs of the compacted positions never count (causality, self)."""
    slots = torch.arange(width, device=device)
    dropped = torch.zeros(width, width, dtype=torch.bool, device=device)
    if spec.causal:
        dropped |= slots[None, :] > slots[:, None]
    if spec.exclude_self:
        dropped |= slots[None, :] == slots[:, None]
    return dropped


def average_ranks(x: Float[Tensor, "... n"]) -> Float[Tensor, "... n"]:
    """Ranks from 1 along the last axis; ties get the mean of the ranks they span."""
    x = x.double()
    below = (x[..., None, :] < x[..., :, None]).sum(-1, dtype=torch.float64)
    equal = (x[..., None, :] == x[..., :, None]).sum(-1, dtype=torch.float64)
    return below + (equal + 1) / 2


def spearman(x: Float[Tensor, "... n"], y: Float[Tensor, "... n"]) -> Float[Tensor, ...]:
    """Spearman's rho along the last axis (NaN when either side is constant or n < 2)."""
    rx, ry = average_ranks(x), average_ranks(y)
    return _correlation(rx - rx.mean(-1, keepdim=True), ry - ry.mean(-1, keepdim=True))


def masked_spearman(x: Float[Tensor, "... n"], y: Float[Tensor, "... n"],
                    selected: Bool[Tensor, "... n"]) -> Float[Tensor, ...]:
    """Spearman's rho along the last axis over the entries where ``selected`` holds (NaN when either side is
    constant over them or fewer than 2 are selected): each row's ``spearman(x[selected], y[selected])`` bit for bit,
    since ranks are multiples of 1/2 and every sum of them is exact."""
    return _correlation(_centred_ranks(x, selected), _centred_ranks(y, selected))


def _centred_ranks(x: Float[Tensor, "... n"], selected: Bool[Tensor, "... n"]) -> Float[Tensor, "... n"]:
    """:func:`average_ranks` among the selected entries minus their mean, (n + 1) / 2; 0 at the others."""
    x = x.double()
    among = selected[..., None, :]
    below = ((x[..., None, :] < x[..., :, None]) & among).sum(-1, dtype=torch.float64)
    equal = ((x[..., None, :] == x[..., :, None]) & among).sum(-1, dtype=torch.float64)
    mean = (selected.sum(-1, keepdim=True, dtype=torch.float64) + 1) / 2
    return torch.where(selected, below + (equal + 1) / 2 - mean, 0.0)


def _correlation(rx: Float[Tensor, "... n"], ry: Float[Tensor, "... n"]) -> Float[Tensor, ...]:
    """Pearson correlation along the last axis of centred ``rx`` and ``ry`` (NaN when either is all 0)."""
    denominator = (rx.square().sum(-1) * ry.square().sum(-1)).sqrt()
    return torch.where(denominator > 0, (rx * ry).sum(-1) / denominator, torch.full_like(denominator, float("nan")))


def cooccurring_spearman(values: Float[Tensor, "... query key"], counts: Float[Tensor, "... query key"],
                         ) -> tuple[Float[Tensor, "... query"], Int[Tensor, "... query"]]:
    """``(rho, n_keys)``: per query, the Spearman of ``values`` with ``counts`` over the keys with ``counts > 0``
    (NaN when either is tied over them or fewer than 2 are), and how many keys that is.

    For one head's attention values and co-occurrence counts this is :func:`cooccurrence_ordering`'s ``spearman``
    (in float64) and ``n_keys`` without ``keys``; leading axes (e.g. bootstrap resamples of a probe's state) are
    computed at once. Each query ranks only the keys some index of the leading axes saw with it."""
    selected = counts > 0
    rho = torch.full(selected.shape[:-1], float("nan"), dtype=torch.float64)
    for q in range(selected.shape[-2]):
        seen = selected[..., q, :].reshape(-1, selected.shape[-1]).any(0)
        rho[..., q] = masked_spearman(values[..., q, seen], counts[..., q, seen], selected[..., q, seen])
    return rho, selected.sum(-1)


def kendall_tau_b(x: Float[Tensor, "... n"], y: Float[Tensor, "... n"]) -> Float[Tensor, ...]:
    """Kendall's tau-b along the last axis (ties corrected; NaN when either side is constant)."""
    sx = torch.sign(x.double()[..., :, None] - x.double()[..., None, :])
    sy = torch.sign(y.double()[..., :, None] - y.double()[..., None, :])
    denominator = (sx.abs().sum((-1, -2)) * sy.abs().sum((-1, -2))).sqrt()
    return torch.where(denominator > 0, (sx * sy).sum((-1, -2)) / denominator,
                       torch.full_like(denominator, float("nan")))


@dataclass(frozen=True)
class CooccurrenceOrdering(ProbeResult, HeadMapDisplay):
    """Rank correlation of attention with co-occurrence per (layer, head, query token).

    ``spearman``, ``kendall``: [layer head query]; ``n_keys``: [query] how many keys were ranked;
    ``measure``: the attention measure; ``source``: "corpus" (counts of the probed tokens) or "given".
    """

    query_tokens: Tensor
    spearman: Tensor
    kendall: Tensor
    n_keys: Tensor
    measure: str
    source: str

    def head_maps(self) -> list[HeadMap]:
        """Spearman and Kendall correlations averaged over the query tokens with a defined value (0 = no
        ordering by co-occurrence)."""
        return [HeadMap("Spearman (mean over queries)", self.spearman.double().nanmean(-1), 0.0, "rank correlation"),
                HeadMap("Kendall (mean over queries)", self.kendall.double().nanmean(-1), 0.0, "rank correlation")]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head, query token)."""
        import pandas as pd

        n_layers, n_heads, n_q = self.spearman.shape
        rows = [
            {"layer": layer, "head": h, "query_token": int(self.query_tokens[q]),
             "spearman": float(self.spearman[layer, h, q]), "kendall": float(self.kendall[layer, h, q]),
             "n_keys": int(self.n_keys[q])}
            for layer in range(n_layers) for h in range(n_heads) for q in range(n_q)
        ]
        return pd.DataFrame(rows)


def cooccurrence_ordering(
    attention: KeyTokenAttention,
    cooccurrence: Float[Tensor, "query key"] | None = None,
    *,
    keys: Sequence[int] | Mapping[int, Sequence[int]] | None = None,
    measure: Literal["per_occurrence", "mass", "distance_matched"] = "per_occurrence",
) -> CooccurrenceOrdering:
    """Spearman and Kendall between attention on key tokens and their co-occurrence with each query.

    ``cooccurrence`` is aligned with ``attention.query_tokens`` x ``attention.key_tokens`` (counts
    or probabilities; ``None`` uses the counts of the tokens the probe saw). ``keys`` restricts the
    ranked key tokens: one list for every query, or ``{query token: list}``. Keys that never
    co-occurred with the query in the probed data are left out.

    Example::

        ordering = cooccurrence_ordering(result, data_probs, keys={30: distinct_tokens})
        ordering.spearman[0, 0]
    """
    values = _measure_values(attention, measure)
    n_q, n_k = attention.occurrences.shape
    source = "corpus" if cooccurrence is None else "given"
    reference = attention.occurrences if cooccurrence is None else torch.as_tensor(cooccurrence)
    if tuple(reference.shape) != (n_q, n_k):
        raise InputError(
            f"cooccurrence must be [query, key] = {(n_q, n_k)} (aligned with the probe's query_tokens and "
            f"key_tokens); got {tuple(reference.shape)}."
        )
    n_layers, n_heads = values.shape[:2]
    rho = torch.full((n_layers, n_heads, n_q), float("nan"), dtype=torch.float64)
    tau = rho.clone()
    n_keys = torch.zeros(n_q, dtype=torch.long)
    key_position = {int(t): i for i, t in enumerate(attention.key_tokens)}
    for q in range(n_q):
        selected = attention.occurrences[q] > 0
        subset = keys.get(int(attention.query_tokens[q])) if isinstance(keys, Mapping) else keys
        if subset is not None:
            unknown = [int(k) for k in subset if int(k) not in key_position]
            if unknown:
                raise InputError(f"keys {unknown[:10]} were not tracked by the probe (its key_tokens).")
            in_subset = torch.zeros(n_k, dtype=torch.bool)
            in_subset[[key_position[int(k)] for k in subset]] = True
            selected &= in_subset
        n_keys[q] = int(selected.sum())
        if n_keys[q] >= 2:
            x = values[:, :, q][:, :, selected]
            y = reference[q][selected].double().expand_as(x)
            rho[:, :, q], tau[:, :, q] = spearman(x, y), kendall_tau_b(x, y)
    return CooccurrenceOrdering(
        provenance=attention.provenance, query_tokens=attention.query_tokens, spearman=rho.float(),
        kendall=tau.float(), n_keys=n_keys, measure=measure, source=source,
    )


def _measure_values(attention: KeyTokenAttention, measure: str) -> Tensor:
    if measure not in ("per_occurrence", "mass", "distance_matched"):
        raise ConfigError(f"measure must be 'per_occurrence', 'mass' or 'distance_matched'; got {measure!r}.")
    values: Tensor | None = getattr(attention, measure)
    if values is None:
        raise InputError("This attention result has no distance-matched values; probe with "
                         "KeyTokenAttentionProbe(..., distance_matched=True).")
    return ranked_matched(values) if measure == "distance_matched" else values.double()


def ranked_matched(matched: Float[Tensor, ...]) -> Float[Tensor, ...]:
    """Distance-matched attention as the orderings rank it: float64, rounded to 4 decimals. The ratios lie near 1
    and the float32 rounding of attention weights (~1e-7) is not an ordering (uniform attention would otherwise
    rank keys by how their positions round)."""
    return torch.round(matched.double() * MATCHED_DECIMALS) / MATCHED_DECIMALS


def ordering_null(
    attention: KeyTokenAttention,
    *,
    measure: Literal["per_occurrence", "mass", "distance_matched"] = "distance_matched",
    min_keys: int = 3,
    n_permutations: int = 1000,
    seed: int = 0,
) -> Float[Tensor, "permutation layer head"]:
    """Mean Spearman over query tokens per head when each query's co-occurrence counts are shuffled among its keys.

    Uses the query tokens with at least ``min_keys`` co-occurring keys, as the observed statistic
    ``cooccurrence_ordering(attention, measure=measure).spearman[..., n_keys >= min_keys].nanmean(-1)``
    does; queries whose attention values are all tied (NaN rho) are skipped the same way.
    Example: ``(ordering_null(result) >= observed).float().mean(0)`` is a permutation p-value per head.
    """
    values = _measure_values(attention, measure)
    generator = torch.Generator().manual_seed(seed)
    n_layers, n_heads = values.shape[:2]
    total = torch.zeros(n_permutations, n_layers, n_heads, dtype=torch.float64)
    count = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    ranked = 0
    for q in range(attention.occurrences.shape[0]):
        selected = attention.occurrences[q] > 0
        n = int(selected.sum())
        if n < max(2, min_keys):
            continue
        ranked += 1
        rx = average_ranks(values[:, :, q][:, :, selected])
        rx = rx - rx.mean(-1, keepdim=True)
        rx_norm = rx.square().sum(-1).sqrt()
        ry = average_ranks(attention.occurrences[q][selected])
        ry = ry - ry.mean()
        if float(ry.square().sum()) == 0:
            continue  # constant co-occurrence: rho is NaN for every head, as in the observed statistic
        order = torch.rand(n_permutations, n, generator=generator).argsort(dim=1)
        shuffled = ry[order] / ry.square().sum().sqrt()          # [permutation key]
        finite = rx_norm > 0
        rho = torch.einsum("lhk,pk->plh", rx / rx_norm.clamp_min(1e-300)[..., None], shuffled)
        total += torch.where(finite, rho, torch.zeros_like(rho))
        count += finite.double()
    if not ranked:
        raise InputError(f"No query token has {min_keys} or more co-occurring keys; probe more text.")
    return total / count  # NaN for a head whose attention is tied on every query (rho undefined)


def cooccurrence_probability(counts: Float[Tensor, "query key"]) -> Float[Tensor, "query key"]:
    """``P(key | query)``: counts normalised over the keys of each query (rows without counts stay 0)."""
    totals = counts.sum(-1, keepdim=True)
    return torch.where(totals > 0, counts / totals.clamp_min(1e-300), torch.zeros_like(counts))

