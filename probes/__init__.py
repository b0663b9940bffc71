"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)

Submodules hold one concept each: head_scores, topic_attention, embedding_topics,
key_token_attention, cooccurrence, snap, scan_order, same_token_attention, two_stage, block_structure, copier, selector,
generalized_induction, parent_criterion, linear_probe (probes and their results; linear_labels and
linear_fit: the linear probe's label makers and scikit-learn fitting; residual_hooks); corpora, topics, text_batches
(real text and gensim LDA topics); nulls, findings, control_model, bootstrap (statistics: nulls,
verdicts, random-weight controls); runner, distributed, loading (machinery).
"""

from importlib import metadata as _metadata

from probes.batch import TokenBatch, as_token_batch
from probes.block_structure import BlockStructure, block_structure, centre_columns, centred_block_ceiling
from probes.cooccurrence import (
    CooccurrenceOrdering,
    cooccurrence_ordering,
    cooccurrence_probability,
    count_cooccurrence,
    ordering_null,
    kendall_tau_b,
    spearman,
)
from probes.control_model import random_weight_control
from probes.copier import CopierProbe, CopierProfile
from probes.corpora import Document, corpus_digest, iter_documents
from probes.embedding_topics import (
    EMBEDDING_MEASURES,
    EmbeddingTopicSimilarity,
    EmbeddingTopicTest,
    embedding_topic_similarity,
    embedding_topic_test,
)
from probes.errors import ConfigError, InputError, MechprobeError, ModelError, ProbeStateError
from probes.findings import Finding, adjust_family
from probes.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores, parent_match_mask
from probes.head_patterns import HEAD_PATTERNS, HeadPattern, head_pattern
from probes.head_scores import HEAD_SCORE_KINDS, HeadScoreProbe, HeadScores, head_scores, target_mask
from probes.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, entropy_nats
from probes.linear_labels import (
    CombinedLabels,
    LabelMaker,
    PreviousTokenLabels,
    RowLabels,
    TokenClassLabels,
    most_frequent_tokens,
)
from probes.linear_probe import LinearProbe, LinearProbeScores
from probes.loading import PACKAGED_MODELS, load_model
from probes.model_info import ModelInfo, pattern_hook
from probes.parent_criterion import (
    ParentCriterion,
    ParentCriterionProbe,
    PopulationParentCriterion,
    chi_square_parent_criterion,
    modified_chi_square_mi,
    population_parent_criterion,
    stationary_distribution,
)
from probes.nulls import holm_adjust, label_permutations, permutation_p_value
from probes.probe import LayerwiseProbe, Probe
from probes.repeated_tokens import repeated_random_tokens
from probes.residual_hooks import residual_hooks
from probes.result import ProbeResult, Provenance
from probes.runner import capture, feed_probes, run_probes
from probes.selector import ParentSubsetAttention, ParentSubsetAttentionProbe, SelectorShares, SelectorWeightProbe
from probes.same_token_attention import SameTokenAttention, SameTokenAttentionProbe, same_token_attention
from probes.scan_order import ScanOrder, peak_steps, scan_order
from probes.snap import RateSnap, SnapPoint, detect_snap, detect_snap_by_rate
from probes.text_batches import text_token_batches
from probes.topic_attention import TOPIC_PAIR_KINDS, TopicAttention, TopicAttentionProbe, topic_attention
from probes.topics import LdaTopicConfig, LdaTopics, TokenTopicMap, assign_word_topics, fit_lda_topics, token_topic_labels
from probes.two_stage import NormEvents, TwoStage, detect_two_stage, norm_events

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
]
