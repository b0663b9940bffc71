"""Topic structure of an embedding matrix: mean dot product and cosine of same- vs different-topic tokens.

For ``W_E`` [d_vocab, d_model] and ``token_topics`` [d_vocab] (-1 = no topic), the pairs are the
ordered pairs ``(i, j)``, ``i != j``, of labelled tokens. ``same_topic_*`` averages over pairs in
one topic, ``different_topic_*`` over pairs in different topics; ``*_dot`` uses ``e_i . e_j`` and
``*_cosine`` uses ``e_i . e_j / (|e_i| |e_j|)`` (zero rows count as cosine 0).

The sums are exact and cost O(n d): over the pairs of a set S,
``sum_{i != j in S} e_i . e_j = |sum_{i in S} e_i|^2 - sum_{i in S} |e_i|^2``.

Pretrained embeddings are anisotropic: every row shares a large common direction, so raw cosines
are high for every pair and mostly measure that direction. ``center=True`` subtracts the mean row
of the whole matrix first. :func:`embedding_topic_test` reports the same-minus-different gap of
the four measures (dot / cosine, raw / centred; Li et al. state their result for inner
products) with a bootstrap interval over labelled tokens and a label-permutation null.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechprobe.validation import integer
from probes.attention.topic_pairs import check_token_topics
from probes.core.errors import InputError
from probes.stats.bootstrap import bootstrap_interval
from probes.stats.nulls import label_permutations, permutation_p_value
from probes.stats.sequential import SequentialRule, sequential_null

EMBEDDING_MEASURES = ("dot", "cosine", "centred_dot", "centred_cosine")
"""The similarity measures :func:`embedding_topic_test` compares same-topic and different-topic pairs on."""


@dataclass(frozen=True)
class EmbeddingTopicSimilarity:
    """Mean dot product and cosine of same-topic and different-topic token pairs."""

    same_topic_dot: float
    different_topic_dot: float
    same_topic_cosine: float
    different_topic_cosine: float
    same_topic_pairs: int
    different_topic_pairs: int


def _pair_sums(vectors: Tensor, topics: Tensor, n_topics: int) -> tuple[float, float]:
    """Sums of ``v_i . v_j`` over ordered pairs ``i != j`` in one topic and over all pairs."""
    self_dots = float((vectors * vectors).sum())
    per_topic = torch.zeros(n_topics, vectors.shape[1], dtype=vectors.dtype).index_add_(0, topics, vectors)
    same = float((per_topic * per_topic).sum()) - self_dots
    total_vector = vectors.sum(0)
    total = float(total_vector @ total_vector) - self_dots
    return same, total


def _labelled_rows(embedding: Tensor, token_topics: Tensor, has_topic: Tensor | None, center: bool
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """``(vectors, topics, keep)``: the labelled rows in float64 (centred on the mean row when asked)."""
    if not isinstance(embedding, Tensor) or embedding.ndim != 2:
        raise InputError(
            f"embedding must be a 2-d tensor [d_vocab d_model]; got "
            f"{tuple(embedding.shape) if isinstance(embedding, Tensor) else type(embedding).__name__}."
        )
    labels = check_token_topics(token_topics, has_topic)
    if labels.shape[0] != embedding.shape[0]:
        raise InputError(
            f"token_topics must label every row of the embedding: {labels.shape[0]} labels vs "
            f"{embedding.shape[0]} rows."
        )
    keep = labels >= 0
    matrix = embedding.detach().to("cpu", torch.float64)
    if center:
        matrix = matrix - matrix.mean(0, keepdim=True)
    return matrix[keep], labels[keep], keep


def _unit_rows(vectors: Tensor) -> Tensor:
    norms = vectors.norm(dim=1, keepdim=True)
    return torch.where(norms > 0, vectors / norms.clamp(min=1e-300), torch.zeros_like(vectors))


def embedding_topic_similarity(embedding: Float[Tensor, "d_vocab d_model"], token_topics: Int[Tensor, " d_vocab"],
                               has_topic: Tensor | None = None, *, center: bool = False) -> EmbeddingTopicSimilarity:
    """Same- vs different-topic similarity of the rows of ``embedding`` (module docstring).

    ``center=True`` first subtracts the mean row of the whole ``embedding``.
    Example: ``embedding_topic_similarity(model.W_E, lda.token_topics()).same_topic_cosine``.
    """
    vectors, topics, keep = _labelled_rows(embedding, token_topics, has_topic, center)
    n_topics = int(topics.max()) + 1
    counts = torch.bincount(topics, minlength=n_topics).double()
    n = float(keep.sum())
    n_same = int((counts * counts).sum() - n)
    n_different = int(n * n - (counts * counts).sum())
    if n_same == 0 or n_different == 0:
        raise InputError(
            f"Need both same-topic and different-topic pairs; got {n_same} and {n_different}. Label at "
            f"least two topics, one of them with two or more tokens."
        )
    unit = _unit_rows(vectors)
    same_dot, total_dot = _pair_sums(vectors, topics, n_topics)
    same_cos, total_cos = _pair_sums(unit, topics, n_topics)
    return EmbeddingTopicSimilarity(
        same_topic_dot=same_dot / n_same,
        different_topic_dot=(total_dot - same_dot) / n_different,
        same_topic_cosine=same_cos / n_same,
        different_topic_cosine=(total_cos - same_cos) / n_different,
        same_topic_pairs=n_same,
        different_topic_pairs=n_different,
    )


@dataclass(frozen=True)
class EmbeddingTopicTest:
    """Same-minus-different-topic gap of each measure in :data:`EMBEDDING_MEASURES`, with its tests.

    ``same[m]``, ``different[m]``: mean over same-/different-topic pairs; ``gap[m]`` = same - different;
    ``gap_ci[m]``: 95% percentile bootstrap over labelled tokens; ``null_gaps[m]`` [permutation]: the
    gap under each label permutation drawn; ``p_value[m]``: one-sided permutation p-value of the gap (the sequential
    one where the null was drawn with ``stop_at``); ``null_stop``: how many permutations were drawn and why.
    """

    same: dict[str, float]
    different: dict[str, float]
    gap: dict[str, float]
    gap_ci: dict[str, tuple[float, float]]
    null_gaps: dict[str, Tensor] = field(repr=False)
    p_value: dict[str, float]
    n_tokens: int
    n_permutations: int
    null_stop: str = ""

    def null_mean(self, measure: str) -> float:
        return float(self.null_gaps[measure].mean()) if self.n_permutations else float("nan")


def _per_token_sums(vectors: Tensor, topics: Tensor) -> tuple[Tensor, Tensor]:
    """Each token's summed similarity to the other tokens of its topic and to the tokens of other topics."""
    topic_sums = torch.zeros(int(topics.max()) + 1, vectors.shape[1], dtype=torch.float64)
    topic_sums.index_add_(0, topics, vectors)
    own = (vectors * topic_sums[topics]).sum(1)
    self_dot = (vectors * vectors).sum(1)
    return own - self_dot, vectors @ vectors.sum(0) - own


def _permuted_gaps(vectors: Tensor, permuted: Tensor, n_same: float, n_different: float, chunk: int = 250) -> Tensor:
    """The same-minus-different gap under each row of ``permuted`` (topics of the labelled rows).

    Per permutation, the per-topic sums of the rows are one sparse [topic, row] x [row, d_model] product;
    ``chunk`` permutations share one product."""
    n_topics = int(permuted.max()) + 1
    n = vectors.shape[0]
    self_dots = float((vectors * vectors).sum())
    total = vectors.sum(0)
    total_sum = float(total @ total) - self_dots
    draws = []
    for start in range(0, permuted.shape[0], chunk):
        part = permuted[start : start + chunk]
        rows = (torch.arange(part.shape[0])[:, None] * n_topics + part).flatten()
        columns = torch.arange(n).repeat(part.shape[0])
        assign = torch.sparse_coo_tensor(torch.stack([rows, columns]), torch.ones(rows.numel(), dtype=vectors.dtype),
                                         (part.shape[0] * n_topics, n), check_invariants=False)
        sums = torch.sparse.mm(assign, vectors).reshape(part.shape[0], n_topics, -1)
        same = sums.square().sum((1, 2)) - self_dots
        draws.append(same / n_same - (total_sum - same) / n_different)
    return torch.cat(draws)


def embedding_topic_test(embedding: Float[Tensor, "d_vocab d_model"], token_topics: Int[Tensor, " d_vocab"], *,
                         n_permutations: int = 1000, n_boot: int = 1000, seed: int = 0,
                         stop_at: float | None = None) -> EmbeddingTopicTest:
    """Topic gaps of the embedding rows under the four measures, each with a bootstrap CI and a permutation null.

    The permutations shuffle the topic labels among the labelled tokens (topic sizes kept); the
    bootstrap resamples labelled tokens, each carrying its pair sums with every other token. With ``stop_at`` (a
    level) the permutations are drawn in groups of 10, 100, ... and stop once every measure's decision at that level
    is known (:mod:`probes.stats.sequential`); without it all ``n_permutations`` are drawn.
    Example: ``embedding_topic_test(model.W_E, labels).p_value["centred_dot"]``.
    """
    integer("n_permutations", n_permutations, 0)
    integer("n_boot", n_boot)
    labels = check_token_topics(token_topics)
    same, different, gap, gap_ci = {}, {}, {}, {}
    pairs_of: dict[str, tuple[Tensor, float, float]] = {}  # measure -> (rows, same-topic pairs, different-topic)
    for center in (False, True):
        rows, topics, _ = _labelled_rows(embedding, labels, None, center)
        sizes = torch.bincount(topics).double()[topics]
        n_same, n_different = float((sizes - 1).sum()), float((len(topics) - sizes).sum())
        if n_same == 0 or n_different == 0:
            raise InputError(
                f"Need both same-topic and different-topic pairs; got {int(n_same)} and {int(n_different)}. Label "
                f"at least two topics, one of them with two or more tokens."
            )
        for vectors, kind in ((rows, "dot"), (_unit_rows(rows), "cosine")):
            measure = f"centred_{kind}" if center else kind
            same_sum, different_sum = _per_token_sums(vectors, topics)
            same[measure] = float(same_sum.sum()) / n_same
            different[measure] = float(different_sum.sum()) / n_different
            gap[measure] = same[measure] - different[measure]
            units = {"same": same_sum, "n_same": sizes - 1, "different": different_sum,
                     "n_different": len(topics) - sizes}
            _, low, high = bootstrap_interval(
                units, lambda s: s["same"] / s["n_same"] - s["different"] / s["n_different"], n_boot=n_boot, seed=seed)
            gap_ci[measure] = (float(low), float(high))
            pairs_of[measure] = (vectors, n_same, n_different)
    null_gaps = {m: torch.empty(0, dtype=torch.float64) for m in gap}
    p_value = {m: float("nan") for m in gap}
    null_stop = ""
    if n_permutations:
        def draw(start: int, stop: int) -> Tensor:
            permuted = label_permutations(labels, stop - start, seed=seed, start=start)[:, labels >= 0]
            gaps = []
            for measure in gap:
                vectors, n_same, n_different = pairs_of[measure]
                gaps.append(_permuted_gaps(vectors, permuted, n_same, n_different))
            return torch.stack(gaps, 1)

        observed = torch.tensor([gap[m] for m in gap], dtype=torch.float64)
        if stop_at is None:
            draws = draw(0, n_permutations)
            p = permutation_p_value(observed, draws)
            null_stop = f"all {n_permutations} permutations"
        else:
            null = sequential_null(observed, draw, SequentialRule.growing(n_permutations, stop_at))
            draws, p, null_stop = null.draws, null.p_value, null.why()
        null_gaps = {m: draws[:, i].contiguous() for i, m in enumerate(gap)}  # as saved: the mean sums alike
        p_value = {m: float(p[i]) for i, m in enumerate(gap)}
    return EmbeddingTopicTest(same, different, gap, gap_ci, null_gaps, p_value, int((labels >= 0).sum()),
                              n_permutations, null_stop)
