"""Topic structure of an embedding matrix: mean dot product and cosine of same- vs different-topic tokens.

For ``W_E`` [d_vocab, d_model] and ``token_topics`` [d_vocab] (-1 = no topic), the pairs are the
ordered pairs ``(i, j)``, ``i != j``, of labelled tokens. ``same_topic_*`` averages over pairs in
one topic, ``different_topic_*`` over pairs in different topics; ``*_dot`` uses ``e_i . e_j`` and
``*_cosine`` uses ``e_i . e_j / (|e_i| |e_j|)`` (zero rows count as cosine 0).

The sums are exact and cost O(n d): over the pairs of a set S,
``sum_{i != j in S} e_i . e_j = |sum_{i in S} e_i|^2 - sum_{i in S} |e_i|^2``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from probes.errors import InputError
from probes.topic_attention import check_token_topics


@dataclass(frozen=True)
class EmbeddingTopicSimilarity:
    """Mean dot product and cosine of same-topic and different-topic token pairs."""

    same_topic_dot: float
    different_topic_dot: float
    same_topic_cosine: float
    different_topic_cosine: float
    same_topic_pairs: int
    different_topic_pairs: int

    def to_dict(self) -> dict[str, float | int]:
        return asdict(self)


def _pair_sums(vectors: Tensor, topics: Tensor, n_topics: int) -> tuple[float, float]:
    """Sums of ``v_i . v_j`` over ordered pairs ``i != j`` in one topic and over all pairs."""
    self_dots = float((vectors * vectors).sum())
    per_topic = torch.zeros(n_topics, vectors.shape[1], dtype=vectors.dtype).index_add_(0, topics, vectors)
    same = float((per_topic * per_topic).sum()) - self_dots
    total_vector = vectors.sum(0)
    total = float(total_vector @ total_vector) - self_dots
    return same, total


def embedding_topic_similarity(embedding: Float[Tensor, "d_vocab d_model"], token_topics: Int[Tensor, "d_vocab"],
                               has_topic: Tensor | None = None) -> EmbeddingTopicSimilarity:
    """Same- vs different-topic similarity of the rows of ``embedding`` (module docstring).

    Example: ``embedding_topic_similarity(model.W_E, lda.token_topics()).same_topic_cosine``.
    """
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
    vectors = embedding.detach().to("cpu", torch.float64)[keep]
    topics = labels[keep]
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
    norms = vectors.norm(dim=1, keepdim=True)
    unit = torch.where(norms > 0, vectors / norms.clamp(min=1e-300), torch.zeros_like(vectors))
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
