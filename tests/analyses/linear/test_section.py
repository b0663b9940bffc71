"""The report's linear-probe section: findings that can hold and can fail, figures, and a lossless store."""

from __future__ import annotations

import json

import pytest
import torch

from analyses.linear.section import (LinearReportConfig, evenly_spaced, linear_findings, linear_section,
                                    load_linear_runs, save_linear_runs)
from probes import LinearProbe, PreviousTokenLabels, run_probes
from probes.core.errors import ConfigError
from tests.hooked_models import PreviousTokenWriter

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs():
    tokens = torch.randint(0, 12, (64, 20), generator=torch.Generator().manual_seed(1))
    out = {}
    for label, copies in (("planted", True), ("planted (random weights)", False)):
        probe = LinearProbe(PreviousTokenLabels((1, 2), tuple(range(12))), hooks=["hook_embed", "blocks.0.hook_resid_post"],
                            max_examples=800, n_folds=3, n_boot=300)
        (out[label],) = run_probes(PreviousTokenWriter(copies), [probe], list(tokens.split(16)), progress=False)
    return out


def test_a_planted_copier_holds_and_its_control_does_not(runs):
    findings = linear_findings(runs, n_boot=300, seed=0)
    planted, control = findings["planted"], findings["planted (random weights)"]
    assert planted["1"].holds and planted["1"].control_value == pytest.approx(control["1"].value)
    assert "blocks.0.hook_resid_post" in planted["1"].statistic
    assert not planted["2"].holds  # tok[t-2] was never written
    assert not any(f.holds for f in control.values())


def test_section_figure_and_store_round_trip(runs, tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    section, entry = linear_section(runs, figures, n_boot=300, seed=0)
    assert (figures / "linear_selectivity.png").stat().st_size > 1000
    assert [row[-1] for row in section.tables[0].rows] == ["holds", "no", "no", "no"]
    assert entry["planted"]["findings"]["1"]["holds"] is True
    assert entry["planted"]["layers"] == ["hook_embed", "blocks.0.hook_resid_post"]
    save_linear_runs(tmp_path / "linear", runs)
    again = load_linear_runs(tmp_path / "linear")
    assert list(again) == list(runs)
    _, entry_again = linear_section(again, figures, n_boot=300, seed=0)
    assert json.dumps(entry_again) == json.dumps(entry)
    assert load_linear_runs(tmp_path / "nothing") == {}


def test_settings_are_checked():
    assert evenly_spaced(tuple("abcdefghijk"), 4) == ("a", "d", "h", "k")
    assert evenly_spaced(("a", "b"), 7) == ("a", "b")
    with pytest.raises(ConfigError, match="n_hooks"):
        LinearReportConfig(n_hooks=1)
    with pytest.raises(ConfigError, match="max_examples"):
        LinearReportConfig(max_examples=3)


@pytest.mark.slow
def test_no_linear_finding_holds_on_random_weight_checkpoints(tmp_path):
    """The "can be false" half: tiny random-weight checkpoints of three architectures hold nothing."""
    import random

    from analyses.linear.section import run_linear_section
    from probes import load_model
    from probes.text.corpora import iter_documents
    from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics
    from tests.random_checkpoints import RANDOM_CHECKPOINT_KINDS, make_random_checkpoint

    documents = list(iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200, max_documents=600))
    topic_model = fit_lda_topics(documents, LdaTopicConfig(passes=2))
    random.Random(0).shuffle(documents)
    models = {kind: load_model(make_random_checkpoint(kind, tmp_path / kind, seed=3)) for kind in RANDOM_CHECKPOINT_KINDS}
    runs = run_linear_section(models, documents, topic_model, assign_word_topics(topic_model), {},
                              LinearReportConfig(), seed=0, progress=False)
    findings = linear_findings(runs, n_boot=1000, seed=0)
    assert len(findings) == 6 and all(len(per_key) == 4 for per_key in findings.values())
    held = [(label, key) for label, per_key in findings.items() for key, f in per_key.items() if f.holds]
    assert held == []
