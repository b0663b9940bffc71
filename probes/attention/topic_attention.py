"""Same-topic vs different-topic vs same-token attention per (layer, head), from token topic labels.

Labels: ``token_topics[v]`` is the topic of vocabulary id ``v`` (``-1`` = no topic, e.g. special
tokens, stop words, or words LDA did not assign); ``has_topic`` (optional, bool [d_vocab]) marks
more ids as unlabelled. A position is *labelled* when it is valid (see
:class:`~probes.core.batch.TokenBatch`) and its token has a topic.

Pairs: a query ``q`` and a key ``k != q`` that are both labelled and that the query can see
(``k <= q`` for causal models, every key for bidirectional ones; keys with attention_mask 0 are
never visible). Every pair falls into exactly one category:

- ``same_token``: ``tok[k] == tok[q]``;
- ``same_topic``: same topic, different token;
- ``different_topic``: different topics.

The score of a category is the mean attention weight over its pairs (over all batches)::

    mean[l, h] = sum_{(b, q, k) in category} A[b, l, h, q, k] / #category

``chance`` is the same mean for a head that attends uniformly to the keys its query can see
(``1 / #visible(q)`` per pair), and ``ratio = same_topic / different_topic`` (chance ratio ~1).
``by_topic[l, h, s, t]`` is the mean attention from topic-``s`` queries to topic-``t`` keys over
all pairs. Everything is a running sum, so batches stream and probes merge exactly.

Label-permutation null (``n_permutations > 0``): the topic labels are shuffled among the labelled
vocabulary entries (topic sizes kept, :func:`probes.stats.nulls.label_permutations`), and for every
permutation the same pass sums the attention on the pairs that the shuffled labels call
same-topic. ``same_token`` pairs and the set of counted pairs do not depend on the labels, so
``null_mean[kind][p]`` is exactly the ``mean[kind]`` that permutation ``p`` would give. ``permutation_start``
makes the probe's permutations ``start, start + 1, ...`` of the seed's one sequence, so a null drawn in groups
(one pass each, :mod:`probes.stats.sequential`) uses the same permutations as one pass drawing them all. Only the
labelled pairs of distinct tokens are gathered, so the cost is [pairs x permutations] per head,
not another pass over the [q_pos k_pos] grid per permutation. Where the labelled vocabulary is small (a toy's), the
pairs' attention is first summed per (query entry, key entry) cell and the permutations read the cells: for one
head, ``sum over cells of mass[e, f] * [topic_p(e) == topic_p(f)] = sum_t sum_e O_p[e, t] (mass O_p)[e, t]`` with
``O_p`` the one-hot topics of permutation ``p``, one matrix product for all of them (the same sums in another
order, float64 either way).

Distance-matched null (``null="distance"``): instead of relabelling the vocabulary, each permutation shuffles which
labelled distinct-token pairs of a row are same-topic among the pairs of that row at the same distance ``q - k``
whose queries sit in the same doubling bucket of positions (0, 1, 2-3, 4-7, ...: a query's weights are normalised
over the keys its row lets it see, so rows of few keys weigh each pair more); each such stratum keeps its number of
same-topic pairs. Text keeps words of one topic close together
and attention prefers some distances (recent tokens), so a head that reads positions only, a random-weight model
among them, gives a same/different ratio away from 1; this null keeps the distances and breaks only the topics, so
such a head lands inside it. Shuffling vocabulary labels breaks both and puts its null at about 1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from mechprobe.validation import integer
from probes.attention.head_scores import visible_keys
from probes.attention.topic_pairs import check_pattern_batch, check_token_topics, topic_pair_masks, visible_pairs
from probes.core.attention_rows import LayerAttention, float_at_least_32
from probes.core.attention_terms import AttentionTerms, TermSums
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ProbeStateError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.probe import LayerwiseProbe
from probes.core.result import ProbeResult, Provenance
from probes.core.runner import run_probes
from probes.core.token_pairs import equal_pairs, per_query_counts
from probes.display.head_maps import HeadMap, HeadMapDisplay
from probes.stats.nulls import label_permutations

if TYPE_CHECKING:
    import pandas as pd

TOPIC_PAIR_KINDS = ("same_topic", "different_topic", "same_token")
"""The (query, key) pair kinds whose mean attention :class:`TopicAttention` keeps (``mean[kind]``)."""
TOPIC_NULLS = ("vocabulary", "distance")
NULL_CHUNK_ENTRIES = 8_000_000  # pairs x permutations held at once while scoring the null


@dataclass(frozen=True)
class TopicAttention(ProbeResult, HeadMapDisplay):
    """Mean attention per pair category: ``mean[kind]`` is [n_layers, n_heads] (see module docstring).

    ``pairs[kind]`` counts the pairs, ``chance[kind]`` is the uniform-attention mean,
    ``ratio`` = same_topic / different_topic per head and ``chance_ratio`` its uniform value.
    ``by_topic`` [n_layers, n_heads, n_topics, n_topics] is the mean attention between topics
    (NaN where no pair was seen) and ``by_topic_pairs`` [n_topics, n_topics] the pair counts.
    ``null_mean[kind]`` [permutation, n_layers, n_heads] holds ``same_topic`` and ``different_topic``
    under each label permutation (empty without permutations).
    """

    mean: dict[str, Tensor]
    pairs: dict[str, int]
    chance: dict[str, float]
    ratio: Tensor
    chance_ratio: float
    by_topic: Tensor
    by_topic_pairs: Tensor
    null_mean: dict[str, Tensor] = dataclasses.field(default_factory=dict)

    @property
    def null_ratio(self) -> Tensor:
        """same/different-topic ratio per head under each label permutation [permutation layer head]."""
        if not self.null_mean:
            raise InputError("This result has no permutation null; probe with "
                             "TopicAttentionProbe(..., n_permutations=N).")
        return self.null_mean["same_topic"] / self.null_mean["different_topic"]

    def top_heads(self, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` heads with the highest same/different-topic ratio as ``(layer, head, ratio)``."""
        values = torch.nan_to_num(self.ratio.flatten(), nan=float("-inf"))
        top, flat = values.topk(min(k, values.numel()))
        n_heads = self.ratio.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(self.ratio.flatten()[i])) for _, i in zip(top, flat)]

    def head_maps(self) -> list[HeadMap]:
        """The same/different-topic ratio, then the mean attention of each pair kind, each with its chance."""
        return [HeadMap("same / different topic", self.ratio, self.chance_ratio, "ratio"),
                *(HeadMap(kind.replace("_", " "), self.mean[kind], self.chance[kind], "attention")
                  for kind in TOPIC_PAIR_KINDS)]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head) with the three means, the ratio and the chance levels."""
        import pandas as pd

        n_layers, n_heads = self.ratio.shape
        rows = []
        for layer in range(n_layers):
            for head in range(n_heads):
                row: dict[str, Any] = {"layer": layer, "head": head}
                for kind in TOPIC_PAIR_KINDS:
                    row[kind] = float(self.mean[kind][layer, head])
                    row[f"{kind}_chance"] = self.chance[kind]
                row["ratio"] = float(self.ratio[layer, head])
                row["chance_ratio"] = self.chance_ratio
                rows.append(row)
        return pd.DataFrame(rows)


class TopicAttentionProbe(LayerwiseProbe[TopicAttention]):
    """Accumulates same-topic / different-topic / same-token attention over batches.

    Example::

        probe = TopicAttentionProbe(token_topics)          # [d_vocab], -1 = no topic
        (result,) = probes.run_probes(model, [probe], batches)
        result.ratio                                         # [n_layers, n_heads]
    """

    def __init__(self, token_topics: Tensor, has_topic: Tensor | None = None, *, n_permutations: int = 0,
                 permutation_seed: int = 0, null: str = "vocabulary", permutation_start: int = 0) -> None:
        super().__init__()
        self.token_topics = check_token_topics(token_topics, has_topic)
        self.has_topic = has_topic
        self.n_topics = int(self.token_topics.max()) + 1
        self.n_permutations = integer("n_permutations", n_permutations, 0)
        self.permutation_seed = integer("permutation_seed", permutation_seed, 0)
        if null not in TOPIC_NULLS:
            raise ConfigError(f"null must be one of {', '.join(TOPIC_NULLS)}; got {null!r}.")
        self.null = null
        self.permutation_start = integer("permutation_start", permutation_start, 0)
        if null == "distance" and permutation_start:
            raise ConfigError("The distance-matched null draws its shuffles batch by batch, so it cannot start at a "
                              "later permutation; draw it in one pass (permutation_start=0).")
        self._permuted: tuple[Tensor, Tensor] | None = None  # see _permuted_labels; drawn on first use
        self._permuted_topics: Tensor | None = None  # see _cell_topics
        self._shuffles = torch.Generator().manual_seed(self.permutation_seed)  # the distance null's, batch by batch


    def _permuted_labels(self, device: torch.device) -> tuple[Tensor, Tensor]:
        """``(entry, permuted)``: each vocabulary id's index among the labelled ids (-1 if none), and
        the permuted topic of each labelled id [permutation, labelled entry]."""
        if self._permuted is None:
            labelled = self.token_topics >= 0
            entry = torch.full_like(self.token_topics, -1)
            entry[labelled] = torch.arange(int(labelled.sum()))
            permuted = label_permutations(self.token_topics, self.n_permutations, seed=self.permutation_seed,
                                          start=self.permutation_start)
            # the null compares these for every pair and permutation: one byte each where the topics fit in one
            small = int(self.token_topics.max()) <= torch.iinfo(torch.int8).max
            self._permuted = (entry, permuted[:, labelled].to(torch.int8 if small else torch.int32))
        entry, permuted = self._permuted
        return entry.to(device), permuted.to(device)

    def _cell_topics(self, device: torch.device) -> Tensor | None:
        """Each labelled entry's topic under each permutation, one-hot ``[entry, permutation * topic]`` (float64),
        where the heads' cell sums and their product with it fit :data:`NULL_CHUNK_ENTRIES` (else None: the null
        scores pairs)."""
        _, permuted = self._permuted_labels(device)
        n_entries = permuted.shape[1]
        widest = max(n_entries, self.n_permutations * self.n_topics)
        if self.info.n_heads * n_entries * widest > NULL_CHUNK_ENTRIES:
            return None
        if self._permuted_topics is None:
            one_hot = torch.nn.functional.one_hot(permuted.T.long(), self.n_topics)  # [entry permutation topic]
            self._permuted_topics = one_hot.reshape(n_entries, -1).to(torch.float64)
        return self._permuted_topics.to(device)

    def _same_topic_sums(self, cells: Tensor, topics: Tensor) -> Tensor:
        """``[head, permutation]``: each head's sum over (query entry, key entry) cells of ``cells`` ``[head,
        entry * entry]`` on the cells each permutation calls same-topic (``topics``: :meth:`_cell_topics`)."""
        n_entries = topics.shape[0]
        summed = cells.view(-1, n_entries, n_entries) @ topics  # [head entry permutation*topic]
        return (summed * topics).view(cells.shape[0], n_entries, self.n_permutations, self.n_topics).sum((1, 3))

    def _null_pairs(self, tokens: Tensor, distinct: Tensor) -> tuple[tuple[Tensor, Tensor, Tensor], list[Tensor]]:
        """The labelled distinct-token pairs ``(b, q, k)`` and, per chunk of them, which pairs each
        permutation calls same-topic [permutation, pair]; or, where :meth:`_cell_topics` fits, one tensor: each
        pair's (query entry, key entry) cell (see the module docstring)."""
        entry, permuted = self._permuted_labels(tokens.device)
        b, q, k = distinct.nonzero(as_tuple=True)
        query_entry, key_entry = entry[tokens[b, q]], entry[tokens[b, k]]
        topics = self._cell_topics(tokens.device)
        if topics is not None:
            n_entries = topics.shape[0]
            cell = query_entry.long() * n_entries + key_entry.long()
            counts = torch.bincount(cell, minlength=n_entries * n_entries).to(torch.float64)
            self._add("null/same_topic/pairs", self._same_topic_sums(counts[None], topics)[0])
            return (b, q, k), [cell]
        pairs = torch.zeros(self.n_permutations, dtype=torch.float64, device=tokens.device)
        step = max(1, NULL_CHUNK_ENTRIES // self.n_permutations)
        same_chunks = []
        for start in range(0, len(b), step):
            part = slice(start, start + step)
            same = permuted[:, query_entry[part]] == permuted[:, key_entry[part]]  # [perm pair]
            pairs += same.sum(1)
            same_chunks.append(same)
        self._add("null/same_topic/pairs", pairs)
        return (b, q, k), same_chunks

    def _distance_null_pairs(self, same_topic: Tensor, distinct: Tensor
                             ) -> tuple[tuple[Tensor, Tensor, Tensor], list[Tensor]]:
        """The labelled distinct-token pairs ``(b, q, k)``, ordered by stratum (row, distance and query bucket, see the
        module docstring), and per chunk of them (whole strata) which pairs each permutation calls same-topic: the
        observed flags shuffled among the pairs of each stratum."""
        b, q, k = distinct.nonzero(as_tuple=True)
        # the stratum: the row, the signed distance and the query's position in doubling buckets (0, 1, 2-3, 4-7,
        # ...), since a query's weights are normalised over the keys its row lets it see
        bucket = torch.floor(torch.log2(q.double() + 1)).long()
        shift = int(distinct.shape[1])  # q - k + shift >= 0 (a bidirectional query reads keys on both sides)
        stratum = ((b * 2 * shift + q - k + shift) * (int(bucket.max()) + 1 if len(q) else 1) + bucket)
        order = stratum.argsort(stable=True)
        b, q, k, stratum = b[order], q[order], k[order], stratum[order]
        same = same_topic[b, q, k].cpu()
        stratum = stratum.cpu()
        step = max(1, NULL_CHUNK_ENTRIES // self.n_permutations)
        chunks, start = [], 0
        while start < len(b):
            stop = min(len(b), start + step)
            if stop < len(b):  # end a chunk on a whole stratum (a stratum larger than a chunk is one chunk)
                cut = int(torch.searchsorted(stratum, stratum[stop : stop + 1])[0])
                stop = cut if cut > start else int(torch.searchsorted(stratum, stratum[start : start + 1],
                                                                      right=True)[0])
            local = stratum[start:stop] - stratum[start]
            keys = torch.rand(self.n_permutations, stop - start, generator=self._shuffles) + 2.0 * local.double()
            chunks.append(same[start:stop][keys.argsort(dim=1)].to(distinct.device))
            start = stop
        self._add("null/same_topic/pairs", torch.full((self.n_permutations,), float(same.sum()), dtype=torch.float64,
                                                       device=distinct.device))
        return (b, q, k), chunks

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> dict[str, Any]:
        """Per-query pair counts from per-topic key counts and the (sparse) same-token pairs, no ``[batch q k]``
        mask: for a labelled query of topic ``s``, its visible labelled keys but itself number ``n[t]`` per topic
        ``t``; same-token = its same-token pairs, same-topic = ``n[s]`` - same-token, different-topic =
        ``sum_t n[t] - n[s]`` (the categories of the module docstring)."""
        causal = check_pattern_batch(self.info, self.token_topics, first, batch)
        n_batch, n_pos = batch.tokens.shape
        topics = self._topics(batch)
        labelled = topics >= 0
        one_hot = self._one_hot(topics).to(torch.float64)  # [batch pos topic], zero rows for unlabelled positions
        seen = labelled if batch.attention_mask is None else labelled & batch.attention_mask.bool()
        keys = one_hot * seen[..., None]  # the labelled keys a query may see (attention_mask kept)
        per_topic = keys.cumsum(1) if causal else keys.sum(1, keepdim=True).expand_as(keys)
        per_topic = (per_topic - keys) * labelled[..., None]  # [batch q topic]: other keys, labelled queries only
        same_token = equal_pairs(batch.tokens, batch.tokens, labelled, seen, keys="before" if causal else "any_other")
        own_topic = (per_topic * one_hot).sum(-1)
        counts = {"same_token": per_query_counts(same_token, n_batch, n_pos).to(torch.float64)}
        counts["same_topic"] = own_topic - counts["same_token"]
        counts["different_topic"] = per_topic.sum(-1) - own_topic
        inverse_visible = 1.0 / visible_keys(batch.valid, causal, batch.attention_mask).clamp(min=1)  # [batch q]
        for kind in TOPIC_PAIR_KINDS:
            self._add(f"{kind}/pairs", counts[kind].sum())
            self._add(f"{kind}/chance_mass", (counts[kind] * inverse_visible).sum())
        self._add("by_topic/pairs", torch.einsum("bqs,bqt->st", one_hot, per_topic))
        b, q = labelled.nonzero(as_tuple=True)
        context = {"one_hot": one_hot, "keys": keys.to(torch.float32), "labelled": (b, q), "causal": causal,
                   "same_token": same_token, "has_pairs": {kind: counts[kind] > 0 for kind in TOPIC_PAIR_KINDS},
                   "has_topic_pairs": per_topic > 0}
        if self.n_permutations:  # the null scores every labelled pair of distinct tokens: those need the grid
            masks = topic_pair_masks(batch.tokens, topics, visible_pairs(batch, causal))
            distinct = masks["same_topic"] | masks["different_topic"]
            context["null"] = (self._distance_null_pairs(masks["same_topic"], distinct) if self.null == "distance"
                               else self._null_pairs(batch.tokens, distinct))
        return context

    def _fold_topic_mass(self, index: int, mass: Tensor, itself: Tensor, same_token: Tensor, start: int,
                         context: dict[str, Any]) -> None:
        """Fold query rows ``start ...`` of one layer from ``mass[b, h, q, t]`` (attention of each query to the
        visible labelled keys of topic ``t``), ``itself[b, h, q]`` (each labelled query's weight on itself) and
        ``same_token[b, h, q]`` (its weight on its same-token pairs): the decomposition of :meth:`_batch_context`.
        A row without pairs of a kind adds exactly 0 to it (not a rounding residue of the subtraction)."""
        n_layers = self.info.n_layers
        rows = slice(start, start + mass.shape[2])
        one_hot = context["one_hot"][:, rows].to(mass.dtype)  # [batch q topic]
        has = {kind: mask[:, None, rows] for kind, mask in context["has_pairs"].items()}  # [batch 1 q]
        own_topic = (mass * one_hot[:, None]).sum(-1)  # [batch head q]
        per_row = {
            "same_token": same_token,
            "same_topic": torch.where(has["same_topic"], own_topic - same_token - itself, 0.0),
            "different_topic": torch.where(has["different_topic"], mass.sum(-1) - own_topic, 0.0),
        }
        for kind, values in per_row.items():  # reduced over keys in float32; rows summed in float64
            self._add_at(f"{kind}/mass", index, n_layers, values.double().sum((0, 2)))
        to_topics = torch.where(context["has_topic_pairs"][:, None, rows], mass - itself[..., None] * one_hot[:, None],
                                0.0)  # [batch head q topic]
        self._add_at("by_topic/mass", index, n_layers,
                     torch.einsum("bqs,bhqt->hst", one_hot.double(), to_topics.double()))

    def _same_token_rows(self, values: Callable[[Tensor, Tensor, Tensor], Tensor], start: int, n_rows: int,
                         context: dict[str, Any]) -> Tensor:
        """Each query row's weight on its same-token pairs ``[batch head rows]`` for rows ``start ...``, from
        ``values(b, q, k) -> [pair head]`` (gathered from rows of the pattern, or from ``q . k``)."""
        b, q, k = context["same_token"]
        inside = (q >= start) & (q < start + n_rows)
        b, q, k = b[inside], q[inside], k[inside]
        n_batch, n_heads = context["one_hot"].shape[0], self.info.n_heads
        found = float_at_least_32(values(b, q, k))
        out = torch.zeros(n_batch * n_rows, n_heads, dtype=found.dtype, device=b.device)
        out.index_add_(0, b * n_rows + q - start, found)
        return out.view(n_batch, n_rows, n_heads).transpose(1, 2)

    def _update_rows(self, index: int, rows: Tensor, start: int, batch: TokenBatch, context: dict[str, Any]) -> None:
        n_rows, n_keys = rows.shape[2], rows.shape[3]
        block = float_at_least_32(rows)
        if context["causal"]:  # only visible keys count, whatever a hand-made pattern holds above the diagonal
            above = torch.arange(start, start + n_rows, device=rows.device)[:, None] < torch.arange(
                n_keys, device=rows.device)
            block = block.masked_fill(above, 0.0)
        mass = block @ context["keys"][:, None].to(block.dtype)  # [batch head rows topic]; keys hold the mask
        b, q = context["labelled"]
        inside = (q >= start) & (q < start + n_rows)
        itself = torch.zeros(mass.shape[:3], dtype=block.dtype, device=rows.device)
        itself[b[inside], :, q[inside] - start] = block[b[inside], :, q[inside] - start, q[inside]]
        same_token = self._same_token_rows(lambda b, q, k: block[b, :, q - start, k], start, n_rows, context)
        self._fold_topic_mass(index, mass, itself, same_token.to(mass.dtype), start, context)
        if self.n_permutations:
            self._fold_null_rows(index, rows, start, context)

    def _fold_null_rows(self, index: int, rows: Tensor, start: int, context: dict[str, Any]) -> None:
        (b, q, k), same_chunks = context["null"]
        topics = self._cell_topics(rows.device) if self.null == "vocabulary" else None
        if topics is not None:  # the pairs' attention summed per (query entry, key entry) cell, then permuted
            (cell,) = same_chunks
            inside = (q >= start) & (q < start + rows.shape[2])
            values = rows[b[inside], :, q[inside] - start, k[inside]].to(torch.float64)  # [pair head]
            cells = torch.zeros(self.info.n_heads, topics.shape[0] ** 2, dtype=torch.float64, device=rows.device)
            cells.index_add_(1, cell[inside], values.T)
            self._add_at("null/same_topic/mass", index, self.info.n_layers, self._same_topic_sums(cells, topics))
            return
        mass = torch.zeros(self.info.n_heads, self.n_permutations, dtype=torch.float64, device=rows.device)
        first = 0
        for same in same_chunks:  # only the gathered pair values reach float64, never the whole pattern
            part = slice(first, first + same.shape[1])
            inside = (q[part] >= start) & (q[part] < start + rows.shape[2])
            values = rows[b[part][inside], :, q[part][inside] - start, k[part][inside]].to(torch.float64)
            mass += values.T @ same[:, inside].to(torch.float64).T
            first += same.shape[1]
        self._add_at("null/same_topic/mass", index, self.info.n_layers, mass)

    def key_columns(self, batch: TokenBatch) -> Tensor | None:
        """Each key's topic, one-hot ``[batch k_pos topic]`` (zero rows for unlabelled keys and padding); none when
        the permutation null needs the pattern's pairs anyway."""
        return None if self.n_permutations else self._one_hot(self._topics(batch)).float()

    def _topics(self, batch: TokenBatch) -> Tensor:
        """Each position's topic ``[batch pos]`` (-1 for unlabelled tokens and invalid positions)."""
        return torch.where(batch.valid, self.token_topics.to(batch.tokens.device)[batch.tokens], -1)

    def _one_hot(self, topics: Tensor) -> Tensor:
        """``topics`` one-hot ``[batch pos topic]`` (int64), zero rows where there is no topic."""
        return torch.nn.functional.one_hot(topics.clamp(min=0), self.n_topics) * (topics >= 0)[..., None]

    def _update_attention(self, index: int, attention: LayerAttention, batch: TokenBatch,
                          context: dict[str, Any]) -> None:
        """The topic columns' mass per query from the model's own attention call, each labelled query's entry on
        itself and the same-token entries gathered from ``q . k``: no row of the pattern is made."""
        if attention.column_mass is None:  # the null needs the pairs: rows, a block at a time
            super()._update_attention(index, attention, batch, context)
            return
        labelled = context["one_hot"].sum(-1).to(torch.float32)  # [batch q]: 1 for labelled queries
        itself = attention.diagonal() * labelled[:, None]
        same_token = self._same_token_rows(attention.entries, 0, attention.shape[2], context)
        self._fold_topic_mass(index, attention.column_mass, itself, same_token, 0, context)

    def _folds_terms(self) -> bool:
        return not self.n_permutations  # the permutation null scores every labelled pair: rows, a block at a time

    def _terms(self, batch: TokenBatch, context: dict[str, Any]) -> AttentionTerms:
        """The decomposition of :meth:`_fold_topic_mass` as linear terms. Entry sums: 0 the same-token pairs; 1 those
        of queries with same-topic pairs; 2 each such query on itself; ``3 + s`` each labelled query of topic ``s``
        with other keys of its topic, on itself. Column mass rows (``C`` topics each): queries of topic ``s`` with
        same-topic pairs; with different-topic pairs; all; with other keys of their own topic."""
        one_hot = context["one_hot"]  # [batch pos topic], zero rows for unlabelled positions
        has = context["has_pairs"]
        own = (context["has_topic_pairs"] & one_hot.bool()).any(-1)  # other visible keys of the query's own topic
        topic = one_hot.argmax(-1)
        tb, tq, tk = context["same_token"]
        lb, lq = context["labelled"]
        with_same, own_seen = has["same_topic"][lb, lq], own[lb, lq]
        on_same = has["same_topic"][tb, tq]
        parts = [((tb, tq, tk), 0), ((tb[on_same], tq[on_same], tk[on_same]), 1),
                 ((lb[with_same], lq[with_same], lq[with_same]), 2)]
        b, q, k = (torch.cat([entries[axis] for entries, _ in parts] + [(lb, lq, lq)[axis][own_seen]])
                   for axis in range(3))
        sums = torch.cat([torch.full_like(entries[0], i) for entries, i in parts] + [3 + topic[lb, lq][own_seen]])
        weights = torch.cat([one_hot * has["same_topic"][..., None], one_hot * has["different_topic"][..., None],
                             one_hot, one_hot * own[..., None]], -1)
        return AttentionTerms((b, q, k), sums, 3 + self.n_topics, columns=self._one_hot(self._topics(batch)).float(),
                              query_weights=weights)

    def _fold_terms(self, sums: TermSums, context: dict[str, Any]) -> None:
        if sums.columns is None:
            raise ProbeStateError("the topic probe's term sums came without their column mass")
        blocks = torch.unflatten(sums.columns, 2, (4, self.n_topics))  # [layer head block s c]
        own = blocks.diagonal(dim1=-2, dim2=-1)  # [layer head block s]: each row block's mass on the query's topic
        entries = sums.entries  # [layer sum head]
        self._add("same_token/mass", entries[:, 0])
        self._add("same_topic/mass", own[:, :, 0].sum(-1) - entries[:, 1] - entries[:, 2])
        self._add("different_topic/mass", blocks[:, :, 1].sum((-2, -1)) - own[:, :, 1].sum(-1))
        off = ~torch.eye(self.n_topics, dtype=torch.bool, device=blocks.device)
        own_topic = torch.diag_embed(own[:, :, 3] - entries[:, 3:].transpose(1, 2))  # [layer head s s]
        self._add("by_topic/mass", blocks[:, :, 2] * off + own_topic)

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> TopicAttention:
        mean, pairs, chance = {}, {}, {}
        for kind in TOPIC_PAIR_KINDS:
            n = float(state[f"{kind}/pairs"])
            pairs[kind] = int(n)
            mass = state[f"{kind}/mass"]
            mean[kind] = (mass / n).float() if n else torch.full_like(mass, float("nan")).float()
            chance[kind] = float(state[f"{kind}/chance_mass"]) / n if n else float("nan")
        ratio = mean["same_topic"] / mean["different_topic"]
        chance_ratio = chance["same_topic"] / chance["different_topic"] if chance["different_topic"] else float("nan")
        counts = state["by_topic/pairs"]
        by_topic = torch.where(counts > 0, state["by_topic/mass"] / counts.clamp(min=1), torch.nan).float()
        null_mean = {}
        if self.n_permutations:
            # the distinct-token labelled pairs are the same set under every permutation
            distinct_mass = (state["same_topic/mass"] + state["different_topic/mass"])[..., None]
            distinct_pairs = state["same_topic/pairs"] + state["different_topic/pairs"]
            same_mass, same_pairs = state["null/same_topic/mass"], state["null/same_topic/pairs"]
            null_mean = {
                "same_topic": (same_mass / same_pairs).permute(2, 0, 1).float(),
                "different_topic": ((distinct_mass - same_mass) / (distinct_pairs - same_pairs))
                .permute(2, 0, 1).float(),
            }
        return TopicAttention(
            provenance=provenance, mean=mean, pairs=pairs, chance=chance, ratio=ratio, chance_ratio=chance_ratio,
            by_topic=by_topic, by_topic_pairs=counts.float(), null_mean=null_mean,
        )


def topic_attention(model: HookedModel, batches: Iterable[Tensor | TokenBatch], token_topics: Tensor, *,
                    has_topic: Tensor | None = None, n_permutations: int = 0, permutation_seed: int = 0,
                    null: str = "vocabulary", data: str = "given tokens", progress: bool = False) -> TopicAttention:
    """Run :class:`TopicAttentionProbe` over ``batches`` on ``model``.

    Example: ``topic_attention(model, [tokens], token_topics, n_permutations=1000, null="distance").null_ratio``.
    """
    probe = TopicAttentionProbe(token_topics, has_topic, n_permutations=n_permutations,
                                permutation_seed=permutation_seed, null=null)
    (result,) = run_probes(model, [probe], batches, data=data, progress=progress)
    return result
