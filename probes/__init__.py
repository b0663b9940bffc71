"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)

Subpackages, each with a public ``__init__``: ``core`` (the probe contract, the runner, batches, results,
loading, sharding, query-block attention), ``attention`` (probes of attention patterns), ``dynamics``
(measures on weights and training histories), ``text`` (corpora, LDA topics, token statistics), ``stats``
(bootstrap, nulls, findings, random-weight controls), ``linear`` (linear probes), ``causal`` (head ablation
against random head sets) and ``display`` (how results show themselves in a notebook: offline HTML, figures).
The flat module paths of mechprobe 0.1 (``probes.runner``, ``probes.linear_probe``, ...)
still import, with a ``DeprecationWarning`` naming the new path, until mechprobe 0.3.0; the six whose names are
now functions (``probes.head_scores``, ...) no longer import as modules (an ``import probes.head_scores as m``
bound the function) and say where the module went.
"""

import sys as _sys
import types as _types
import warnings as _warnings
from importlib import import_module as _import_module
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
from probes.attention import *
from probes.causal import *
from probes.core import *
from probes.dynamics import *
from probes.linear import *
from probes.stats import *
from probes.text import *

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
    "ABLATION_METHODS",
    "EDGE_INPUTS",
    "EFFECTS",
    "EMBEDDING_MEASURES",
    "HEAD_PATTERNS",
    "HEAD_SCORE_KINDS",
    "PACKAGED_MODELS",
    "TOPIC_PAIR_KINDS",
    "AblationPlan",
    "AblationSums",
    "BlockStructure",
    "Checkpoint",
    "CheckpointSeries",
    "CombinedLabels",
    "CompositionScores",
    "ConfigError",
    "CooccurrenceOrdering",
    "CopierProbe",
    "CopierProfile",
    "Document",
    "EdgeEffect",
    "EdgePlan",
    "EdgeSums",
    "EmbeddingTopicSimilarity",
    "EmbeddingTopicTest",
    "Finding",
    "GeneralizedInductionProbe",
    "GeneralizedInductionScores",
    "HeadAblation",
    "HeadMeans",
    "HeadPattern",
    "HeadScoreProbe",
    "HeadScores",
    "InputError",
    "KeyTokenAttention",
    "KeyTokenAttentionProbe",
    "LabelMaker",
    "LayerwiseProbe",
    "LdaTopicConfig",
    "LdaTopics",
    "LinearProbe",
    "LinearProbeScores",
    "MechprobeError",
    "ModelError",
    "ModelInfo",
    "NormEvents",
    "ParentCriterion",
    "ParentCriterionProbe",
    "ParentSubsetAttention",
    "ParentSubsetAttentionProbe",
    "PopulationParentCriterion",
    "PreviousTokenLabels",
    "Probe",
    "ProbeResult",
    "ProbeStateError",
    "Provenance",
    "RateSnap",
    "RowLabels",
    "SameTokenAttention",
    "SameTokenAttentionProbe",
    "ScanOrder",
    "SelectorShares",
    "SelectorWeightProbe",
    "SequentialNull",
    "SequentialRule",
    "SnapPoint",
    "TokenBatch",
    "TokenClassLabels",
    "TokenTopicMap",
    "TopicAttention",
    "TopicAttentionProbe",
    "TwoStage",
    "__version__",
    "ablation_sums",
    "ablation_with_null",
    "adjust_family",
    "as_token_batch",
    "assign_word_topics",
    "batch_ablation_sums",
    "block_structure",
    "capture",
    "centre_columns",
    "centred_block_ceiling",
    "check_heads",
    "checkpoint_series",
    "chi_square_parent_criterion",
    "composition_scores",
    "cooccurrence_ordering",
    "cooccurrence_probability",
    "corpus_digest",
    "count_cooccurrence",
    "derangement",
    "detect_snap",
    "detect_snap_by_rate",
    "detect_two_stage",
    "distance_matched_edges",
    "earlier_occurrence_mask",
    "edge_effect",
    "edge_sums",
    "edge_with_null",
    "embedding_topic_similarity",
    "embedding_topic_test",
    "entropy_nats",
    "feed_probes",
    "first_occurrence_mask",
    "fit_lda_topics",
    "head_ablation",
    "head_output_means",
    "head_pattern",
    "head_scores",
    "holm_adjust",
    "iter_documents",
    "kendall_tau_b",
    "label_permutations",
    "layer_matched_head_sets",
    "load_model",
    "maskable_positions",
    "masked_positions",
    "modified_chi_square_mi",
    "most_frequent_tokens",
    "norm_events",
    "ordering_null",
    "parent_match_mask",
    "pattern_hook",
    "peak_steps",
    "permutation_p_value",
    "population_parent_criterion",
    "predicted_positions",
    "random_weight_control",
    "repeated_half",
    "repeated_random_tokens",
    "residual_hooks",
    "run_probes",
    "same_token_attention",
    "scan_order",
    "screen_rank_correlation",
    "sequential_null",
    "signed_contrast",
    "slice_changes",
    "spearman",
    "stationary_distribution",
    "target_mask",
    "text_token_batches",
    "token_topic_labels",
    "topic_attention",
    "topic_seen_slice",
    "topic_unseen_slice",
    "z_hook",
]
