"""The co-occurrence ordering's units in the settling rounds (:mod:`analyses.pretrained.settle`): fresh ranked query
tokens measured on fresh text.

The first pass's ordering (:func:`analyses.pretrained.held_out.held_out_ordering`) resamples *query tokens*: for
each of the most frequent topic-labelled tokens that co-occurs with at least ``MIN_RANKED_KEYS`` tracked keys, the
Spearman correlation of the best head's distance-matched attention on its keys with their co-occurrence counts.
More text of the same query tokens would not give new independent units (a token's own ordering does not change
with more text), so every round takes **query tokens no earlier pass used as queries**: the most frequent labelled
tokens of the round's own batches that are neither the first pass's query tokens nor an earlier round's (every
query token a round tracks is spent, ranked or not, so no token's value is measured twice). Its keys are those
queries and the round's ``n_keys`` most frequent labelled tokens. Only the first pass's best head is read, by a
:class:`~probes.attention.key_token_attention.KeyTokenAttentionProbe` on that head's layer alone, on batches no
earlier pass read; a unit is a ranked query token with a defined Spearman there, as in the first pass.

What the sequence then covers is the mean ordering over the query tokens measured so far, which are rarer with
every round (the frequent ones are spent first): the threshold, null and control stay the first pass's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analyses.pretrained.held_out import MIN_RANKED_KEYS
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe
from probes.core.batch import TokenBatch
from probes.core.errors import InputError
from probes.text.cooccurrence import cooccurrence_ordering

ORDERING_UNIT_KEYS = ("rho", "n")
MAX_QUERIES = 300
"""At most this many query tokens per round (the probe keeps [head query key distance-bin] sums)."""


@dataclass(frozen=True)
class OrderingSetup:
    """What the ordering's rounds need from the first pass: ``used_queries`` (its query tokens, never units
    again), ``n_keys`` (how many frequent labelled tokens a round tracks as keys: the first pass's
    ``n_pair_tokens``) and ``batches_per_unit`` (text batches per ranked query token at the first pass, what
    turns the units a round wants into batches until a round has measured its own)."""

    used_queries: tuple[int, ...] = ()
    n_keys: int = 100
    batches_per_unit: float = 1.0

    def __post_init__(self) -> None:
        if self.n_keys < 1 or not self.batches_per_unit > 0:
            raise InputError(f"OrderingSetup needs n_keys >= 1 and batches_per_unit > 0; got {self.n_keys} and "
                             f"{self.batches_per_unit}.")


def labelled_counts(batches: Sequence[TokenBatch], labels: Tensor) -> Tensor:
    """How often each topic-labelled token occurs at the valid positions of ``batches`` (0 for unlabelled ones)."""
    counts = torch.zeros(labels.shape[0], dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch.tokens[batch.valid].cpu(), minlength=labels.shape[0])[: labels.shape[0]]
    counts[labels < 0] = 0
    return counts


def round_tokens(batches: Sequence[TokenBatch], labels: Tensor, used: Collection[int], n_queries: int,
                 n_keys: int) -> tuple[list[int], list[int]]:
    """``(queries, keys)`` of a round: the ``n_queries`` most frequent labelled tokens of ``batches`` not in
    ``used`` (at most :data:`MAX_QUERIES`), and those queries with the ``n_keys`` most frequent labelled tokens."""
    counts = labelled_counts(batches, labels)
    fresh = counts.clone()
    if used:
        fresh[torch.tensor(sorted(used), dtype=torch.long)] = 0
    n_queries = min(n_queries, MAX_QUERIES, int((fresh > 0).sum()))
    queries = [int(t) for t in fresh.topk(n_queries).indices] if n_queries else []
    frequent = [int(t) for t in counts.topk(min(n_keys, int((counts > 0).sum()))).indices]
    return sorted(queries), sorted(set(queries) | set(frequent))


def ordering_probe(queries: Sequence[int], keys: Sequence[int], layer: int) -> KeyTokenAttentionProbe:
    """The one probe the ordering's round needs: distance-matched attention of ``queries`` on ``keys`` at
    ``layer`` (the first pass's best head's layer)."""
    return KeyTokenAttentionProbe(queries, keys, query_position="all", layers=[layer], distance_matched=True)


def ordering_units(result: KeyTokenAttention, head: int) -> dict[str, Tensor]:
    """The round's units: per ranked query token (``MIN_RANKED_KEYS`` co-occurring keys or more) with a defined
    Spearman at ``head`` of the probed layer, ``rho`` and ``n`` = 1 (the statistic is ``sum rho / sum n``)."""
    ordering = cooccurrence_ordering(result, measure="distance_matched")
    rho = ordering.spearman.double()[0, head]
    keep = (ordering.n_keys >= MIN_RANKED_KEYS) & torch.isfinite(rho)
    return {"rho": rho[keep], "n": torch.ones(int(keep.sum()), dtype=torch.float64)}


def ordering_mean(state: Mapping[str, Tensor]) -> Tensor:
    """The ordering statistic on summed (resampled) units: mean Spearman over query tokens."""
    return state["rho"] / state["n"]
