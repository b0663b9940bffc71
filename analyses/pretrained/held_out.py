"""Held-out statistics of the pretrained suite: a best head chosen on one half of the batches, measured on the other.

Each function takes the selection half's result (where the best head is picked) and the estimation
half's per-batch state (where it is measured), and returns a :class:`HeldOut` with a bootstrap interval
and a one-sided p-value against its null, so neither is biased by the search over heads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import Tensor

from probes.attention.key_token_attention import KeyTokenAttention
from probes.attention.topic_attention import TopicAttention
from probes.core.errors import InputError
from probes.stats.bootstrap import bootstrap_draws, bootstrap_interval, percentile_interval
from probes.stats.nulls import permutation_p_value
from probes.text.cooccurrence import cooccurrence_ordering, ordering_null

MIN_RANKED_KEYS = 3


@dataclass(frozen=True)
class HeldOut:
    """A statistic of one head (or of all heads), chosen on the selection half and measured on the other.

    ``p_value`` is one-sided (greater than the null); ``n_units``: the units its interval resamples (the
    estimation half's batches, or the query tokens of the ordering).
    """

    value: float
    ci: tuple[float, float]
    null_value: float
    p_value: float
    head: tuple[int, int] | None = None
    selection_value: float = float("nan")
    n_units: int | None = None

    def chosen_head(self) -> tuple[int, int]:
        """``(layer, head)`` of a statistic of one chosen head (an error for a statistic over all heads)."""
        if self.head is None:
            raise InputError("This held-out statistic is over all heads; it has no chosen head.")
        return self.head


def halves(batches: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(selection half, estimation half): the even and the odd batches."""
    return list(batches[0::2]), list(batches[1::2])


def _flat_argmax(table: Tensor) -> tuple[int, int]:
    flat = int(torch.nan_to_num(table.flatten().double(), nan=float("-inf")).argmax())
    return flat // table.shape[1], flat % table.shape[1]


class ScoreTables(Protocol):
    """What :func:`held_out_head_score` reads of its selection: a [layer head] table per kind (a
    :class:`~probes.HeadScores`, or any record with such ``scores``)."""

    @property
    def scores(self) -> Mapping[str, Tensor]: ...


def held_out_head_score(kind: str, selection: ScoreTables, per_batch: Mapping[str, Tensor], *, n_boot: int,
                        seed: int) -> HeldOut:
    """Best head of ``kind`` on the selection half; its score on the estimation half's batches, a bootstrap CI
    over those batches, and a bootstrap p-value of (score - uniform-attention chance) > 0."""
    layer, head = _flat_argmax(selection.scores[kind])
    units = {k: per_batch[f"{kind}/{k}"] for k in ("mass", "rows_with_target", "chance_mass")}

    def score_and_excess(s: Mapping[str, Tensor]) -> Tensor:
        mass = s["mass"][:, layer, head]
        return torch.stack([mass, mass - s["chance_mass"]], -1) / s["rows_with_target"][:, None]

    (value, excess), draws = bootstrap_draws(units, score_and_excess, n_boot=n_boot, seed=seed)
    low, high = percentile_interval(draws[:, 0])
    p_value = permutation_p_value(torch.tensor(0.0), draws[:, 1], alternative="less")  # share of draws <= 0
    return HeldOut(float(value), (float(low), float(high)), float(value - excess), float(p_value), (layer, head),
                   float(selection.scores[kind][layer, head]), n_units=int(units["mass"].shape[0]))


def topic_ratio(state: Mapping[str, Tensor]) -> Tensor:
    """Same/different-topic ratio per head from (resampled) summed TopicAttentionProbe state [draw layer head]."""
    same = state["same_topic/mass"] / state["same_topic/pairs"][..., None, None]
    different = state["different_topic/mass"] / state["different_topic/pairs"][..., None, None]
    return same / different


TOPIC_UNIT_KEYS = ("same_topic/mass", "same_topic/pairs", "different_topic/mass", "different_topic/pairs")


def held_out_topic(selection: TopicAttention, estimation: TopicAttention, per_batch: Mapping[str, Tensor], *,
                   n_boot: int, seed: int) -> HeldOut:
    """The head with the largest same-minus-different-topic gap on the selection half (a ratio alone favours
    heads that barely attend to topic words); its ratio on the estimation half with a bootstrap CI over
    batches and the label-permutation null at that head."""
    layer, head = _flat_argmax(selection.mean["same_topic"] - selection.mean["different_topic"])
    units = {k: per_batch[k] for k in TOPIC_UNIT_KEYS}
    _, low, high = bootstrap_interval(units, lambda s: topic_ratio(s)[:, layer, head], n_boot=n_boot, seed=seed)
    value = float(estimation.ratio[layer, head])
    null = estimation.null_ratio[:, layer, head]
    return HeldOut(value, (float(low), float(high)), float(null.nanmean()),
                   float(permutation_p_value(torch.tensor(value), null)), (layer, head),
                   float(selection.ratio[layer, head]), n_units=int(units["same_topic/pairs"].shape[0]))


def mean_null_ratio(whole: TopicAttention) -> Tensor:
    """The null's same/different-topic ratio averaged over every head, per permutation [permutation]."""
    return whole.null_ratio.double().flatten(1).nanmean(1)


def topic_mean_over_heads(whole: TopicAttention, per_batch: Mapping[str, Tensor], *, n_boot: int,
                          seed: int) -> HeldOut:
    """Same/different-topic ratio averaged over every head (no search): all batches, bootstrap over batches,
    label-permutation null of the same average."""
    units = {k: per_batch[k] for k in TOPIC_UNIT_KEYS}
    _, low, high = bootstrap_interval(units, lambda s: topic_ratio(s).flatten(1).nanmean(1), n_boot=n_boot,
                                      seed=seed)
    value = float(whole.ratio.double().nanmean())
    null = mean_null_ratio(whole)
    return HeldOut(value, (float(low), float(high)), float(null.mean()),
                   float(permutation_p_value(torch.tensor(value), null)),
                   n_units=int(units["same_topic/pairs"].shape[0]))


def ordering_per_head(attention: KeyTokenAttention, *, more: str = "probe more text") -> tuple[Tensor, Tensor]:
    """Distance-matched Spearman [layer head query] and the mask of query tokens with enough ranked keys; too few
    is an InputError ending with ``more`` (how the caller's command probes more text)."""
    ordering = cooccurrence_ordering(attention, measure="distance_matched")
    ranked = ordering.n_keys >= MIN_RANKED_KEYS
    if not bool(ranked.any()):
        raise InputError(f"Too few co-occurring topic tokens to rank; {more}.")
    return ordering.spearman.double(), ranked


def held_out_ordering(selection: KeyTokenAttention, estimation: KeyTokenAttention, *, n_boot: int,
                      n_permutations: int, seed: int, more: str = "probe more text") -> HeldOut:
    """The head whose distance-matched attention follows co-occurrence best on the selection half; on the
    estimation half its mean Spearman over query tokens, a bootstrap CI over query tokens, and the null with
    co-occurrence shuffled among each query's keys."""
    rho_a, ranked_a = ordering_per_head(selection, more=more)
    layer, head = _flat_argmax(rho_a[:, :, ranked_a].nanmean(-1))
    rho_b, ranked_b = ordering_per_head(estimation, more=more)
    values = rho_b[layer, head, ranked_b]
    finite = torch.isfinite(values)
    units = {"rho": torch.where(finite, values, 0.0), "n": finite.double()}
    value, low, high = bootstrap_interval(units, lambda s: s["rho"] / s["n"], n_boot=n_boot, seed=seed)
    null = ordering_null(estimation, min_keys=MIN_RANKED_KEYS, n_permutations=n_permutations, seed=seed)[:, layer, head]
    return HeldOut(float(value), (float(low), float(high)), float(null.mean()),
                   float(permutation_p_value(value, null)), (layer, head),
                   float(rho_a[layer, head, ranked_a].nanmean()), n_units=int(finite.sum()))


@dataclass(frozen=True)
class CooccurrenceSummary:
    """Mean Spearman over heads and query tokens: distance-matched (the finding's measure) and per occurrence
    (confounded by position; kept for comparison), the held-out best head with its interval, null and p-value,
    and how many query and key tokens were ranked."""

    spearman_distance_matched_mean: float
    spearman_per_occurrence_mean: float
    best_head: tuple[int, int]
    best_head_spearman: float
    best_head_ci: tuple[float, float]
    null_value: float
    p_value: float
    query_tokens: int
    key_tokens: int


def cooccurrence_summary(whole: KeyTokenAttention, best: HeldOut) -> CooccurrenceSummary:
    """The :class:`CooccurrenceSummary` of the whole ordering probe and its held-out best head."""
    matched, ranked = ordering_per_head(whole)
    raw = cooccurrence_ordering(whole).spearman.double()
    return CooccurrenceSummary(float(matched[:, :, ranked].nanmean()), float(raw[:, :, ranked].nanmean()),
                               best.chosen_head(), best.value, best.ci, best.null_value, best.p_value,
                               int(ranked.sum()), int(whole.key_tokens.numel()))
