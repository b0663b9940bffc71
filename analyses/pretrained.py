"""The probe suite on a pretrained model over real text with gensim LDA topics.

One streamed pass of the model over the corpus batches feeds every probe at once: head scores on
natural text, the generalized (trigram) induction score, same- vs different-topic attention and
per-key-token attention between the most frequent topic tokens (for co-occurrence ordering).
Confidence intervals are percentile bootstraps over batches (topic attention), query tokens
(co-occurrence ordering) or labelled tokens (embedding similarity).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from probes import HeadScoreProbe, HeadScores, ModelInfo, TokenBatch, feed_probes, head_scores, load_model
from probes.bootstrap import BatchStateRecorder, bootstrap_interval
from probes.cooccurrence import cooccurrence_ordering
from probes.embedding_topics import embedding_topic_similarity
from probes.errors import ConfigError, InputError
from probes.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores
from probes.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe
from probes.text_batches import text_token_batches
from probes.topic_attention import TopicAttention, TopicAttentionProbe
from probes.topics import TokenTopicMap, token_topic_labels

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PretrainedConfig:
    """How much text each pretrained model reads and how its statistics are computed."""

    seq_len: int = 128
    batch_size: int = 8
    max_batches: int = 16
    n_pair_tokens: int = 100
    control_top_n: int = 50
    n_boot: int = 1000
    protocol_seq_len: int = 50
    protocol_batches: int = 2
    generalized_n: int = 3
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size", "max_batches", "n_pair_tokens", "control_top_n", "n_boot",
                     "protocol_seq_len", "protocol_batches", "generalized_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
        if self.max_batches < 2:
            raise ConfigError(f"max_batches must be >= 2 for bootstrap intervals; got {self.max_batches}.")
        if self.generalized_n < 2:
            raise ConfigError(f"generalized_n must be >= 2; got {self.generalized_n}.")


@dataclass
class PretrainedRun:
    """Everything measured on one pretrained model; :meth:`summary` is its entry in summary.json."""

    model: str
    info: ModelInfo
    token_map: TokenTopicMap
    protocol: HeadScores
    text_heads: HeadScores
    generalized: GeneralizedInductionScores
    topic: TopicAttention
    topic_best_head: tuple[int, int]
    topic_ratio_ci: tuple[float, float]
    topic_mean_ratio_ci: tuple[float, float, float]
    embedding: dict[str, float]
    cooccurrence: dict[str, Any]
    n_tokens: int
    extras: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        layer, head = self.topic_best_head
        return {
            "same_topic_attention_ratio": {
                "best_head": [layer, head],
                "value": float(self.topic.ratio[layer, head]),
                "ci": list(self.topic_ratio_ci),
                "chance": self.topic.chance_ratio,
                "mean_over_heads": {"value": self.topic_mean_ratio_ci[0], "ci": list(self.topic_mean_ratio_ci[1:])},
                "same_topic_attention": float(self.topic.mean["same_topic"][layer, head]),
                "different_topic_attention": float(self.topic.mean["different_topic"][layer, head]),
                "pairs": self.topic.pairs,
            },
            "embedding_cosine_same": self.embedding["same_topic_cosine"],
            "embedding_cosine_different": self.embedding["different_topic_cosine"],
            "embedding": self.embedding,
            "cooccurrence_spearman": self.cooccurrence["spearman_mean"],
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
            "topic_words": {"words": self.token_map.n_words, "mapped": self.token_map.n_words_mapped,
                            "multi_token": self.token_map.n_multi_token_words,
                            "conflicting_tokens": self.token_map.n_conflicting_tokens,
                            "labelled_tokens": int((self.token_map.labels >= 0).sum())},
            "n_layers": self.info.n_layers,
            "n_heads": self.info.n_heads,
            "causal": self.info.causal,
            "tokens_probed": self.n_tokens,
            "seed": self.protocol.provenance.seed,  # the random tokens of the protocol and every bootstrap
        }


def frequent_labelled_tokens(batches: Sequence[TokenBatch], labels: Tensor, k: int) -> list[int]:
    """The ``k`` most frequent topic-labelled token ids among the valid positions of ``batches``."""
    counts = torch.zeros(labels.shape[0], dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch.tokens[batch.valid], minlength=labels.shape[0])[: labels.shape[0]]
    counts[labels < 0] = 0
    top = counts.topk(min(k, int((counts > 0).sum()))).indices
    return sorted(int(t) for t in top)


def embedding_similarity_with_ci(embedding: Tensor, labels: Tensor, *, n_boot: int, seed: int) -> dict[str, float]:
    """Same/different-topic cosine and dot, with a bootstrap CI of the cosine gap over labelled tokens.

    Each labelled token is a unit carrying its pair sums with every other labelled token.
    """
    similarity = embedding_topic_similarity(embedding, labels).to_dict()
    keep = labels >= 0
    vectors = embedding.detach().to("cpu", torch.float64)[keep]
    topics = labels[keep]
    unit = vectors / vectors.norm(dim=1, keepdim=True).clamp(min=1e-12)
    topic_sums = torch.zeros(int(topics.max()) + 1, unit.shape[1], dtype=torch.float64).index_add_(0, topics, unit)
    own = topic_sums[topics]
    same = (unit * own).sum(1) - 1.0
    different = unit @ unit.sum(0) - (unit * own).sum(1)
    sizes = torch.bincount(topics).double()[topics]
    per_token = {"same": same, "n_same": sizes - 1, "different": different, "n_different": len(topics) - sizes}
    gap, low, high = bootstrap_interval(
        per_token, lambda s: s["same"] / s["n_same"] - s["different"] / s["n_different"], n_boot=n_boot, seed=seed
    )
    similarity.update({"cosine_gap": float(gap), "cosine_gap_ci": [float(low), float(high)]})
    return similarity


def _topic_ratio_intervals(per_batch: Mapping[str, Tensor], best: tuple[int, int], *, n_boot: int, seed: int):
    keys = {k: per_batch[k] for k in ("same_topic/mass", "same_topic/pairs", "different_topic/mass",
                                      "different_topic/pairs")}

    def ratio(state: Mapping[str, Tensor]) -> Tensor:
        same = state["same_topic/mass"] / state["same_topic/pairs"][..., None, None]
        different = state["different_topic/mass"] / state["different_topic/pairs"][..., None, None]
        return same / different

    _, low, high = bootstrap_interval(keys, lambda s: ratio(s)[:, best[0], best[1]], n_boot=n_boot, seed=seed)
    mean, mean_low, mean_high = bootstrap_interval(
        keys, lambda s: ratio(s).flatten(1).mean(1), n_boot=n_boot, seed=seed
    )
    return (float(low), float(high)), (float(mean), float(mean_low), float(mean_high))


def cooccurrence_summary(attention: KeyTokenAttention, labels: Tensor, best: tuple[int, int], *,
                         top_n: int, n_boot: int, seed: int) -> dict[str, Any]:
    """Spearman of per-occurrence attention with corpus co-occurrence, and Li et al.'s control.

    ``spearman_mean``: Spearman over key tokens, averaged over query tokens and all heads;
    ``best_head``: the head with the highest mean, with a bootstrap CI over query tokens.
    Control: mean per-occurrence attention on same-topic pairs vs on the ``top_n`` most
    co-occurring pairs (distinct tokens), at the best topic-attention head and over all heads.
    """
    ordering = cooccurrence_ordering(attention)
    rho = ordering.spearman.double()  # layer head query
    ranked = ordering.n_keys >= 3
    if not bool(ranked.any()):
        raise InputError("Too few co-occurring topic tokens to rank; probe more text (raise max_batches).")
    per_head = rho[:, :, ranked].nanmean(-1)
    flat = torch.nan_to_num(per_head, nan=float("-inf")).flatten().argmax()
    layer, head = int(flat) // rho.shape[1], int(flat) % rho.shape[1]
    values = rho[layer, head, ranked]
    finite = torch.isfinite(values)
    units = {"rho": torch.where(finite, values, 0.0), "n": finite.double()}
    best_value, low, high = bootstrap_interval(units, lambda s: s["rho"] / s["n"], n_boot=n_boot, seed=seed)
    q_labels = labels[attention.query_tokens]
    k_labels = labels[attention.key_tokens]
    distinct = attention.query_tokens[:, None] != attention.key_tokens[None, :]
    seen = attention.occurrences > 0
    same_topic = (q_labels[:, None] == k_labels[None, :]) & distinct & seen
    candidates = torch.where(distinct & seen, attention.occurrences, torch.zeros_like(attention.occurrences))
    top = torch.zeros_like(seen)
    n_top = min(top_n, int((candidates > 0).sum()))
    top.view(-1)[candidates.flatten().topk(n_top).indices] = True
    per_occurrence = attention.per_occurrence.double()

    def mean_over(mask: Tensor) -> Tensor:
        return per_occurrence[:, :, mask].mean(-1)

    tl, th = best
    return {
        "spearman_mean": float(rho[:, :, ranked].nanmean()),
        "chance": 0.0,
        "best_head": [layer, head],
        "best_head_spearman": float(best_value),
        "best_head_ci": [float(low), float(high)],
        "query_tokens": int(ranked.sum()),
        "key_tokens": int(attention.key_tokens.numel()),
        "control": {
            "top_n": n_top,
            "same_topic_pairs": int(same_topic.sum()),
            "topic_head": [tl, th],
            "same_topic_attention": float(mean_over(same_topic)[tl, th]),
            "top_cooccurring_attention": float(mean_over(top)[tl, th]),
            "same_topic_attention_all_heads": float(mean_over(same_topic).mean()),
            "top_cooccurring_attention_all_heads": float(mean_over(top).mean()),
            "overlap_pairs": int((same_topic & top).sum()),
        },
    }


def probe_pretrained(model_spec: Any, documents: Sequence[Any], word_topics: Mapping[str, int],
                     config: PretrainedConfig = PretrainedConfig(), *, progress: bool = True,
                     data: str = "corpus", name: str | None = None) -> PretrainedRun:
    """Run the whole probe suite on one pretrained model (a spec for :func:`probes.load_model` or a loaded model).

    Example: ``probe_pretrained("minilm-l6", docs, assign_word_topics(topic_model))``.
    """
    model = load_model(model_spec)
    info = ModelInfo.of(model)
    tokenizer = getattr(model, "tokenizer", None)
    token_map = token_topic_labels(word_topics, tokenizer, info.d_vocab)
    batches = list(text_token_batches(documents, tokenizer, info, seq_len=config.seq_len,
                                      batch_size=config.batch_size, max_batches=config.max_batches))
    if len(batches) < 2:
        raise InputError(
            f"The corpus gave {len(batches)} batch(es) of text for {info.name}; at least 2 are needed "
            f"(bootstrap over batches). Use a larger corpus or a smaller batch_size."
        )
    pair_tokens = frequent_labelled_tokens(batches, token_map.labels, config.n_pair_tokens)
    if len(pair_tokens) < 3:
        raise InputError(
            f"Only {len(pair_tokens)} topic-labelled tokens occur in the probed text of {info.name}; the topic "
            f"probes need more. Use more text or more topic words."
        )
    heads = HeadScoreProbe()
    generalized = GeneralizedInductionProbe(config.generalized_n)
    topic = TopicAttentionProbe(token_map.labels)
    pairs = KeyTokenAttentionProbe(pair_tokens, pair_tokens, query_position="all")
    recorder = BatchStateRecorder(keys=lambda key: key.startswith(("same_topic/", "different_topic/")))
    probes_list = [heads, generalized, topic, pairs]
    feed_probes(model, probes_list, batches, data=data, seed=config.seed, progress=progress,
                on_batch=lambda i, ps: recorder(i, [ps[2]]))
    text_heads, generalized_result, topic_result, pair_result = (p.compute() for p in probes_list)
    # The head that moves the most attention toward same-topic tokens (a ratio alone favours heads
    # that barely attend to topic words at all).
    gap = topic_result.mean["same_topic"] - topic_result.mean["different_topic"]
    best_flat = int(torch.nan_to_num(gap.flatten(), nan=float("-inf")).argmax())
    best = (best_flat // info.n_heads, best_flat % info.n_heads)
    ratio_ci, mean_ratio = _topic_ratio_intervals(recorder.per_unit(0), best, n_boot=config.n_boot, seed=config.seed)
    protocol = head_scores(model, seq_len=config.protocol_seq_len, n_batches=config.protocol_batches,
                           seed=config.seed)
    embedding = embedding_similarity_with_ci(model.W_E, token_map.labels, n_boot=config.n_boot, seed=config.seed)
    cooccurrence = cooccurrence_summary(pair_result, token_map.labels, best, top_n=config.control_top_n,
                                        n_boot=config.n_boot, seed=config.seed)
    name = name or (model_spec if isinstance(model_spec, str) else info.name)
    return PretrainedRun(
        model=name, info=info, token_map=token_map, protocol=protocol, text_heads=text_heads,
        generalized=generalized_result, topic=topic_result, topic_best_head=best, topic_ratio_ci=ratio_ci,
        topic_mean_ratio_ci=mean_ratio, embedding=embedding, cooccurrence=cooccurrence,
        n_tokens=int(sum(int(b.valid.sum()) for b in batches)),
        extras={"config": asdict(config)},
    )
