"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)

``__all__`` is what a user of the API needs: loading and running, the probe contract and results, the probes
themselves, text and topics, linear probes, the causal ablation, statistics and dynamics. The pieces they are built
from stay importable from their subpackages, each with a public ``__init__``: ``core`` (the probe contract, the
runner, batches, results, loading, sharding, query-block attention), ``attention`` (probes of attention patterns),
``dynamics`` (measures on weights and training histories), ``text`` (corpora, LDA topics, token statistics),
``stats`` (bootstrap, nulls, power, findings, random-weight controls), ``linear`` (linear probes), ``causal`` (head
ablation against random head sets: its plan, sums, means and slices) and ``display`` (how results show themselves
in a notebook: offline HTML, figures). Every public name of ``stats`` and ``dynamics`` is also public here.
"""

from importlib import metadata as _metadata

# the subpackages, re-exported as attributes (`probes.stats.holm_adjust`)
from probes import attention as attention
from probes import causal as causal
from probes import core as core
from probes import display as display
from probes import dynamics as dynamics
from probes import linear as linear
from probes import stats as stats
from probes import text as text
from probes.attention import (
    HEAD_PATTERNS,
    HEAD_SCORE_KINDS,
    TOPIC_PAIR_KINDS,
    CopierProbe,
    CopierProfile,
    GeneralizedInductionProbe,
    GeneralizedInductionScores,
    HeadPattern,
    HeadScoreProbe,
    HeadScores,
    KeyTokenAttention,
    KeyTokenAttentionProbe,
    ParentSubsetAttention,
    ParentSubsetAttentionProbe,
    SameTokenAttention,
    SameTokenAttentionProbe,
    SelectorShares,
    SelectorWeightProbe,
    TopicAttention,
    TopicAttentionProbe,
    head_pattern,
    head_scores,
    repeated_random_tokens,
    same_token_attention,
    topic_attention,
)
from probes.causal import (
    ABLATION_METHODS,
    EDGE_INPUTS,
    CompositionScores,
    EdgeEffect,
    HeadAblation,
    composition_scores,
    distance_matched_edges,
    edge_effect,
    edge_with_null,
    head_ablation,
    masked_positions,
    repeated_half,
    screen_rank_correlation,
    topic_seen_slice,
    topic_unseen_slice,
)
from probes.core import (
    PACKAGED_MODELS,
    Checkpoint,
    CheckpointSeries,
    ConfigError,
    InputError,
    LayerwiseProbe,
    MechprobeError,
    ModelError,
    ModelInfo,
    Probe,
    ProbeResult,
    ProbeStateError,
    Provenance,
    TokenBatch,
    as_token_batch,
    capture,
    checkpoint_series,
    feed_probes,
    load_model,
    run_probes,
)
from probes.dynamics import (
    EMBEDDING_MEASURES,
    BlockStructure,
    ChangePoint,
    CurveEvent,
    CurveUnits,
    EmbeddingTopicSimilarity,
    EmbeddingTopicTest,
    EventOrder,
    ExactOrder,
    NormEvents,
    RateSnap,
    ScanOrder,
    ScanSnapOrder,
    SnapPoint,
    TwoStage,
    block_structure,
    centre_columns,
    centred_block_ceiling,
    change_point,
    composition_displacement,
    curve_event,
    detect_snap,
    detect_snap_by_rate,
    detect_two_stage,
    embedding_topic_similarity,
    embedding_topic_test,
    event_order,
    norm_events,
    peak_steps,
    scan_order,
    scan_snap_order,
)
from probes.linear import (
    CombinedLabels,
    LabelMaker,
    LinearProbe,
    LinearProbeScores,
    PreviousTokenLabels,
    RowLabels,
    TokenClassLabels,
    most_frequent_tokens,
    residual_hooks,
)
from probes.stats import (
    BatchStateRecorder,
    Finding,
    SequentialNull,
    SequentialRule,
    adjust_family,
    bootstrap_draws,
    bootstrap_interval,
    detectable_distance,
    fixed_sequence_adjust,
    holm_adjust,
    label_permutations,
    mean_sequence,
    percentile_interval,
    permutation_p_value,
    random_weight_control,
    sequence_from_interval,
    sequential_null,
    sign_flip_p_value,
    units_for_power,
)
from probes.text import (
    CooccurrenceOrdering,
    Document,
    LdaTopicConfig,
    LdaTopics,
    ParentCriterion,
    ParentCriterionProbe,
    PopulationParentCriterion,
    TokenTopicMap,
    assign_word_topics,
    chi_square_parent_criterion,
    cooccurrence_ordering,
    count_cooccurrence,
    fit_lda_topics,
    iter_documents,
    ordering_null,
    population_parent_criterion,
    text_token_batches,
    token_topic_labels,
)

try:
    __version__ = _metadata.version("mechprobe")
except _metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "__version__",
    # loading models and running probes
    "PACKAGED_MODELS", "Checkpoint", "CheckpointSeries", "ModelInfo", "TokenBatch", "as_token_batch", "capture",
    "checkpoint_series", "feed_probes", "load_model", "run_probes",
    # the probe contract, results and errors
    "ConfigError", "InputError", "LayerwiseProbe", "MechprobeError", "ModelError", "Probe", "ProbeResult",
    "ProbeStateError", "Provenance",
    # attention probes and their results
    "HEAD_PATTERNS", "HEAD_SCORE_KINDS", "TOPIC_PAIR_KINDS", "CopierProbe", "CopierProfile",
    "GeneralizedInductionProbe", "GeneralizedInductionScores", "HeadPattern", "HeadScoreProbe", "HeadScores",
    "KeyTokenAttention", "KeyTokenAttentionProbe", "ParentSubsetAttention", "ParentSubsetAttentionProbe",
    "SameTokenAttention", "SameTokenAttentionProbe", "SelectorShares", "SelectorWeightProbe", "TopicAttention",
    "TopicAttentionProbe", "head_pattern", "head_scores", "repeated_random_tokens", "same_token_attention",
    "topic_attention",
    # text: corpora, LDA topics, co-occurrence, the parent criterion
    "CooccurrenceOrdering", "Document", "LdaTopicConfig", "LdaTopics", "ParentCriterion", "ParentCriterionProbe",
    "PopulationParentCriterion", "TokenTopicMap", "assign_word_topics", "chi_square_parent_criterion",
    "cooccurrence_ordering", "count_cooccurrence", "fit_lda_topics", "iter_documents", "ordering_null",
    "population_parent_criterion", "text_token_batches", "token_topic_labels",
    # linear probes on the residual stream
    "CombinedLabels", "LabelMaker", "LinearProbe", "LinearProbeScores", "PreviousTokenLabels", "RowLabels",
    "TokenClassLabels", "most_frequent_tokens", "residual_hooks",
    # causal: head ablation beside random head sets, and the slices it is measured on
    "ABLATION_METHODS", "HeadAblation", "head_ablation", "masked_positions", "repeated_half", "topic_seen_slice",
    "topic_unseen_slice",
    # causal: edges between heads by path patching beside random edges, and the weight-only composition screen
    "EDGE_INPUTS", "CompositionScores", "EdgeEffect", "composition_scores", "distance_matched_edges", "edge_effect",
    "edge_with_null", "screen_rank_correlation",
    # statistics: intervals, nulls, power, confidence sequences, verdicts, control models (all of probes.stats)
    "BatchStateRecorder", "Finding", "SequentialNull", "SequentialRule", "adjust_family", "bootstrap_draws",
    "bootstrap_interval", "detectable_distance", "fixed_sequence_adjust", "holm_adjust", "label_permutations",
    "mean_sequence", "percentile_interval", "permutation_p_value", "random_weight_control", "sequence_from_interval",
    "sequential_null", "sign_flip_p_value", "units_for_power",
    # dynamics: weights and training histories, change points, orders of events (all of probes.dynamics)
    "EMBEDDING_MEASURES", "BlockStructure", "ChangePoint", "CurveEvent", "CurveUnits", "EmbeddingTopicSimilarity",
    "EmbeddingTopicTest", "EventOrder", "ExactOrder", "NormEvents", "RateSnap", "ScanOrder", "ScanSnapOrder",
    "SnapPoint", "TwoStage", "block_structure", "centre_columns", "centred_block_ceiling", "change_point",
    "composition_displacement", "curve_event", "detect_snap", "detect_snap_by_rate", "detect_two_stage",
    "embedding_topic_similarity", "embedding_topic_test", "event_order", "norm_events", "peak_steps",
    "scan_order", "scan_snap_order",
]
