"""The probe suite on a pretrained model over real text with gensim LDA topics, beside a random-weight control.

The text batches are split in two halves (even and odd batches). Every statistic that picks a best
head picks it on the first half and is measured on the second, so its interval and p-value are
free of the search over heads. Each half is one streamed pass feeding every probe at once: head
scores on natural text, the generalized (trigram) induction score, same- vs different-topic
attention with its distance-matched permutation null, and distance-matched attention between the most frequent
topic tokens (co-occurrence ordering). The same batches then go through the control model, the
same architecture with random weights (:func:`probes.stats.control_model.random_weight_control`).
Intervals are percentile bootstraps over batches (head scores, topic attention), query tokens
(co-occurrence ordering) or labelled tokens (embeddings). :mod:`analyses.pretrained.findings`
turns the measurements into findings. With ``circuit.enabled`` the previous-token -> induction K-composition edge
(:mod:`analyses.pretrained.circuit_edge`) is measured too, on the control at the model's own heads.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from analyses.pretrained.causal import (
    CausalConfig,
    CausalMeasurement,
    causal_family,
    causal_unavailable,
    measure_causal,
    topic_gap_top_heads,
)
from analyses.pretrained.circuit_edge import (
    CircuitConfig,
    CircuitMeasurement,
    circuit_findings,
    circuit_heads,
    circuit_of,
)
from analyses.pretrained.findings import pretrained_findings
from analyses.pretrained.held_out import (
    TOPIC_UNIT_KEYS,
    CooccurrenceSummary,
    HeldOut,
    cooccurrence_summary,
    halves,
    held_out_head_score,
    held_out_ordering,
    held_out_topic,
    topic_mean_over_heads,
)
from analyses.pretrained.passages import PassagePatterns, passage_patterns
from analyses.pretrained.settled import SettledFinding
from mechprobe import records
from mechprobe.validation import integer
from probes import HeadScoreProbe, HeadScores, ModelInfo, TokenBatch, feed_probes, load_model
from probes.attention.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.attention.topic_attention import TopicAttention, TopicAttentionProbe
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_kind import HookedModel
from probes.display.verdict_table import verdict_table_html, verdicts_dataframe
from probes.dynamics.embedding_topics import EMBEDDING_MEASURES, EmbeddingTopicTest, embedding_topic_test
from probes.stats.bootstrap import BatchStateRecorder
from probes.stats.control_model import random_weight_control
from probes.stats.findings import ALPHA, Finding
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import TokenTopicMap, token_topic_labels

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainedConfig:
    """How much text each pretrained model reads and how its statistics are computed.

    ``max_batches`` batches of text (split in halves: head selection / estimation) and
    ``protocol_batches`` batches of ``protocol_batch_size`` repeated-random-token rows;
    ``n_boot`` bootstrap resamples and ``n_permutations`` label permutations (>= 700 so that a
    p-value can pass 0.01 after Holm's correction over the seven findings of a model).
    """

    seq_len: int = 128
    batch_size: int = 8
    max_batches: int = 16
    n_pair_tokens: int = 100
    n_boot: int = 1000
    n_permutations: int = 1000
    protocol_seq_len: int = 50
    protocol_batches: int = 8
    protocol_batch_size: int = 4
    generalized_n: int = 3
    control: bool = True
    seed: int = 0
    causal: CausalConfig = field(default_factory=CausalConfig)
    circuit: CircuitConfig = field(default_factory=CircuitConfig)

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size", "max_batches", "n_pair_tokens", "n_boot", "n_permutations",
                     "protocol_seq_len", "protocol_batches", "protocol_batch_size", "generalized_n"):
            integer(name, getattr(self, name))
        integer("seed", self.seed, 0)
        if self.max_batches < 4 or self.protocol_batches < 4:
            raise ConfigError(
                f"max_batches and protocol_batches must be >= 4 (two halves of >= 2 batches each: one picks the "
                f"best head, the other measures it with a bootstrap); got {self.max_batches} and "
                f"{self.protocol_batches}."
            )
        if self.generalized_n < 2:
            raise ConfigError(f"generalized_n must be >= 2; got {self.generalized_n}.")
        if not isinstance(self.control, bool):
            raise ConfigError(f"control must be true or false; got {self.control!r}.")


@dataclass
class ModelMeasurements:
    """Everything measured on one model (pretrained or control) over the shared batches."""

    name: str
    info: ModelInfo
    protocol: HeadScores
    text_heads: HeadScores
    generalized: GeneralizedInductionScores
    topic: TopicAttention
    ordering: KeyTokenAttention
    embedding: EmbeddingTopicTest
    held_out: dict[str, HeldOut]
    cooccurrence: CooccurrenceSummary
    causal: dict[str, CausalMeasurement] = field(default_factory=dict)
    causal_note: str = ""
    circuit: CircuitMeasurement | None = None
    circuit_note: str = ""

    def summary(self) -> dict[str, Any]:
        """The numbers behind the findings, JSON-ready."""
        topic = self.held_out["topic_attention_best_head"]
        layer, head = topic.chosen_head()
        return {
            "same_topic_attention_ratio": {
                "best_head": [layer, head],
                "value": topic.value,
                "ci": list(topic.ci),
                "null_ratio": topic.null_value,
                "p_value": topic.p_value,
                "chance": self.topic.chance_ratio,
                "mean_over_heads": {"value": self.held_out["topic_attention_mean"].value,
                                    "ci": list(self.held_out["topic_attention_mean"].ci),
                                    "null_ratio": self.held_out["topic_attention_mean"].null_value},
                "same_topic_attention": float(self.topic.mean["same_topic"][layer, head]),
                "different_topic_attention": float(self.topic.mean["different_topic"][layer, head]),
                "pairs": self.topic.pairs,
            },
            "embedding": {m: {"same": self.embedding.same[m], "different": self.embedding.different[m],
                              "gap": self.embedding.gap[m], "gap_ci": self.embedding.gap_ci[m],
                              "null_mean_gap": self.embedding.null_mean(m), "p_value": self.embedding.p_value[m]}
                          for m in EMBEDDING_MEASURES} | {"labelled_tokens": self.embedding.n_tokens,
                                                          "permutations": self.embedding.n_permutations},
            "cooccurrence": self.cooccurrence,
            "induction_top_heads": [[layer, h, s] for layer, h, s in self.text_heads.top_heads("induction", 5)],
            "induction_chance": self.text_heads.chance["induction"],
            "induction_protocol_top_heads": [[layer, h, s] for layer, h, s in self.protocol.top_heads("induction", 5)],
            "induction_protocol_chance": self.protocol.chance["induction"],
            "previous_token_top_heads": [[layer, h, s]
                                         for layer, h, s in self.text_heads.top_heads("previous_token", 3)],
            "generalized_induction": {
                "n": len(self.generalized.provenance.settings["distances"]) + 1,
                "best_head": list(self.generalized.best_head()[:2]),
                "score": self.generalized.best_head()[2],
                "chance": self.generalized.chance,
            },
            "held_out": {name: {"head": None if h.head is None else list(h.head), "value": h.value,
                                "ci": list(h.ci), "null_value": h.null_value, "p_value": h.p_value,
                                "selection_value": h.selection_value}
                         for name, h in self.held_out.items()},
            "ablations": records.dump(self.causal),
            "ablation_note": self.causal_note,
            "circuit": records.dump(self.circuit),
            "circuit_note": self.circuit_note,
        }


@dataclass
class PretrainedRun:
    """One pretrained model, its random-weight control, and the findings; :meth:`summary` goes to summary.json.
    ``config``: the settings it was probed with; ``passages``: the best heads' attention on a text passage and on
    repeated random tokens (the report's interactive views); ``settled``: each finding after ``--settle``
    (:mod:`analyses.pretrained.settle`; empty without it)."""

    model: str
    info: ModelInfo
    token_map: TokenTopicMap
    measured: ModelMeasurements
    control: ModelMeasurements | None
    findings: dict[str, Finding]
    control_findings: dict[str, Finding]
    n_tokens: int
    config: PretrainedConfig | None = None
    passages: Mapping[str, PassagePatterns] = field(default_factory=dict)
    settled: dict[str, SettledFinding] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        """The findings as a verdict table, each beside the random-weight control measured the same way."""
        control = "no control model" if self.control is None else f"control = {self.control.name}"
        return verdict_table_html(self.findings, title=f"{self.model}: {self.n_tokens} tokens probed, {control}")

    def to_dataframe(self) -> pd.DataFrame:
        """The findings, one row each (:func:`probes.display.verdicts_dataframe`)."""
        return verdicts_dataframe(self.findings)

    def summary(self) -> dict[str, Any]:
        summary = self.measured.summary()
        summary.update({
            "findings": records.dump(self.findings),
            "control": None if self.control is None else {
                "model": self.control.name,
                "findings": records.dump(self.control_findings),
                **self.control.summary(),
            },
            "topic_words": {"words": self.token_map.n_words, "mapped": self.token_map.n_words_mapped,
                            "multi_token": self.token_map.n_multi_token_words,
                            "conflicting_tokens": self.token_map.n_conflicting_tokens,
                            "labelled_tokens": int((self.token_map.labels >= 0).sum())},
            "n_layers": self.info.n_layers,
            "n_heads": self.info.n_heads,
            "causal": self.info.causal,
            "tokens_probed": self.n_tokens,
            "seed": self.measured.protocol.provenance.seed,
        })
        if self.settled:
            summary["settled"] = records.dump(self.settled)
        return summary


def frequent_labelled_tokens(batches: Sequence[TokenBatch], labels: Tensor, k: int) -> list[int]:
    """The ``k`` most frequent topic-labelled token ids among the valid positions of ``batches``."""
    counts = torch.zeros(labels.shape[0], dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch.tokens[batch.valid].cpu(), minlength=labels.shape[0])[: labels.shape[0]]
    counts[labels < 0] = 0
    top = counts.topk(min(k, int((counts > 0).sum()))).indices
    return sorted(int(t) for t in top)


def protocol_batches(info: ModelInfo, config: PretrainedConfig) -> list[TokenBatch]:
    """The repeated-random-token batches ``[BOS] X X`` of the induction protocol (seeded by ``config.seed``)."""
    generator = torch.Generator().manual_seed(config.seed)
    return [repeated_random_tokens(info, seq_len=config.protocol_seq_len, n_sequences=config.protocol_batch_size,
                                   generator=generator) for _ in range(config.protocol_batches)]


def _run_half(model: HookedModel, batches: Sequence[TokenBatch], labels: Tensor, pair_tokens: list[int],
              config: PretrainedConfig, *, data: str, progress: bool):
    """One streamed pass over ``batches``: the probes and each batch's state increments for the bootstrap."""
    probes_list = [HeadScoreProbe(), GeneralizedInductionProbe(config.generalized_n),
                   TopicAttentionProbe(labels, n_permutations=config.n_permutations, permutation_seed=config.seed,
                                       null="distance"),
                   KeyTokenAttentionProbe(pair_tokens, pair_tokens, query_position="all", distance_matched=True)]
    recorder = BatchStateRecorder(keys=lambda key: not key.startswith(("null/", "by_topic/")))
    feed_probes(model, probes_list, batches, data=data, seed=config.seed, progress=progress,
                on_batch=lambda i, ps: recorder(i, [ps[0], ps[2]]))
    return probes_list, recorder


def measure_model(model: HookedModel, name: str, batches: Sequence[TokenBatch], labels: Tensor, pair_tokens: list[int],
                  config: PretrainedConfig, *, data: str, progress: bool,
                  edge_of: ModelMeasurements | None = None) -> ModelMeasurements:
    """Every statistic of the suite on ``model`` (see the module docstring); the circuit edge is the one ``model``'s
    own heads name, or ``edge_of``'s (the pretrained model's, for its control)."""
    info = ModelInfo.of(model)
    n_boot, seed = config.n_boot, config.seed
    first, second = halves(batches)
    probes_a, recorder_a = _run_half(model, first, labels, pair_tokens, config, data=data, progress=progress)
    probes_b, recorder_b = _run_half(model, second, labels, pair_tokens, config, data=data, progress=progress)
    results_a = [p.compute() for p in probes_a]
    results_b = [p.compute() for p in probes_b]
    whole = [a.merge(b).compute() for a, b in zip(probes_a, probes_b)]
    text_heads, generalized, topic, ordering = whole

    protocol_a, protocol_b = HeadScoreProbe(("induction",)), HeadScoreProbe(("induction",))
    protocol_recorder = BatchStateRecorder()
    first_p, second_p = halves(protocol_batches(info, config))
    protocol_data = (f"repeated random tokens (seq_len={config.protocol_seq_len}, {config.protocol_batches}x"
                     f"{config.protocol_batch_size}, seed={seed})")
    feed_probes(model, [protocol_a], first_p, data=protocol_data, seed=seed, progress=False)
    feed_probes(model, [protocol_b], second_p, data=protocol_data, seed=seed, progress=False,
                on_batch=protocol_recorder)
    protocol_selection = protocol_a.compute()
    protocol = protocol_a.merge(protocol_b).compute()

    heads_b, topic_a, topic_b = recorder_b.per_unit(0), recorder_a.per_unit(1), recorder_b.per_unit(1)
    topic_units = {k: torch.cat([topic_a[k], topic_b[k]]) for k in TOPIC_UNIT_KEYS}
    ordering_best = held_out_ordering(results_a[3], results_b[3], n_boot=n_boot, n_permutations=config.n_permutations,
                                      seed=seed, more=f"probe more text: give --max-batches more than "
                                      f"{config.max_batches}")  # mechprobe report's flag (pretrained.max_batches)
    held_out = {
        "induction_protocol": held_out_head_score("induction", protocol_selection, protocol_recorder.per_unit(0),
                                                  n_boot=n_boot, seed=seed),
        "induction_text": held_out_head_score("induction", results_a[0], heads_b, n_boot=n_boot, seed=seed),
        "previous_token_text": held_out_head_score("previous_token", results_a[0], heads_b, n_boot=n_boot, seed=seed),
        "topic_attention_mean": topic_mean_over_heads(topic, topic_units, n_boot=n_boot, seed=seed),
        "topic_attention_best_head": held_out_topic(results_a[2], results_b[2], topic_b, n_boot=n_boot, seed=seed),
        "cooccurrence_ordering": ordering_best,
    }
    w_e = getattr(model, "W_E", None)  # the token embedding of TransformerLens's models (bridges, HookedTransformer)
    if not isinstance(w_e, Tensor):
        raise ModelError(f"The embedding topic test reads model.W_E [d_vocab d_model]; {type(model).__name__} has "
                         f"none. Give a TransformerBridge or a HookedTransformer.")
    embedding = embedding_topic_test(w_e, labels, n_permutations=config.n_permutations, n_boot=n_boot, seed=seed,
                                     stop_at=ALPHA)
    causal = {}
    causal_note = causal_unavailable(model, info, config.causal)
    if not causal_note:
        k = config.causal.k
        causal = measure_causal(model, induction=protocol_selection.top_heads("induction", k),
                                previous_token=results_a[0].top_heads("previous_token", k),
                                topic=topic_gap_top_heads(results_a[2], k), text_batches=second, labels=labels,
                                config=config.causal, n_boot=n_boot, seed=seed)
    if edge_of is None:
        circuit, circuit_note = circuit_of(model, config.circuit, circuit_heads(
            results_a[0].top_heads("previous_token", info.n_layers * info.n_heads),
            protocol_selection.top_heads("induction", 1)), n_boot=n_boot, seed=seed)
    elif edge_of.circuit is None:  # the model's own note says why
        circuit, circuit_note = None, ""
    else:
        circuit, circuit_note = circuit_of(model, config.circuit, edge_of.circuit.heads(), n_boot=n_boot, seed=seed)
    return ModelMeasurements(name=name, info=info, protocol=protocol, text_heads=text_heads, generalized=generalized,
                             topic=topic, ordering=ordering, embedding=embedding, held_out=held_out,
                             cooccurrence=cooccurrence_summary(ordering, ordering_best), causal=causal,
                             causal_note=causal_note, circuit=circuit, circuit_note=circuit_note)


def probe_pretrained(model_spec: Any, documents: Sequence[Any], word_topics: Mapping[str, int],
                     config: PretrainedConfig = PretrainedConfig(), *, progress: bool = True,
                     data: str = "corpus", name: str | None = None) -> PretrainedRun:
    """The whole suite on one pretrained model (a :func:`probes.load_model` spec or a loaded model) and,
    unless ``config.control`` is off, on its random-weight control over the same batches.

    Example: ``probe_pretrained("minilm-l6", docs, assign_word_topics(topic_model)).findings``.
    """
    model = load_model(model_spec)
    info = ModelInfo.of(model)
    tokenizer = getattr(model, "tokenizer", None)
    token_map = token_topic_labels(word_topics, tokenizer, info.d_vocab)
    batches = list(text_token_batches(documents, tokenizer, info, seq_len=config.seq_len,
                                      batch_size=config.batch_size, max_batches=config.max_batches))
    if len(batches) < 4:
        raise InputError(
            f"The corpus gave {len(batches)} batch(es) of text for {info.name}; at least 4 are needed (two halves "
            f"of two: head selection and a bootstrap over batches). Use a larger corpus or a smaller batch_size."
        )
    pair_tokens = frequent_labelled_tokens(batches, token_map.labels, config.n_pair_tokens)
    if len(pair_tokens) < 3:
        raise InputError(
            f"Only {len(pair_tokens)} topic-labelled tokens occur in the probed text of {info.name}; the topic "
            f"probes need more. Use more text or more topic words."
        )
    name = name or (model_spec if isinstance(model_spec, str) else info.name)
    measured = measure_model(model, name, batches, token_map.labels, pair_tokens, config, data=data,
                             progress=progress)
    control = None
    if config.control:
        control_model = random_weight_control(model, seed=config.seed)
        control = measure_model(control_model, f"{name} (random weights)", batches, token_map.labels, pair_tokens,
                                config, data=data, progress=progress, edge_of=measured)
        del control_model
    findings, control_findings = pretrained_findings(measured, control)
    causal, control_causal = causal_family(measured.causal, None if control is None else control.causal)
    findings.update(causal)
    control_findings.update(control_causal)
    circuit, control_circuit = circuit_findings(measured.circuit, None if control is None else control.circuit)
    findings.update(circuit)
    control_findings.update(control_circuit)
    passages = {
        "text": passage_patterns(model, batches[0], {
            "induction": measured.text_heads.top_heads("induction", 1)[0][:2],
            "previous_token": measured.text_heads.top_heads("previous_token", 1)[0][:2],
            "same-topic attention": measured.held_out["topic_attention_best_head"].chosen_head()}),
        "repeated random tokens": passage_patterns(model, protocol_batches(info, config)[0], {
            "induction": measured.protocol.top_heads("induction", 1)[0][:2]},
            max_tokens=2 * config.protocol_seq_len + 1),
    }
    return PretrainedRun(
        model=name, info=info, token_map=token_map, measured=measured, control=control, findings=findings,
        control_findings=control_findings, n_tokens=int(sum(int(b.valid.sum()) for b in batches)),
        config=config, passages=passages,
    )
