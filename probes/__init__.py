"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)

Subpackages, each with a public ``__init__``: ``core`` (the probe contract, the runner, batches, results,
loading, sharding, query-block attention), ``attention`` (probes of attention patterns), ``dynamics``
(measures on weights and training histories), ``text`` (corpora, LDA topics, token statistics), ``stats``
(bootstrap, nulls, findings, random-weight controls), ``linear`` (linear probes) and ``causal`` (head ablation
against random head sets). Every module is also
importable under its name before the subpackages existed (``probes.runner``, ``probes.head_scores``,
``probes.linear_probe``, ...), so older scripts keep working.
"""

import sys as _sys
from importlib import import_module as _import_module
from importlib import metadata as _metadata

from probes.core import *  # noqa: F401,F403
from probes.attention import *  # noqa: F401,F403
from probes.dynamics import *  # noqa: F401,F403
from probes.text import *  # noqa: F401,F403
from probes.stats import *  # noqa: F401,F403
from probes.linear import *  # noqa: F401,F403
from probes.causal import *  # noqa: F401,F403
from probes import attention, causal, core, dynamics, linear, stats, text  # noqa: E402

# The flat module names of mechprobe <= 0.1 (probes.runner, probes.linear_probe, ...) -> where each module lives now.
_MOVED_MODULES = {
    "atomic": "probes.core.atomic",
    "attention_rows": "probes.core.attention_rows",
    "batch": "probes.core.batch",
    "block_structure": "probes.dynamics.block_structure",
    "bootstrap": "probes.stats.bootstrap",
    "control_model": "probes.stats.control_model",
    "cooccurrence": "probes.text.cooccurrence",
    "copier": "probes.attention.copier",
    "corpora": "probes.text.corpora",
    "distributed": "probes.core.distributed",
    "embedding_topics": "probes.dynamics.embedding_topics",
    "errors": "probes.core.errors",
    "findings": "probes.stats.findings",
    "generalized_induction": "probes.attention.generalized_induction",
    "head_patterns": "probes.attention.head_patterns",
    "head_scores": "probes.attention.head_scores",
    "key_token_attention": "probes.attention.key_token_attention",
    "linear_fit": "probes.linear.fit",
    "linear_labels": "probes.linear.labels",
    "linear_probe": "probes.linear.probe",
    "loading": "probes.core.loading",
    "model_info": "probes.core.model_info",
    "nulls": "probes.stats.nulls",
    "parent_criterion": "probes.text.parent_criterion",
    "pattern_sums": "probes.core.pattern_sums",
    "probe": "probes.core.probe",
    "repeated_tokens": "probes.attention.repeated_tokens",
    "residual_hooks": "probes.linear.residual_hooks",
    "result": "probes.core.result",
    "runner": "probes.core.runner",
    "same_token_attention": "probes.attention.same_token_attention",
    "scan_order": "probes.dynamics.scan_order",
    "selector": "probes.attention.selector",
    "snap": "probes.dynamics.snap",
    "text_batches": "probes.text.text_batches",
    "topic_attention": "probes.attention.topic_attention",
    "topics": "probes.text.topics",
    "two_stage": "probes.dynamics.two_stage",
}
for _old, _new in _MOVED_MODULES.items():
    _module = _import_module(_new)
    _sys.modules[f"probes.{_old}"] = _module
    if _old not in globals():  # head_scores, scan_order, ... stay the functions of the same names
        globals()[_old] = _module
del _old, _new, _module

try:
    __version__ = _metadata.version("mechprobe")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    "EMBEDDING_MEASURES", "EmbeddingTopicTest", "Finding", "adjust_family", "embedding_topic_test", "holm_adjust",
    "label_permutations", "ordering_null", "permutation_p_value",
    "RateSnap", "SameTokenAttention", "SameTokenAttentionProbe", "ScanOrder", "centre_columns", "centred_block_ceiling",
    "PopulationParentCriterion", "modified_chi_square_mi", "population_parent_criterion", "stationary_distribution",
    "detect_snap_by_rate", "peak_steps", "same_token_attention", "scan_order",
    "HEAD_PATTERNS", "HEAD_SCORE_KINDS", "PACKAGED_MODELS", "TOPIC_PAIR_KINDS", "HeadPattern", "head_pattern",
    "BlockStructure", "ConfigError", "CooccurrenceOrdering", "CopierProbe", "CopierProfile", "Document",
    "EmbeddingTopicSimilarity", "GeneralizedInductionProbe", "GeneralizedInductionScores", "HeadScoreProbe",
    "HeadScores", "InputError", "KeyTokenAttention", "KeyTokenAttentionProbe", "LdaTopicConfig", "LdaTopics",
    "MechprobeError", "ModelError", "ModelInfo", "NormEvents", "ParentCriterion", "ParentCriterionProbe",
    "LayerwiseProbe", "ParentSubsetAttention", "ParentSubsetAttentionProbe", "Probe", "ProbeResult", "ProbeStateError", "Provenance",
    "SelectorShares", "SelectorWeightProbe", "SnapPoint", "TokenBatch", "TokenTopicMap", "TopicAttention",
    "TopicAttentionProbe", "TwoStage",
    "as_token_batch", "assign_word_topics", "block_structure", "capture", "chi_square_parent_criterion",
    "cooccurrence_ordering", "cooccurrence_probability", "corpus_digest", "count_cooccurrence", "detect_snap",
    "detect_two_stage", "embedding_topic_similarity", "entropy_nats", "feed_probes", "fit_lda_topics", "head_scores", "iter_documents",
    "kendall_tau_b", "load_model", "norm_events", "parent_match_mask", "pattern_hook", "random_weight_control",
    "repeated_random_tokens", "run_probes", "spearman", "target_mask", "text_token_batches", "token_topic_labels",
    "topic_attention",
    "CombinedLabels", "LabelMaker", "LinearProbe", "LinearProbeScores", "PreviousTokenLabels", "RowLabels",
    "TokenClassLabels", "most_frequent_tokens", "residual_hooks",
    "ABLATION_METHODS", "AblationPlan", "AblationSums", "HeadAblation", "HeadMeans", "ablation_sums",
    "batch_ablation_sums", "check_heads", "derangement", "earlier_occurrence_mask", "first_occurrence_mask",
    "head_ablation", "head_output_means", "layer_matched_head_sets", "maskable_positions", "masked_positions",
    "predicted_positions", "repeated_half", "topic_seen_slice", "topic_unseen_slice", "z_hook",
]
