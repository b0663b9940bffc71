"""``probes``' public face: ``probes.__all__`` is a pinned list of what a user of the API needs, each name with a
docstring and re-exported from one subpackage; every public name of ``probes.stats`` and ``probes.dynamics`` is in
it, the pieces they are built from stay in their subpackages, and ``import probes`` patches neither ``sys.modules``
nor ``sys.meta_path``.

Adding a public name is a deliberate act: add it to its subpackage's ``__all__``, to ``probes/__init__.py`` and to
``PUBLIC_NAMES`` below (and say so in CHANGELOG.md).
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import itertools
import sys
from pathlib import Path

import pytest

import probes

ROOT = Path(__file__).resolve().parents[2]
SUBPACKAGES = ("attention", "causal", "core", "display", "dynamics", "linear", "stats", "text")

PUBLIC_NAMES = [
    "ABLATION_METHODS", "BatchStateRecorder", "BlockStructure", "ChangePoint", "Checkpoint", "CheckpointSeries",
    "CombinedLabels", "CompositionScores", "ConfigError", "CooccurrenceOrdering", "CopierProbe", "CopierProfile",
    "CurveEvent", "CurveUnits", "Document", "EDGE_INPUTS", "EMBEDDING_MEASURES", "EdgeEffect",
    "EmbeddingTopicSimilarity", "EmbeddingTopicTest", "EventOrder", "ExactOrder", "Finding",
    "GeneralizedInductionProbe", "GeneralizedInductionScores", "HEAD_PATTERNS", "HEAD_SCORE_KINDS", "HeadAblation",
    "HeadPattern", "HeadScoreProbe", "HeadScores", "InputError", "KeyTokenAttention", "KeyTokenAttentionProbe",
    "LabelMaker", "LayerwiseProbe", "LdaTopicConfig", "LdaTopics", "LinearProbe", "LinearProbeScores", "MechprobeError",
    "ModelError", "ModelInfo", "NormEvents", "PACKAGED_MODELS", "ParentCriterion", "ParentCriterionProbe",
    "ParentSubsetAttention", "ParentSubsetAttentionProbe", "PopulationParentCriterion", "PreviousTokenLabels", "Probe",
    "ProbeResult", "ProbeStateError", "Provenance", "RateSnap", "RowLabels", "SameTokenAttention",
    "SameTokenAttentionProbe", "ScanOrder", "ScanSnapOrder", "SelectorShares", "SelectorWeightProbe", "SequentialNull",
    "SequentialRule", "SnapPoint", "TOPIC_PAIR_KINDS", "TokenBatch", "TokenClassLabels", "TokenTopicMap",
    "TopicAttention", "TopicAttentionProbe", "TwoStage", "__version__", "adjust_family", "as_token_batch",
    "assign_word_topics", "block_structure", "bootstrap_draws", "bootstrap_interval", "capture", "centre_columns",
    "centred_block_ceiling", "change_point", "checkpoint_series", "chi_square_parent_criterion",
    "composition_displacement", "composition_scores", "cooccurrence_ordering", "count_cooccurrence", "curve_event",
    "detect_snap", "detect_snap_by_rate", "detect_two_stage", "detectable_distance", "distance_matched_edges",
    "edge_effect", "edge_with_null", "embedding_topic_similarity", "embedding_topic_test", "event_order", "feed_probes",
    "fit_lda_topics", "fixed_sequence_adjust", "head_ablation", "head_pattern", "head_scores", "holm_adjust",
    "iter_documents", "label_permutations", "load_model", "masked_positions", "mean_sequence", "most_frequent_tokens",
    "norm_events", "ordering_null", "peak_steps", "percentile_interval", "permutation_p_value",
    "population_parent_criterion", "random_weight_control", "repeated_half", "repeated_random_tokens", "residual_hooks",
    "run_probes", "same_token_attention", "scan_order", "scan_snap_order", "screen_rank_correlation",
    "sequence_from_interval", "sequential_null", "sign_flip_p_value", "text_token_batches", "token_topic_labels",
    "topic_attention", "topic_seen_slice", "topic_unseen_slice", "units_for_power",
]

# Internals issue 48 found at the top level: still importable from their subpackages, no longer public.
INTERNALS = {"causal": ("z_hook", "batch_ablation_sums", "first_occurrence_mask"), "text": ("spearman",)}


def test_the_public_names_are_pinned():
    assert sorted(probes.__all__) == PUBLIC_NAMES
    assert len(set(probes.__all__)) == len(probes.__all__)


def test_probes_holds_its_public_names_and_subpackages_only():
    """No name reaches the top level without being listed (a star import or a helper would)."""
    held = {name for name in vars(probes) if not name.startswith("_")}
    assert held == set(probes.__all__) - {"__version__"} | set(SUBPACKAGES)


@pytest.mark.parametrize("name", sorted(set(PUBLIC_NAMES) - {"__version__"}))
def test_each_public_name_is_one_subpackages_public_name(name):
    """The top level re-exports; it defines nothing. Each name is public in exactly one subpackage."""
    homes = [sub for sub in SUBPACKAGES if name in importlib.import_module(f"probes.{sub}").__all__]
    assert len(homes) == 1, homes
    assert getattr(probes, name) is getattr(importlib.import_module(f"probes.{homes[0]}"), name)


def test_every_public_statistic_and_dynamics_measure_is_public_at_the_top():
    for sub in ("stats", "dynamics"):
        assert set(importlib.import_module(f"probes.{sub}").__all__) <= set(probes.__all__), sub


def attribute_docstrings(path: Path) -> dict[str, str]:
    """Module-level ``NAME = value`` (or ``NAME: T = value``) followed by a string literal: the name's docstring."""
    body = ast.parse(path.read_text(encoding="utf-8")).body
    docs = {}
    for node, after in itertools.pairwise(body):
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if (isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(target, ast.Name)
                and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)):
            docs[target.id] = after.value.value
    return docs


def test_every_public_name_has_a_docstring():
    """A class or function its own (not a base class's, not the signature a dataclass writes when it has none); a
    constant the string literal under its assignment in the module that defines it."""
    constants = {}
    for path in sorted((ROOT / "probes").rglob("*.py")):
        constants.update(attribute_docstrings(path))
    silent = []
    for name in sorted(set(probes.__all__) - {"__version__"}):
        obj = getattr(probes, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
            generated = dataclasses.is_dataclass(obj) and (doc or "").startswith(f"{obj.__name__}(")
            if not (doc or "").strip() or generated:
                silent.append(name)
        elif not constants.get(name, "").strip():
            silent.append(name)
    assert silent == []


@pytest.mark.parametrize("sub", sorted(INTERNALS))
def test_internals_stay_in_their_subpackages(sub):
    package = importlib.import_module(f"probes.{sub}")
    for name in INTERNALS[sub]:
        assert name not in probes.__all__ and not hasattr(probes, name), name
        assert callable(getattr(package, name)), name


def test_importing_probes_patches_neither_sys_modules_nor_meta_path():
    """Every ``probes.*`` entry of ``sys.modules`` is a module file of the package under its own name (the 0.1 flat
    paths, ``probes.runner`` and the rest, are gone), and no import finder comes from ``probes``."""
    package_dir = ROOT / "probes"
    for key, module in sorted(sys.modules.items()):
        if key == "probes" or key.startswith("probes."):
            assert module.__name__ == key, key
            assert Path(module.__file__).resolve().is_relative_to(package_dir), key
    assert [f for f in sys.meta_path if type(f).__module__.split(".")[0] == "probes"] == []
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("probes.runner")
