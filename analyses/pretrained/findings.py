"""The findings of a pretrained model: each statistic with its null, its control model, and a verdict.

Effect thresholds (``min_effect``; a finding also needs Holm-adjusted p < 0.01 and an interval above
both its null and the control model, see :mod:`probes.stats.findings`):

- head scores (induction on repeated random tokens and on text, previous token on text): at least
  0.1 more attention mass on the targets than the larger of chance and the control;
- same/different-topic attention ratios: at least 1.1 times the larger of the permutation null and
  the control (10% more attention to same-topic tokens);
- embedding topic similarity (mean-centred cosine, same minus different topic): at least 0.02 above
  the larger of the permutation null and the control;
- co-occurrence ordering (distance-matched Spearman of the held-out best head): at least 0.1 above
  the larger of the null and the control;
- head ablations (:mod:`analyses.pretrained.causal`; their own family, fixed-sequence adjusted): the loss
  change of the ablated top heads at least 0.1 nats per token above the larger of the 99th percentile of
  random head sets (same count per layer) and the control; 0.02 nats for the topic contrast (change on
  tokens whose topic already appeared minus on tokens whose topic did not). Fixed before any SmolLM2
  ablation was measured against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal, Protocol

from analyses.pretrained.held_out import HeldOut
from probes.dynamics.embedding_topics import EmbeddingTopicTest
from probes.stats.findings import Finding, adjust_family


class Measured(Protocol):
    """What the findings read from one model's measurements
    (:class:`analyses.pretrained.measure.ModelMeasurements`, which imports this module)."""

    @property
    def held_out(self) -> Mapping[str, HeldOut]: ...

    @property
    def embedding(self) -> EmbeddingTopicTest: ...

PRETRAINED_FINDINGS = ("induction_protocol", "induction_text", "previous_token_text", "topic_attention_mean",
                       "topic_attention_best_head", "embedding_topic_similarity", "cooccurrence_ordering")
EMBEDDING_MEASURE = "centred_cosine"
HEAD_SPLIT = "best head chosen on the even batches, measured on the odd batches"
TOPIC_ATTENTION_NULL = ("topic match shuffled among the pairs at the same distance (queries in the same doubling "
                        "bucket of positions)")
CAUSAL_FINDINGS = ("induction_heads_causal", "previous_token_causal", "topic_heads_causal")
"""Head ablations, one family per model tested in this fixed order (see :func:`causal_family`)."""
CIRCUIT_FINDING = "previous_token_to_induction_k_composition"
"""The circuit finding: the top previous-token head -> the top induction head through its keys, by path patching."""
CIRCUIT_NULL = "99th percentile of random edges at the same layer distance through the receiver's keys"
CAUSAL_NULL = "99th percentile of random head sets of the same size, matched layer by layer"
CAUSAL_SPLIT = "top heads chosen on the even batches, ablated on the odd batches"
THRESHOLDS_TEXT = ("head scores at least 0.1 attention mass above the larger of chance and the control; topic "
                   "attention ratios at least 1.1 times the larger of the permutation null and the control; the "
                   "mean-centred embedding cosine gap at least 0.02 above them; the distance-matched co-occurrence "
                   "Spearman at least 0.1 above them; a head ablation's loss change at least 0.1 nats per token "
                   "(0.02 for the topic contrast) above the larger of the 99th percentile of random head sets and "
                   "the control; the K-composition edge's induction score drop (the receiver's attention mass on its "
                   "induction targets) at least 0.1 above the larger of the 99th percentile of random edges (same "
                   "layer distance, through the keys) and the control.")

_SPECS: dict[str, tuple[str, str, Literal["difference", "ratio"], float, str]] = {
    # name: (statistic, null kind, effect, min_effect, selection)
    "induction_protocol": ("induction score of the best head on [BOS] X X (repeated random tokens)",
                           "uniform attention (bootstrap over batches)", "difference", 0.1, HEAD_SPLIT),
    "induction_text": ("induction score of the best head on natural text",
                       "uniform attention (bootstrap over batches)", "difference", 0.1, HEAD_SPLIT),
    "previous_token_text": ("previous-token score of the best head on natural text",
                            "uniform attention (bootstrap over batches)", "difference", 0.1, HEAD_SPLIT),
    "topic_attention_mean": ("same/different-topic attention ratio, mean over all heads",
                             TOPIC_ATTENTION_NULL, "ratio", 1.1, "no search: every head"),
    "topic_attention_best_head": ("same/different-topic attention ratio of the best head",
                                  TOPIC_ATTENTION_NULL, "ratio", 1.1, HEAD_SPLIT),
    "embedding_topic_similarity": ("mean-centred embedding cosine, same minus different topic",
                                   "topic labels permuted among labelled tokens", "difference", 0.02,
                                   "no search: the input embeddings"),
    "cooccurrence_ordering": ("Spearman of distance-matched attention with co-occurrence, best head",
                              "co-occurrence shuffled among each query's keys", "difference", 0.1, HEAD_SPLIT),
    "induction_heads_causal": ("loss change (nats/token) on the repeated half of [BOS] X X, top induction heads "
                               "mean-ablated", CAUSAL_NULL, "difference", 0.1, CAUSAL_SPLIT),
    "previous_token_causal": ("loss change (nats/token) on the repeated half of [BOS] X X, top previous-token heads "
                              "mean-ablated", CAUSAL_NULL, "difference", 0.1, CAUSAL_SPLIT),
    "topic_heads_causal": ("loss change (nats/token) on tokens whose LDA topic already appeared in the document "
                           "minus on tokens whose topic did not, top same-topic heads mean-ablated", CAUSAL_NULL,
                           "difference", 0.02, CAUSAL_SPLIT),
    CIRCUIT_FINDING: ("induction score drop (attention mass) of the top induction head on the repeated half of "
                      "[BOS] X X, the top previous-token head's output mean-replaced in its keys only (path "
                      "patching)", CIRCUIT_NULL,
                      "difference", 0.1, "heads chosen on the even batches (the sender in a layer below the "
                                         "receiver), the edge measured on fresh sequences"),
}


def min_effect_of(name: str) -> float:
    """The minimum effect the finding ``name`` must show above its reference (its threshold's distance)."""
    return _SPECS[name][3]


def finding_from_spec(name: str, value: float, ci: tuple[float, float], null_value: float, p_value: float, *,
                      head: tuple[int, int] | None = None, selection: str | None = None,
                      statistic: str | None = None, null_kind: str | None = None, n_units: int | None = None
                      ) -> Finding:
    """A :class:`Finding` named ``name`` with that finding's statistic, null kind and effect threshold
    (``statistic`` / ``null_kind`` replace the descriptions, e.g. to say which toy model it was measured on and
    what its null is there; ``n_units`` the units its interval resamples)."""
    default_statistic, default_null, effect, min_effect, default_selection = _SPECS[name]
    null_kind = default_null if null_kind is None else null_kind
    statistic = default_statistic if statistic is None else statistic
    if head is not None:
        statistic = f"{statistic} (L{head[0]}H{head[1]})"
    return Finding(statistic, value, ci, null_kind, null_value, p_value, min_effect, effect,
                   selection=default_selection if selection is None else selection, n_units=n_units)


def _finding(name: str, held: HeldOut) -> Finding:
    return finding_from_spec(name, held.value, held.ci, held.null_value, held.p_value, head=held.head,
                             n_units=held.n_units)


def model_findings(measured: Measured) -> dict[str, Finding]:
    """The seven findings of one model without a control, Holm-adjusted as one family."""
    findings = {name: _finding(name, measured.held_out[name]) for name in PRETRAINED_FINDINGS
                if name in measured.held_out}
    test = measured.embedding
    findings["embedding_topic_similarity"] = replace(finding_from_spec(
        "embedding_topic_similarity", test.gap[EMBEDDING_MEASURE], test.gap_ci[EMBEDDING_MEASURE],
        test.null_mean(EMBEDDING_MEASURE), test.p_value[EMBEDDING_MEASURE], n_units=test.n_tokens),
        null_draws=len(test.null_gaps[EMBEDDING_MEASURE]) or None, null_stop=test.null_stop)
    return {name: findings[name] for name in PRETRAINED_FINDINGS}


def pretrained_findings(measured: Measured, control: Measured | None
                        ) -> tuple[dict[str, Finding], dict[str, Finding]]:
    """``(findings, control_findings)``: each finding of the model beside the control's value; the control's
    own findings are judged against their nulls only (they should not hold)."""
    own = model_findings(measured)
    control_findings = adjust_family(model_findings(control)) if control is not None else {}
    if control is not None:
        own = {name: finding.with_control(control_findings[name].value, control_findings[name].ci)
               for name, finding in own.items()}
    return adjust_family(own), control_findings
