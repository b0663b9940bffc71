"""The report's linear-probe section: findings that can hold and can fail, figures, and a lossless store."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from analyses.report.linear_section import (
    LinearReportConfig,
    best_of_draws,
    evenly_spaced,
    linear_findings,
    linear_section,
    load_linear_runs,
    save_linear_runs,
)
from probes import LinearProbe, PreviousTokenLabels, run_probes
from probes.core.errors import ConfigError, InputError
from tests.hooked_models import PreviousTokenWriter

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def runs():
    tokens = torch.randint(0, 12, (64, 20), generator=torch.Generator().manual_seed(1))
    out = {}
    for label, copies in (("planted", True), ("planted (random weights)", False)):
        probe = LinearProbe(PreviousTokenLabels((1, 2), tuple(range(12))),
                            hooks=["hook_embed", "blocks.0.hook_resid_post"], max_examples=800, n_folds=3, n_boot=300)
        (out[label],) = run_probes(PreviousTokenWriter(copies), [probe], list(tokens.split(16)), progress=False)
    return out


def test_a_planted_copier_holds_against_its_control_and_a_control_against_itself_does_not(runs):
    findings = linear_findings(runs, n_boot=300, seed=0)
    assert list(findings) == ["planted"]  # a random-weight row is the reference, not a finding
    planted = findings["planted"]
    assert planted["1"].holds and "blocks.0.hook_resid_post" in planted["1"].statistic
    assert planted["1"].null_kind.startswith("token identity")
    assert planted["1"].control_value < 0.1 < planted["1"].value  # the control copies nothing
    assert not planted["2"].holds  # tok[t-2] was never written
    # A/A: the copier judged against itself gains nothing over its control, so nothing holds
    same = linear_findings({"copier": runs["planted"], "copier (random weights)": runs["planted"]}, n_boot=300, seed=0)
    assert not any(f.holds for f in same["copier"].values())
    assert all(f.control_value == f.value for f in same["copier"].values())


def test_best_of_draws_takes_each_layers_best_draw_example_by_example(runs):
    planted, control = runs["planted"], runs["planted (random weights)"]
    best = best_of_draws([control, planted], n_boot=300, seed=0)
    for key in ("1", "2"):
        for layer in range(2):
            winner = planted if planted.gain[key][layer] > control.gain[key][layer] else control
            assert torch.equal(best.correct[key][layer], winner.correct[key][layer])
            assert float(best.gain[key][layer]) == pytest.approx(float(winner.gain[key][layer]))
    assert best_of_draws([control], n_boot=300, seed=0) is control
    assert float(best.gain["1"][1]) > 0.5  # the copier's layer wins


def test_section_figure_and_store_round_trip(runs, tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    section, entry = linear_section(runs, figures, n_boot=300, seed=0)
    assert (figures / "linear_gain.png").stat().st_size > 1000
    assert [row[-1] for row in section.tables[0].rows] == ["holds", "absent"]
    assert entry["planted"]["results"]["1"]["statistic"] == "gain over token identity"
    assert entry["planted"]["results"]["1"]["baseline_kind"] == "token_identity"
    assert entry["planted (random weights)"]["findings"] == {}
    assert entry["planted"]["findings"]["1"]["holds"] is True
    assert entry["planted"]["layers"] == ["hook_embed", "blocks.0.hook_resid_post"]
    save_linear_runs(tmp_path / "linear", runs)
    again = load_linear_runs(tmp_path / "linear", expected=True)
    assert list(again) == list(runs)
    _, entry_again = linear_section(again, figures, n_boot=300, seed=0)
    assert json.dumps(entry_again) == json.dumps(entry)
    assert load_linear_runs(tmp_path / "nothing", expected=False) == {}
    # a result saved before the baselines (its field was "selectivity") fails with what to do
    folder = next(p for p in (tmp_path / "linear").iterdir() if p.is_dir())
    document = json.loads((folder / "result.json").read_text())
    document["result"]["selectivity"] = document["result"].pop("gain")
    (folder / "result.json").write_text(json.dumps(document))
    with pytest.raises(InputError, match=r"(?i)re-run mechprobe report"):
        load_linear_runs(tmp_path / "linear", expected=True)


def test_settings_are_checked():
    assert evenly_spaced(tuple("abcdefghijk"), 4) == ("a", "d", "h", "k")
    assert evenly_spaced(("a", "b"), 7) == ("a", "b")
    with pytest.raises(ConfigError, match="n_hooks"):
        LinearReportConfig(n_hooks=1)
    with pytest.raises(ConfigError, match="max_examples"):
        LinearReportConfig(max_examples=3)


def random_toy_folders(root) -> dict:
    """Random-weight induction and topic toys (the fast presets' models with every parameter redrawn, seed 11,
    apart from the control's draws 0-7), saved as toy run folders. Not the toys at initialisation: Chen et al.'s
    initialisation peaks head h at distance h + 1, so the induction toy copies its parents before any training."""
    from analyses.induction.config import PRESETS as INDUCTION
    from analyses.induction.findings import build_model
    from analyses.topic.config import PRESETS as TOPIC
    from analyses.topic.findings import JOINT_VARIANT, topic_model
    from analyses.toy_model_store import save_toy_model
    from probes.core.atomic import atomic_write_text
    from probes.stats.control_model import random_weight_control

    folders = {}
    for name, config, build in (("induction", INDUCTION["fast"], build_model),
                                ("topic", TOPIC["fast"], lambda c: topic_model(c, **JOINT_VARIANT))):
        config = dataclasses.replace(config, seed=11)
        folder = root / name
        folder.mkdir(parents=True)
        save_toy_model(random_weight_control(build(config), seed=11, redraw_unresettable=True), folder, name)
        atomic_write_text(folder / "summary.json", json.dumps({"settings": dataclasses.asdict(config)}))
        folders[f"{name} (random draw)"] = folder
    return folders


@pytest.mark.slow
def test_no_linear_finding_holds_with_random_weight_models_in_the_trained_models_place(tmp_path):
    """The "can be false" half, an A/A comparison: random-weight toys and tiny random-weight checkpoints of
    three architectures (GPT-NeoX, Gemma2, RoBERTa), each judged against its own random-weight control, hold
    nothing."""
    import random

    from analyses.report.linear_section import run_linear_section
    from probes import load_model
    from probes.text.corpora import iter_documents
    from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics
    from tests.random_checkpoints import RANDOM_CHECKPOINT_KINDS, make_random_checkpoint

    documents = list(iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200, max_documents=600))
    # 600 paragraphs are too few for held-out topics: paragraphs as LDA documents, every topic kept
    topic_model = fit_lda_topics(documents, LdaTopicConfig(passes=2, chunk_words=0, no_below=5, held_out_fraction=0.0))
    random.Random(0).shuffle(documents)
    models = {kind: load_model(make_random_checkpoint(kind, tmp_path / kind, seed=3))
              for kind in RANDOM_CHECKPOINT_KINDS}
    runs = run_linear_section(models, documents, topic_model, assign_word_topics(topic_model),
                              random_toy_folders(tmp_path / "toys"), LinearReportConfig(), seed=0, progress=False)
    findings = linear_findings(runs, n_boot=1000, seed=0)
    assert len(findings) == 5 and all(len(per_key) == (4 if "induction" in label else 2 if "topic" in label else 4)
                                      for label, per_key in findings.items())
    held = [(label, key, round(f.value, 3), round(f.control_value, 3)) for label, per_key in findings.items()
            for key, f in per_key.items() if f.holds]
    assert held == []
