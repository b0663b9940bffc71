"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)

Subpackages, each with a public ``__init__``: ``core`` (the probe contract, the runner, batches, results,
loading, sharding, query-block attention), ``attention`` (probes of attention patterns), ``dynamics``
(measures on weights and training histories), ``text`` (corpora, LDA topics, token statistics), ``stats``
(bootstrap, nulls, findings, random-weight controls), ``linear`` (linear probes) and ``causal`` (head ablation
against random head sets). The flat module paths of mechprobe 0.1 (``probes.runner``, ``probes.linear_probe``, ...)
still import, with a ``DeprecationWarning`` naming the new path, until mechprobe 0.3.0; the six whose names are
now functions (``probes.head_scores``, ...) no longer import as modules (an ``import probes.head_scores as m``
bound the function) and say where the module went.
"""

import sys as _sys
import types as _types
import warnings as _warnings
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
FLAT_PATHS_REMOVED_IN = "0.3.0"


class _MovedModule(_types.ModuleType):
    """``probes.<old>``: forwards every attribute to the module's new home, with a DeprecationWarning."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(f"probes.{old}", f"Moved to {new}; this path is removed in mechprobe {FLAT_PATHS_REMOVED_IN}.")
        self.__dict__["_new"] = new

    def __getattr__(self, name: str):
        new = self.__dict__["_new"]
        if name.startswith("__"):  # the import system's own questions (__path__, __spec__ ...), not a user's
            raise AttributeError(name)
        _warnings.warn(f"{self.__name__} is deprecated and is removed in mechprobe {FLAT_PATHS_REMOVED_IN}; "
                       f"import {new} instead.", DeprecationWarning, stacklevel=2)
        return getattr(_import_module(new), name)

    def __dir__(self) -> list[str]:
        return dir(_import_module(self.__dict__["_new"]))


class _ShadowedModuleFinder:
    """Refuses ``import probes.<name>`` where ``probes.<name>`` is now a function, naming the module's new path."""

    @staticmethod
    def find_spec(fullname: str, path=None, target=None):
        package, _, old = fullname.partition(".")
        if package == "probes" and old in _SHADOWED:
            raise ModuleNotFoundError(
                f"{fullname} is not a module any more: probes.{old} is the function of that name. The module moved "
                f"to {_MOVED_MODULES[old]}; import that.", name=fullname)
        return None


_SHADOWED = frozenset(old for old in _MOVED_MODULES if old in globals())
for _old, _new in _MOVED_MODULES.items():
    if _old not in _SHADOWED:
        _sys.modules[f"probes.{_old}"] = globals()[_old] = _MovedModule(_old, _new)
del _old, _new
if not any(isinstance(f, _ShadowedModuleFinder) for f in _sys.meta_path):
    _sys.meta_path.insert(0, _ShadowedModuleFinder())

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
