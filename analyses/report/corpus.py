"""The corpus behind a report and its LDA topics as one typed record, ``summary.json["corpus"]``: name, size,
digest, each topic's top words, their NPMI coherence on the training text and, when text was held out, on the
held-out paragraphs, and which topics the topic probes use."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from probes.text.topic_coherence import npmi_per_topic
from probes.text.topics import LdaTopics


@dataclass(frozen=True)
class TopicCoherence:
    """NPMI of each topic's top 10 words over 10-token windows of the training text (gensim's ``c_npmi``)."""

    measure: str
    per_topic: tuple[float, ...]
    mean: float


@dataclass(frozen=True)
class TopicHeldOut:
    """Each topic's NPMI on the held-out paragraphs (``per_topic``; ``per_topic_10_token`` over 10-token windows)
    and on the training paragraphs, whether the topic probes use it (held-out NPMI >= ``min_held_out_npmi``), the
    median and how many topics are above 0, and the number of held-out and training paragraphs."""

    window: str
    per_topic: tuple[float, ...]
    per_topic_10_token: tuple[float, ...]
    training_per_topic: tuple[float, ...]
    used_by_probes: tuple[bool, ...]
    min_held_out_npmi: float
    median: float
    above_0: int
    held_out_paragraphs: int
    training_paragraphs: int


@dataclass(frozen=True)
class CorpusSummary:
    """What the report read: the corpus ``name``, how many ``documents`` (paragraphs), their SHA-256, and the LDA
    topics (empty for a report without pretrained models; ``topic_held_out`` None when no text was held out)."""

    name: str = "unspecified"
    documents: int | None = None
    sha256: str = "?"
    topic_words: int | None = None
    topics: tuple[tuple[str, ...], ...] = ()
    topic_coherence: TopicCoherence | None = None
    topic_held_out: TopicHeldOut | None = None


def corpus_summary(name: str, documents: int, sha256: str, topic_model: LdaTopics | None = None,
                   word_topics: Mapping[str, int] | None = None) -> CorpusSummary:
    """The :class:`CorpusSummary` of a report's corpus and, when topics were fitted, of ``topic_model`` (top words,
    training NPMI over 10-token windows; held-out and training NPMI over paragraphs when text was held out)."""
    if topic_model is None:
        return CorpusSummary(name, documents, sha256)
    n_topics = topic_model.config.n_topics
    words = [topic_model.top_words(t, 10) for t in range(n_topics)]
    training = topic_model.texts or []
    coherence = npmi_per_topic(words, training, 10)  # gensim's c_npmi, exact counts
    held_out = None
    if topic_model.held_out_texts:
        held = topic_model.held_out_coherence()
        kept = set(topic_model.kept_topics())
        held_out = TopicHeldOut(
            "paragraph", tuple(held), tuple(topic_model.held_out_coherence(window_size=10)),
            tuple(npmi_per_topic(words, training, None)), tuple(t in kept for t in range(n_topics)),
            topic_model.config.min_held_out_npmi, statistics.median(held), sum(score > 0 for score in held),
            len(topic_model.held_out_texts), topic_model.n_documents)
    return CorpusSummary(name, documents, sha256, len(word_topics or {}), tuple(tuple(w[:8]) for w in words),
                         TopicCoherence("c_npmi", tuple(coherence), sum(coherence) / n_topics), held_out)
