"""The probe suite on a pretrained model over real text with gensim LDA topics, beside a random-weight control.

The text batches are split in two halves (even and odd batches). Every statistic that picks a best
head picks it on the first half and is measured on the second, so its interval and p-value are
free of the search over heads. Each half is one streamed pass feeding every probe at once: head
scores on natural text, the generalized (trigram) induction score, same- vs different-topic
attention with its label-permutation null, and distance-matched attention between the most frequent
topic tokens (co-occurrence ordering). The same batches then go through the control model, the
same architecture with random weights (:func:`probes.stats.control_model.random_weight_control`).
Intervals are percentile bootstraps over batches (head scores, topic attention), query tokens
(co-occurrence ordering) or labelled tokens (embeddings). :mod:`analyses.pretrained.findings`
turns the measurements into findings.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from analyses.report.interactive import passage_patterns
from analyses.pretrained.findings import PRETRAINED_FINDINGS, pretrained_findings
from probes import HeadScoreProbe, HeadScores, ModelInfo, TokenBatch, feed_probes, load_model
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_draws, bootstrap_interval, percentile_interval
from probes.stats.control_model import random_weight_control
from probes.text.cooccurrence import cooccurrence_ordering, ordering_null
from probes.dynamics.embedding_topics import EmbeddingTopicTest, embedding_topic_test
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import Finding
from probes.attention.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe
from mechprobe.validation import integer
from probes.stats.nulls import permutation_p_value
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.text.text_batches import text_token_batches
from probes.attention.topic_attention import TopicAttention, TopicAttentionProbe
from probes.text.token_topics import TokenTopicMap, token_topic_labels

log = logging.getLogger(__name__)
MIN_RANKED_KEYS = 3


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

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size", "max_batches", "n_pair_tokens", "n_boot", "n_permutations",
                     "protocol_seq_len", "protocol_batches", "protocol_batch_size", "generalized_n"):
            integer(name, getattr(self, name))
        integer("seed", self.seed, 0)
        if self.max_batches < 4 or self.protocol_batches < 4:
            raise ConfigError(
                f"max_batches and protocol_batches must be >= 4 (two halves of >= 2 batches each: one picks the "
                f"best head, the other measures it with a bootstrap); got {self.max_batches} and {self.protocol_batches}."
            )
        if self.generalized_n < 2:
            raise ConfigError(f"generalized_n must be >= 2; got {self.generalized_n}.")
        if not isinstance(self.control, bool):
            raise ConfigError(f"control must be true or false; got {self.control!r}.")


@dataclass(frozen=True)
class HeldOut:
    """A statistic of one head (or of all heads), chosen on the selection half and measured on the other.

    ``null_draws`` are the statistic's draws under its null (permutations) or, for bootstrap tests, the
    bootstrap draws of ``value - null_value``; ``p_value`` is one-sided (greater than the null).
    """

    value: float
    ci: tuple[float, float]
    null_value: float
    p_value: float
    head: tuple[int, int] | None = None
    selection_value: float = float("nan")


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
    cooccurrence: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        """The numbers behind the findings, JSON-ready."""
        topic = self.held_out["topic_attention_best_head"]
        layer, head = topic.head
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
            "embedding": self.embedding.to_dict(),
            "cooccurrence": self.cooccurrence,
            "induction_top_heads": [[l, h, s] for l, h, s in self.text_heads.top_heads("induction", 5)],
            "induction_chance": self.text_heads.chance["induction"],
            "induction_protocol_top_heads": [[l, h, s] for l, h, s in self.protocol.top_heads("induction", 5)],
            "induction_protocol_chance": self.protocol.chance["induction"],
            "previous_token_top_heads": [[l, h, s] for l, h, s in self.text_heads.top_heads("previous_token", 3)],
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
        }


@dataclass
class PretrainedRun:
    """One pretrained model, its random-weight control, and the findings; :meth:`summary` goes to summary.json."""

    model: str
    info: ModelInfo
    token_map: TokenTopicMap
    measured: ModelMeasurements
    control: ModelMeasurements | None
    findings: dict[str, Finding]
    control_findings: dict[str, Finding]
    n_tokens: int
    extras: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        summary = self.measured.summary()
        summary.update({
            "findings": {name: finding.to_dict() for name, finding in self.findings.items()},
            "control": None if self.control is None else {
                "model": self.control.name,
                "findings": {name: finding.to_dict() for name, finding in self.control_findings.items()},
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
        return summary


def frequent_labelled_tokens(batches: Sequence[TokenBatch], labels: Tensor, k: int) -> list[int]:
    """The ``k`` most frequent topic-labelled token ids among the valid positions of ``batches``."""
    counts = torch.zeros(labels.shape[0], dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch.tokens[batch.valid].cpu(), minlength=labels.shape[0])[: labels.shape[0]]
    counts[labels < 0] = 0
    top = counts.topk(min(k, int((counts > 0).sum()))).indices
    return sorted(int(t) for t in top)


def halves(batches: Sequence[Any]) -> tuple[list[Any], list[Any]]:
    """(selection half, estimation half): the even and the odd batches."""
    return list(batches[0::2]), list(batches[1::2])


def _flat_argmax(table: Tensor) -> tuple[int, int]:
    flat = int(torch.nan_to_num(table.flatten().double(), nan=float("-inf")).argmax())
    return flat // table.shape[1], flat % table.shape[1]


def held_out_head_score(kind: str, selection: HeadScores, per_batch: Mapping[str, Tensor], *, n_boot: int,
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
                   float(selection.scores[kind][layer, head]))


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
                   float(selection.ratio[layer, head]))


def topic_mean_over_heads(whole: TopicAttention, per_batch: Mapping[str, Tensor], *, n_boot: int,
                          seed: int) -> HeldOut:
    """Same/different-topic ratio averaged over every head (no search): all batches, bootstrap over batches,
    label-permutation null of the same average."""
    units = {k: per_batch[k] for k in TOPIC_UNIT_KEYS}
    _, low, high = bootstrap_interval(units, lambda s: topic_ratio(s).flatten(1).nanmean(1), n_boot=n_boot,
                                      seed=seed)
    value = float(whole.ratio.double().nanmean())
    null = whole.null_ratio.double().flatten(1).nanmean(1)
    return HeldOut(value, (float(low), float(high)), float(null.mean()),
                   float(permutation_p_value(torch.tensor(value), null)))


def _ordering_per_head(attention: KeyTokenAttention) -> tuple[Tensor, Tensor]:
    """Distance-matched Spearman [layer head query] and the mask of query tokens with enough ranked keys."""
    ordering = cooccurrence_ordering(attention, measure="distance_matched")
    ranked = ordering.n_keys >= MIN_RANKED_KEYS
    if not bool(ranked.any()):
        raise InputError("Too few co-occurring topic tokens to rank; probe more text (raise max_batches).")
    return ordering.spearman.double(), ranked


def held_out_ordering(selection: KeyTokenAttention, estimation: KeyTokenAttention, *, n_boot: int,
                      n_permutations: int, seed: int) -> HeldOut:
    """The head whose distance-matched attention follows co-occurrence best on the selection half; on the
    estimation half its mean Spearman over query tokens, a bootstrap CI over query tokens, and the null with
    co-occurrence shuffled among each query's keys."""
    rho_a, ranked_a = _ordering_per_head(selection)
    layer, head = _flat_argmax(rho_a[:, :, ranked_a].nanmean(-1))
    rho_b, ranked_b = _ordering_per_head(estimation)
    values = rho_b[layer, head, ranked_b]
    finite = torch.isfinite(values)
    units = {"rho": torch.where(finite, values, 0.0), "n": finite.double()}
    value, low, high = bootstrap_interval(units, lambda s: s["rho"] / s["n"], n_boot=n_boot, seed=seed)
    null = ordering_null(estimation, min_keys=MIN_RANKED_KEYS, n_permutations=n_permutations, seed=seed)[:, layer, head]
    return HeldOut(float(value), (float(low), float(high)), float(null.mean()),
                   float(permutation_p_value(value, null)), (layer, head),
                   float(rho_a[layer, head, ranked_a].nanmean()))


def cooccurrence_summary(whole: KeyTokenAttention, best: HeldOut) -> dict[str, Any]:
    """Mean Spearman over heads and query tokens: distance-matched (the finding's measure) and per occurrence
    (confounded by position; kept for comparison), plus the held-out best head."""
    matched, ranked = _ordering_per_head(whole)
    raw = cooccurrence_ordering(whole).spearman.double()
    return {
        "spearman_distance_matched_mean": float(matched[:, :, ranked].nanmean()),
        "spearman_per_occurrence_mean": float(raw[:, :, ranked].nanmean()),
        "best_head": list(best.head),
        "best_head_spearman": best.value,
        "best_head_ci": list(best.ci),
        "null_value": best.null_value,
        "p_value": best.p_value,
        "query_tokens": int(ranked.sum()),
        "key_tokens": int(whole.key_tokens.numel()),
    }


def protocol_batches(info: ModelInfo, config: PretrainedConfig) -> list[TokenBatch]:
    """The repeated-random-token batches ``[BOS] X X`` of the induction protocol (seeded by ``config.seed``)."""
    generator = torch.Generator().manual_seed(config.seed)
    return [repeated_random_tokens(info, seq_len=config.protocol_seq_len, n_sequences=config.protocol_batch_size,
                                   generator=generator) for _ in range(config.protocol_batches)]


def _run_half(model: Any, batches: Sequence[TokenBatch], labels: Tensor, pair_tokens: list[int],
              config: PretrainedConfig, *, data: str, progress: bool):
    """One streamed pass over ``batches``: the probes and each batch's state increments for the bootstrap."""
    probes_list = [HeadScoreProbe(), GeneralizedInductionProbe(config.generalized_n),
                   TopicAttentionProbe(labels, n_permutations=config.n_permutations, permutation_seed=config.seed),
                   KeyTokenAttentionProbe(pair_tokens, pair_tokens, query_position="all", distance_matched=True)]
    recorder = BatchStateRecorder(keys=lambda key: not key.startswith(("null/", "by_topic/")))
    feed_probes(model, probes_list, batches, data=data, seed=config.seed, progress=progress,
                on_batch=lambda i, ps: recorder(i, [ps[0], ps[2]]))
    return probes_list, recorder


def measure_model(model: Any, name: str, batches: Sequence[TokenBatch], labels: Tensor, pair_tokens: list[int],
                  config: PretrainedConfig, *, data: str, progress: bool) -> ModelMeasurements:
    """Every statistic of the suite on ``model`` (see the module docstring)."""
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
                                      seed=seed)
    held_out = {
        "induction_protocol": held_out_head_score("induction", protocol_selection, protocol_recorder.per_unit(0),
                                                  n_boot=n_boot, seed=seed),
        "induction_text": held_out_head_score("induction", results_a[0], heads_b, n_boot=n_boot, seed=seed),
        "previous_token_text": held_out_head_score("previous_token", results_a[0], heads_b, n_boot=n_boot, seed=seed),
        "topic_attention_mean": topic_mean_over_heads(topic, topic_units, n_boot=n_boot, seed=seed),
        "topic_attention_best_head": held_out_topic(results_a[2], results_b[2], topic_b, n_boot=n_boot, seed=seed),
        "cooccurrence_ordering": ordering_best,
    }
    embedding = embedding_topic_test(model.W_E, labels, n_permutations=config.n_permutations, n_boot=n_boot, seed=seed)
    return ModelMeasurements(name=name, info=info, protocol=protocol, text_heads=text_heads, generalized=generalized,
                             topic=topic, ordering=ordering, embedding=embedding, held_out=held_out,
                             cooccurrence=cooccurrence_summary(ordering, ordering_best))


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
                                config, data=data, progress=progress)
        del control_model
    findings, control_findings = pretrained_findings(measured, control)
    passages = {
        "text": passage_patterns(model, batches[0], {
            "induction": measured.text_heads.top_heads("induction", 1)[0][:2],
            "previous_token": measured.text_heads.top_heads("previous_token", 1)[0][:2],
            "same-topic attention": measured.held_out["topic_attention_best_head"].head}),
        "repeated random tokens": passage_patterns(model, protocol_batches(info, config)[0], {
            "induction": measured.protocol.top_heads("induction", 1)[0][:2]}, max_tokens=2 * config.protocol_seq_len + 1),
    }
    return PretrainedRun(
        model=name, info=info, token_map=token_map, measured=measured, control=control, findings=findings,
        control_findings=control_findings, n_tokens=int(sum(int(b.valid.sum()) for b in batches)),
        extras={"config": asdict(config), "findings": list(PRETRAINED_FINDINGS), "passages": passages},
    )
