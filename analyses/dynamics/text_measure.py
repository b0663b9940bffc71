"""The report's text probes at one checkpoint of a series: same-topic attention and co-occurrence ordering on
natural text, with the same held-out heads, intervals and nulls as ``mechprobe report``, kept per batch (or per
query token) so that :mod:`probes.dynamics.change_point` can find when each rises.

The text (``--corpus``) is read once per run (:func:`text_probe_data`): its paragraphs (at least
:data:`MIN_CHARS` characters) fit a gensim LDA topic model (``config.topics``), whose words label the model's
vocabulary (:func:`probes.text.token_topics.token_topic_labels`), and the paragraphs, shuffled with
``config.seed``, fill ``config.topic_batches`` batches of ``config.text_seq_len`` tokens. The ``n_pair_tokens`` most
frequent labelled tokens are the co-occurrence probe's queries and keys. Every checkpoint reads the same batches;
the even batches choose the heads, the odd ones measure them.

- ``topic_attention``: the same/different-topic attention ratio of the head with the largest same-minus-different
  gap on the even batches, measured on the odd ones
  (:func:`analyses.pretrained.held_out.held_out_topic`): bootstrap over batches, the distance-matched topic null
  (pairs at the same distance, row and query bucket; ``config.n_permutations`` shuffles). Its units are the
  batches' same- and different-topic sums, so the curve is a ratio of two means (``divide``).
- ``cooccurrence_ordering``: the mean over query tokens of the Spearman correlation between a head's
  distance-matched attention to each key token and the key's co-occurrence with the query, for the head that
  follows co-occurrence best on the even batches (:func:`analyses.pretrained.held_out.held_out_ordering`):
  bootstrap over query tokens, null with co-occurrence shuffled among each query's keys. Its units are the query
  tokens with enough ranked keys (a property of the text, the same at every checkpoint).

A model without a tokenizer, or whose vocabulary the topic words miss, has neither curve (logged).

Example: ``text_points(model, text_probe_data(model, config), config)["topic_attention"].value``.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.curve_point import CurvePoint
from analyses.pretrained.held_out import halves, held_out_ordering, held_out_topic, ordering_per_head
from analyses.pretrained.measure import frequent_labelled_tokens
from probes import KeyTokenAttentionProbe, ModelInfo, TokenBatch, TopicAttentionProbe, feed_probes
from probes.core.errors import InputError
from probes.core.model_kind import HookedModel
from probes.stats.bootstrap import BatchStateRecorder
from probes.text.corpora import iter_documents
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import token_topic_labels
from probes.text.topics import assign_word_topics, fit_lda_topics

log = logging.getLogger(__name__)

TEXT_CURVES = ("topic_attention", "cooccurrence_ordering")
MIN_CHARS = 200  # the report's paragraphs (analyses.report.config.ReportConfig.min_chars)
MIN_PAIR_TOKENS = 3


@dataclass(frozen=True)
class TextProbeData:
    """What every checkpoint's text probes read: the text ``batches``, the topic ``labels`` of the model's
    vocabulary (-1: none) and the co-occurrence probe's ``pair_tokens``; ``data`` says where they came from."""

    batches: tuple[TokenBatch, ...]
    labels: Tensor
    pair_tokens: tuple[int, ...]
    data: str


def word_topics_of(config: DynamicsConfig) -> tuple[list[Any], dict[str, int]]:
    """The corpus's paragraphs (shuffled with ``config.seed`` after the fit) and the LDA word -> topic map (empty,
    logged, when LDA finds no topics in them: the text probes are then skipped, the rest of the run goes on)."""
    if config.corpus is None:
        raise InputError("The text probes need a corpus; give --corpus (e.g. wikipedia-excerpt).")
    documents = list(iter_documents(config.corpus, unit="paragraph", min_chars=MIN_CHARS))
    try:
        word_topics = assign_word_topics(fit_lda_topics(documents, config.topics))
    except InputError as error:
        log.warning("no LDA topics in %s (%s)", config.corpus, error)
        word_topics = {}
    random.Random(config.seed).shuffle(documents)
    return documents, word_topics


def text_probe_data(model: HookedModel, config: DynamicsConfig,
                    topics: tuple[Sequence[Any], Mapping[str, int]] | None = None) -> TextProbeData | None:
    """The batches, labels and pair tokens of ``model``'s tokenizer (module docstring), or None (logged) when the
    model has no tokenizer or too few topic words are tokens of its vocabulary. ``topics``: the output of
    :func:`word_topics_of`, when already computed."""
    tokenizer = getattr(model, "tokenizer", None)
    info = ModelInfo.of(model)
    if tokenizer is None:
        log.warning("topic_attention and cooccurrence_ordering skipped: %s has no tokenizer", info.name)
        return None
    documents, word_topics = topics if topics is not None else word_topics_of(config)
    try:
        labels = token_topic_labels(word_topics, tokenizer, info.d_vocab).labels
    except InputError as error:
        log.warning("topic_attention and cooccurrence_ordering skipped: %s", error)
        return None
    batches = tuple(text_token_batches(documents, tokenizer, info, seq_len=config.text_seq_len, batch_size=8,
                                       max_batches=config.topic_batches))
    if len(batches) < 4:
        raise InputError(f"The corpus {config.corpus} gave {len(batches)} batch(es) of paragraphs; the text probes "
                         f"need 4 (two halves of two). Give a larger corpus, or leave --corpus out.")
    pair_tokens = tuple(frequent_labelled_tokens(batches, labels, config.n_pair_tokens))
    if len(pair_tokens) < MIN_PAIR_TOKENS:
        log.warning("topic_attention and cooccurrence_ordering skipped: only %d topic-labelled tokens of %s occur "
                    "in the text", len(pair_tokens), info.name)
        return None
    data = (f"{config.corpus} paragraphs ({len(batches)}x8 rows of {config.text_seq_len} tokens, shuffled with "
            f"seed {config.seed}; {int((labels >= 0).sum())} topic-labelled tokens)")
    return TextProbeData(batches, labels, pair_tokens, data)


def _probes(data: TextProbeData, config: DynamicsConfig, *, null: bool) -> list[Any]:
    return [TopicAttentionProbe(data.labels, n_permutations=config.n_permutations if null else 0,
                                permutation_seed=config.seed, null="distance"),
            KeyTokenAttentionProbe(list(data.pair_tokens), list(data.pair_tokens), query_position="all",
                                   distance_matched=True)]


def text_points(model: HookedModel, data: TextProbeData, config: DynamicsConfig) -> dict[str, CurvePoint]:
    """``topic_attention`` and ``cooccurrence_ordering`` of ``model`` on ``data`` (module docstring)."""
    selection_batches, measuring_batches = halves(list(data.batches))
    selection, measuring = _probes(data, config, null=False), _probes(data, config, null=True)
    recorder = BatchStateRecorder(keys=lambda key: not key.startswith(("null/", "by_topic/")))
    feed_probes(model, selection, selection_batches, data=data.data, seed=config.seed, progress=False)
    feed_probes(model, measuring, measuring_batches, data=data.data, seed=config.seed, progress=False,
                on_batch=lambda i, probes_: recorder(i, [probes_[0]]))
    chosen = [p.compute() for p in selection]
    measured = [p.compute() for p in measuring]
    per_batch = recorder.per_unit(0)
    topic = held_out_topic(chosen[0], measured[0], per_batch, n_boot=config.n_boot, seed=config.seed)
    layer, head = topic.chosen_head()

    def at_head(key: str) -> tuple[float, ...]:
        values = per_batch[key]
        return tuple((values[:, layer, head] if values.dim() == 3 else values).double().tolist())

    points = {"topic_attention": CurvePoint(
        topic.value, topic.ci, topic.null_value, topic.p_value, at_head("same_topic/mass"),
        at_head("same_topic/pairs"), at_head("different_topic/mass"), at_head("different_topic/pairs"),
        head=(layer, head), divide=True)}
    ordering = held_out_ordering(chosen[1], measured[1], n_boot=config.n_boot, n_permutations=config.n_permutations,
                                 seed=config.seed)
    o_layer, o_head = ordering.chosen_head()
    rho, ranked = ordering_per_head(measured[1])
    values = rho[o_layer, o_head, ranked]
    finite = torch.isfinite(values)
    points["cooccurrence_ordering"] = CurvePoint(
        ordering.value, ordering.ci, ordering.null_value, ordering.p_value,
        tuple(torch.where(finite, values, 0.0).tolist()), tuple(finite.double().tolist()), head=(o_layer, o_head))
    return points
