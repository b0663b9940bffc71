"""mechprobe toy induction: summary schema, figures, the paper's claims on a small run, presets, errors."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import re

import pytest

from analyses.cli import main
from analyses.config_overrides import apply_overrides
from analyses.induction import experiment as toy_induction
from analyses.induction.findings import held_out_chains
from analyses.induction.trajectory import TRAJECTORY_KEYS, log_growth_fit, trajectory_steps
from mechprobe import records
from probes.core.errors import ConfigError

SMALL = ["n_train=256", "n_val=200", "train.stage_steps=10,10,40", "probe_sequences=32",
         "eval_seq_lens=(50,)", "eval_alphas=(1.0,)"]
REQUIRED = {"val_loss": float, "optimal_loss": float, "parent_share": dict, "true_parent_share": float,
            "copier_distance": list, "generalized_induction_score": float, "generalized_induction_chance": float,
            "settings": dict}
FIGURES = ["parent_share.png", "copier_heatmaps.png", "layer2_attention_example.png", "loss_vs_optimal.png",
           "trajectory.png"]


@pytest.mark.parametrize("model", ["simplified", "full"])
def test_tiny_run_writes_the_summary_schema_and_figures(tmp_path, model):
    config = apply_overrides(toy_induction.PRESETS["fast"],
                             [f"model={model}", "n_train=32", "n_val=16", "train.stage_steps=2,2,2", "data.seq_len=20",
                              "probe_sequences=8", "eval_seq_lens=(10,)", "eval_alphas=(1.0,)", "early_step=3",
                              "checkpoint_every=3"])
    result = toy_induction.run(config, tmp_path, progress=False)
    summary = records.dump(result)
    for key, kind in REQUIRED.items():
        assert isinstance(summary[key], kind), key
    assert result.steps == 6 and len(result.copier_distance) == 3
    assert sum(result.parent_share.values()) == pytest.approx(1.0, abs=1e-5)
    assert json.loads((tmp_path / "summary.json").read_text()) == json.loads(result.to_json())
    assert toy_induction.InductionResult.load(tmp_path) == result  # summary.json round-trips to the same result
    assert (tmp_path / "checkpoint" / "checkpoint.json").is_file()
    again = toy_induction.run(config, tmp_path, progress=False)  # resumes from the finished checkpoint
    assert again.val_loss == pytest.approx(result.val_loss)
    for name in FIGURES:
        assert (tmp_path / name).stat().st_size > 1000, name


def test_cli_run_on_the_paper_data_shows_selector_copier_and_classifier(tmp_path, capsys):
    """Paper data (S=3, n=3, L=100, alpha=0.1), simplified model, 256 chains, staged 10/10/40 steps."""
    out = tmp_path / "run"
    argv = ["toy", "induction", "--preset", "fast", "--out", str(out), "--no-progress"]
    assert main(argv + [arg for item in SMALL for arg in ("--set", item)]) == 0
    assert "wrote" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    for key, kind in REQUIRED.items():
        assert isinstance(summary[key], kind), key
    assert set(summary["parent_share"]) == {"{0}", "{1}", "{2}", "{0,1}", "{0,2}", "{1,2}"}
    assert summary["true_parent_subset"] == "{0,1}"
    assert summary["true_parent_share_early"] > 0.9 and summary["early_step"] == 10
    assert summary["true_parent_share"] > 0.99
    assert summary["copier_distance"][:2] == [1, 2]
    assert 0 < summary["val_loss"] - summary["optimal_loss"] < 0.03
    assert summary["generalized_induction_score"] > 0.9 > summary["generalized_induction_chance"] + 0.3
    assert summary["last_token_only_mass"] < 0.5 * summary["last_token_only_chance"]
    assert summary["parent_criterion_selected"] == "{1,2}"
    assert [(row["seq_len"], row["alpha"]) for row in summary["generalisation"]] == [(50, 0.1), (100, 1.0)]
    # The trained model stays near the optimum at another length and another alpha. Over seeds 0-5 of this
    # setting the gap at (L=50, alpha=0.1) runs 0.002..0.028 (optimum 0.20..0.29 nats) and at (L=100, alpha=1.0)
    # -0.005..0.102 (mean 0.043, sd 0.04; optimum 0.80..0.99); seed 0's are 0.003 and 0.102. The bounds leave
    # 2.5 sd above the largest; a model reading only the last 40 of the 100 tokens is off by 0.42 at alpha=1.0.
    gaps = {(row["seq_len"], row["alpha"]): row["gap"] for row in summary["generalisation"]}
    assert abs(gaps[50, 0.1]) < 0.06 and abs(gaps[100, 1.0]) < 0.2, gaps
    assert summary["settings"]["n_train"] == 256 and summary["settings"]["seed"] == 0
    for name in FIGURES:
        assert (out / name).stat().st_size > 1000, name


@pytest.mark.slow
def test_standard_model_path_writes_the_same_schema(tmp_path):
    config = apply_overrides(toy_induction.PRESETS["standard"],
                             ["data.seq_len=20", "standard_train.n_steps=4", "eval_every=2", "n_val=16",
                              "probe_sequences=8", "standard.d_model=16", "eval_seq_lens=(10,)", "eval_alphas=(1.0,)",
                              "n_train=32", "standard.attn_only=false", "standard.positional=rotary"])
    result = toy_induction.run(config, tmp_path, progress=False)
    summary = records.dump(result)
    for key, kind in REQUIRED.items():
        assert isinstance(summary[key], kind), key
    assert len(result.copier_distance) == 4
    assert result.model == "standard" and result.final_a is None
    assert json.loads((tmp_path / "summary.json").read_text())["steps"] == 4
    for name in FIGURES[:-1]:  # no trajectory without a selector
        assert (tmp_path / name).is_file(), name


@pytest.mark.parametrize("model", ["standard", "full"])
def test_the_parent_subsets_probed_include_the_true_set_beyond_order_3(model):
    # The probe's subsets went up to simplified.max_subset (2): at order 4 the true set {1,2,3} was missing and
    # probe_model raised a KeyError after training.
    settings = ["data.order=4", "data.seq_len=20", "n_val=8", "probe_sequences=8", "eval_seq_lens=(10,)"]
    if model == "standard":
        settings.append("standard.d_model=16")
    config = apply_overrides(toy_induction.PRESETS[model], settings)
    model_ = toy_induction.build_model(config).eval()
    found = toy_induction.probe_model(model_, config, held_out_chains(config)[:, :-1])
    assert "{1,2,3}" in found.parent_subset_attention
    if model == "standard":  # (the full model's selector names its subsets by layer-1 heads)
        assert found.true_parent_subset == "{1,2,3}"
    assert math.isfinite(found.true_parent_share)


def test_presets_and_overrides():
    assert set(toy_induction.PRESETS) == {"paper", "staged", "fast", "full", "standard"}
    paper = toy_induction.PRESETS["paper"]
    data, model, train = paper.data, paper.simplified, paper.train
    assert ((data.n_states, data.order, data.seq_len, data.alpha, paper.n_train, paper.n_val)
            == (3, 3, 100, 0.1, 9000, 1000))
    assert train.batch_size == 0 and model.n_heads == 3 and model.max_subset == 2
    # the reference code's main-text run: joint SGD lr 1 from c = a = 0.01, w+ = 3 / w- = 0.1 on windows h+1 .. h+3
    assert ((train.schedule, train.lr_c, train.lr_w, train.lr_a, model.c_init, model.a_init)
            == ("joint", 1, 1, 1, 0.01, 0.01))
    assert (model.w_plus, model.w_minus, model.window, model.head_windows) == (3.0, 0.1, 3, "shifted")
    assert model.empty_subset and model.token_subsets and train.loss == "probs_as_logits" and train.n_steps == 1000
    staged = toy_induction.PRESETS["staged"]
    assert (staged.train.schedule, staged.simplified.c_init, staged.simplified.a_init, staged.train.lr_c,
            staged.train.lr_w, staged.train.lr_a) == ("staged", 1.0, 1.0, 100.0, 10.0, 10.0)
    full = toy_induction.PRESETS["full"]
    assert (full.model, full.train.lr_c, full.simplified.w_plus, full.simplified.w_minus, full.train.n_steps,
            full.simplified.qk_init) == ("full", 0.01, 3.0, 0.01, 10_000, 0.01)
    changed = apply_overrides(paper, ["seed=3", "train.schedule=staged"])
    assert changed.seed == 3 and changed.train.schedule == "staged"
    with pytest.raises(ConfigError, match="head_windows"):
        apply_overrides(paper, ["simplified.head_windows=wide"])
    with pytest.raises(ConfigError, match="loss"):
        apply_overrides(paper, ["train.loss=mse"])
    for name, config in toy_induction.PRESETS.items():
        assert dataclasses.asdict(config)["model"] in ("simplified", "full", "standard"), name
    with pytest.raises(ConfigError, match="unknown setting"):
        apply_overrides(paper, ["nope=1"])
    with pytest.raises(ConfigError, match="integer"):
        apply_overrides(paper, ["data.seq_len=long"])
    with pytest.raises(ConfigError, match="max_subset"):
        apply_overrides(paper, ["simplified.max_subset=4"])
    with pytest.raises(ConfigError, match="divisible"):
        apply_overrides(toy_induction.PRESETS["standard"], ["standard.n_heads=3"])


def test_settings_round_trip_and_fields_the_experiment_fills_in_are_refused():
    for name, config in toy_induction.PRESETS.items():
        assert toy_induction.InductionExperimentConfig.from_settings(dataclasses.asdict(config)) == config, name
    fast = toy_induction.PRESETS["fast"]
    assert fast.simplified.a_init == 1.0 and fast.train.lr_c == 100.0  # the preset's values, not the components'
    assert fast.model_config().n_ctx == 201 and fast.training().seed == 1  # derived from eval_seq_lens and seed
    with pytest.raises(ConfigError, match=re.escape("simplified.seed is set by the experiment from seed")):
        apply_overrides(fast, ["simplified.seed=3"])
    with pytest.raises(ConfigError, match="unknown setting"):
        apply_overrides(fast, ["lr_c=1"])  # a section's field needs its section: train.lr_c


@pytest.mark.parametrize("setting, words", [("data.n_states=1", "n_states"), ("data.order=1", "order"),
                                            ("data.seq_len=3", "seq_len"), ("data.alpha=0", "alpha"),
                                            ("data.order=13", "data.order <= 12"),
                                            ("n_val=10", "probe_sequences (64) is more than the n_val (10)")])
def test_bad_data_settings_fail_with_a_clear_message(tmp_path, capsys, setting, words):
    assert main(["toy", "induction", "--preset", "fast", "--set", setting, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "summary.json").exists()


def test_every_preset_names_its_paper_experiment_and_deviations():
    assert set(toy_induction.PRESET_REFERENCES) == set(toy_induction.PRESETS)
    for name, reference in toy_induction.PRESET_REFERENCES.items():
        assert "Chen" in reference.paper and reference.experiment, name
        assert reference.deviations, name
    paper = toy_induction.PRESET_REFERENCES["paper"]
    assert paper.deviations == ("1000 steps (default; `--set train.n_steps=50000` for the reference's 50,000).",)
    assert any("probs_as_logits" not in f and "p as logits" in f for f in paper.followed)
    whole = toy_induction.induction_reference(apply_overrides(toy_induction.PRESETS["paper"], ["train.n_steps=50000"]))
    assert whole.deviations == ("None known beyond the followed notes.",)
    moved = toy_induction.induction_reference(apply_overrides(toy_induction.PRESETS["paper"], ["train.n_steps=50000",
                                                                                               "train.lr_c=0.5"]))
    assert moved.deviations == ("train.lr_c = 0.5 here; the reference run uses 1.0.",)
    assert "Appendix B" in toy_induction.PRESET_REFERENCES["full"].experiment


def test_trajectory_steps_are_dense_then_log_spaced():
    assert trajectory_steps(5) == [0, 1, 2, 3, 4, 5]
    steps = trajectory_steps(50_000)
    assert steps[:101] == list(range(101)) and steps[-1] == 50_000
    ratios = [b / a for a, b in itertools.pairwise(steps[100:-1])]
    assert all(1.08 < r < 1.16 for r in ratios)  # 20 per decade: 10 ** (1 / 20) = 1.122
    assert len(steps) == 101 + 54  # log10(500) = 2.7 decades after step 100, the last step included
    fit = log_growth_fit([10, 100, 1000, 10_000], [1.0, 3.0, 5.0, 7.0], from_step=10)
    assert fit["slope_per_ln_step"] == pytest.approx(2 / math.log(10)) and fit["r2"] == pytest.approx(1.0)


def test_paper_preset_small_run_records_the_trajectory_and_the_reference(tmp_path):
    """The joint reference run on 300 chains for 60 steps: the trajectory holds every step to 20 then
    log-spaced ones; the share of heads {0,1} passes 0.5 within 5 steps; a grows; the objective and
    our NLL are both reported; the trajectory figure is written."""
    config = apply_overrides(toy_induction.PRESETS["paper"],
                             ["n_train=300", "n_val=200", "train.n_steps=60", "probe_sequences=32",
                              "eval_seq_lens=(50,)", "eval_alphas=(1.0,)", "trajectory_dense_until=20",
                              "trajectory_per_decade=10"])
    result = toy_induction.run(config, tmp_path, progress=False)
    summary = records.dump(result)
    trajectory = summary["trajectory"]
    assert set(trajectory) == {"step", *TRAJECTORY_KEYS}
    assert trajectory["step"] == [*range(21), 25, 32, 40, 50, 60]
    assert all(len(trajectory[key]) == len(trajectory["step"]) for key in TRAJECTORY_KEYS)
    assert trajectory["true_parent_share"][0] == pytest.approx(1 / 7)
    assert trajectory["a"][0] == pytest.approx(0.01) and trajectory["a"][-1] > 1.0
    assert result.first_step_share_above_half <= 5 and result.true_parent_share > 0.95
    assert result.a_log_growth["slope_per_ln_step"] > 0 and result.a_log_growth["from_step"] == 20
    assert result.true_parent_subset == "{0,1}" and result.copier_distance[:2] == (1, 2)
    assert trajectory["train_loss"][-1] < trajectory["train_loss"][0]
    assert trajectory["train_loss"] != trajectory["train_nll"]  # the reference objective beside our NLL
    assert result.objective == "probs_as_logits"
    assert result.val_loss_objective == pytest.approx(trajectory["val_loss"][-1])
    assert result.parent_criterion_population_selected == "{1,2}" == result.parent_criterion_selected
    assert summary["reference"] == records.dump(toy_induction.induction_reference(config))
    assert (tmp_path / "trajectory.png").stat().st_size > 1000
    assert json.loads((tmp_path / "summary.json").read_text())["trajectory"]["step"] == trajectory["step"]
