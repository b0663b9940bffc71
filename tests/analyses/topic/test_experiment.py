"""``mechprobe toy topic``: summary keys, figures, the typed result's save/load, paper reference, flat and dotted
settings, bad settings, the fast preset."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest

from analyses.cli import main
from analyses.config_overrides import apply_overrides
from analyses.paper_reference import LI_2023
from analyses.topic.config import TopicModelSettings
from analyses.topic.experiment import PRESET_REFERENCES, PRESETS, TopicExperimentConfig, run
from analyses.topic.reference import topic_reference
from analyses.topic.result import TopicResult
from mechprobe import records
from probes.core.errors import ConfigError
from toymodels.errors import ToyConfigError
from toymodels.topic.data import LDAConfig
from toymodels.topic.training import MaskedLMDataConfig


def tiny(joint: int = 30, uniform: int = 20, fixed_value: int = 20, two_stage: int = 40) -> TopicExperimentConfig:
    """A run of seconds: 3 topics x 4 words, documents of 12-16 words, batch 16 in every stage."""
    paper = TopicExperimentConfig()
    changes = {"joint": dict(n_steps=joint, lr=1e-2), "uniform": dict(n_steps=uniform),
               "fixed_value": dict(n_steps=fixed_value), "two_stage": dict(n_steps=two_stage, lr=1.0), "standard": {}}
    return TopicExperimentConfig(
        lda=LDAConfig(n_topics=3, words_per_topic=4, min_len=12, max_len=16), data=MaskedLMDataConfig(n_documents=128),
        model=TopicModelSettings(d_model=8), record_every=5, eval_documents=16,
        **{stage: dataclasses.replace(getattr(paper, stage), batch_size=16, **c) for stage, c in changes.items()})


TINY = tiny()

REQUIRED = {"same_topic_attention": float, "different_topic_attention": float, "attention_ratio": float,
            "embedding_same_topic_cosine": float, "embedding_different_topic_cosine": float,
            "wv_block_score": float, "wv_block_score_uncentred": float, "wv_block_score_ceiling": float,
            "same_token_attention": float, "same_token_attention_self": float,
            "same_token_attention_other_positions": float, "two_stage": dict, "settings": dict, "reference": dict}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.mark.slow
def test_run_writes_summary_with_the_required_keys_and_figures(tmp_path):
    result = run(TINY, tmp_path, progress=False)
    written = json.loads((tmp_path / "summary.json").read_text())
    for key, kind in REQUIRED.items():
        assert isinstance(written[key], kind), key
    assert isinstance(written["two_stage"]["wv_moves_at"], int)
    assert written["two_stage"]["wkq_moves_at"] is None or isinstance(written["two_stage"]["wkq_moves_at"], int)
    assert written["settings"]["lda"]["n_topics"] == 3 and written["settings"]["seed"] == 0
    assert {claim["name"] for claim in written["claims"]} == {"1_embedding_topic_structure", "2_value_block_structure",
                                      "3_topic_attention_joint", "3_topic_attention_fixed_value",
                                      "4_two_stage_dynamics"}
    for claim in written["claims"]:
        assert {"value", "holds", "setting", "measure"} <= set(claim)
    assert result.attention_ratio == written["attention_ratio"]
    assert written["chance_ratio"] == pytest.approx(1.0)
    for name in ("embedding_gram.png", "value_matrix.png", "attention_by_topic.png", "norm_dynamics.png",
                 "history_two_stage.json"):
        assert (tmp_path / name).stat().st_size > 1000 or name.endswith(".json")
    assert not math.isnan(written["wv_block_score"])
    assert written["reference"]["paper"] == LI_2023 and written["reference"]["deviations"]
    assert written["wv_block"]["centred"] and written["settings"]["uniform"]["loss"] == "cross_entropy"
    # the reference code's same-token count includes the position itself: it lies between its two parts
    parts = sorted([written["same_token_attention_self"], written["same_token_attention_other_positions"]])
    assert parts[0] <= written["same_token_attention"] <= parts[1]


@pytest.mark.slow
def test_same_seed_same_numbers_and_seed_changes_them(tmp_path):
    config = tiny(joint=10, uniform=5, fixed_value=5, two_stage=20)
    a = run(config, tmp_path / "a", progress=False)
    b = run(config, tmp_path / "b", progress=False)
    c = run(dataclasses.replace(config, seed=1), tmp_path / "c", progress=False)
    assert a.attention_ratio == b.attention_ratio and a.wv_block_score == b.wv_block_score
    assert a.attention_ratio != c.attention_ratio


@pytest.mark.slow
def test_result_saves_and_loads_itself(tmp_path):
    config = tiny(joint=10, uniform=5, fixed_value=5, two_stage=20)
    result = run(config, tmp_path / "run", progress=False)
    assert TopicResult.load(tmp_path / "run") == result
    assert json.loads((tmp_path / "run" / "summary.json").read_text()) == json.loads(result.to_json())
    (tmp_path / "copy").mkdir()
    result.save(tmp_path / "copy")
    loaded = TopicResult.load(tmp_path / "copy")
    assert loaded == result and records.dump(loaded) == records.dump(result)
    assert set(loaded.histories) == {"joint", "uniform", "uniform_trained_decoder", "fixed_value", "two_stage"}
    for name, history in result.histories.items():
        assert records.to_json(loaded.histories[name]) == records.to_json(history), name
    assert loaded.claim("4_two_stage_dynamics").holds == result.two_stage.separated
    assert loaded.config == config
    assert TopicExperimentConfig.from_settings(json.loads(result.to_json())["settings"]) == config


def test_settings_are_the_nested_config_and_read_back():
    for config in (*PRESETS.values(), TINY):
        settings = json.loads(json.dumps(dataclasses.asdict(config)))  # as summary.json holds them
        assert TopicExperimentConfig.from_settings(settings) == config
    fast = dataclasses.asdict(PRESETS["fast"])
    assert (fast["joint"]["batch_size"], fast["joint"]["n_steps"], fast["lda"]["min_len"],
            fast["data"]["n_documents"]) == (32, 400, 40, 2048)
    odd = apply_overrides(PRESETS["fast"], ["joint.batch_size=8", "uniform.optimizer=sgd", "two_stage.momentum=0.5"])
    settings = dataclasses.asdict(odd)
    assert (settings["joint"]["batch_size"], settings["uniform"]["batch_size"]) == (8, 32)
    assert (settings["uniform"]["optimizer"], settings["two_stage"]["momentum"]) == ("sgd", 0.5)
    assert TopicExperimentConfig.from_settings(settings) == odd
    with pytest.raises(ConfigError, match="settings: unknown key 'bogus' for TopicExperimentConfig"):
        TopicExperimentConfig.from_settings({**fast, "bogus": 1})
    with pytest.raises(ConfigError, match=re.escape("settings: lda: unknown key 'n_topcs' for LDAConfig")):
        TopicExperimentConfig.from_settings({**fast, "lda": {**fast["lda"], "n_topcs": 3}})


def test_every_preset_names_the_paper_the_experiment_and_its_deviations():
    assert set(PRESET_REFERENCES) == set(PRESETS)
    for name, reference in PRESET_REFERENCES.items():
        assert reference == topic_reference(PRESETS[name])
        assert reference.paper == LI_2023 and "LDA" in reference.experiment and reference.followed
    paper, fast = PRESET_REFERENCES["paper"].deviations, PRESET_REFERENCES["fast"].deviations
    assert not [d for d in paper if "(paper:" in d]      # the paper preset has the paper's settings ...
    assert PRESETS["paper"].data.n_documents == 10_000
    assert "training documents: 2048 (paper: 10000)." in fast and "shortest document: 40 (paper: 100)." in fast
    code_like = topic_reference(apply_overrides(PRESETS["paper"], ["model.qkv_bias=true", "model.scale_scores=true",
                                                                   "uniform.loss=squared", "uniform.value_l2=0"]))
    added = set(code_like.deviations) - set(paper)        # ... and every override is named
    assert len(added) == 4 and any("Biases" in d for d in added) and any("1/sqrt(d)" in d for d in added)
    assert any("squared loss" in d for d in added) and any("without L2" in d for d in added)


def test_experiment_defaults_are_the_papers_experiments():
    config = PRESETS["paper"]
    assert {config.joint.loss, config.uniform.loss, config.fixed_value.loss, config.two_stage.loss} == {"cross_entropy"}
    assert config.uniform.value_l2 > 0 and not config.model.qkv_bias and not config.model.scale_scores
    assert config.training("uniform").value_l2 == config.uniform.value_l2
    assert config.training("joint").value_l2 == 0.0 and config.training("two_stage").value_l2 == 0.0
    model = apply_overrides(config, ["model.qkv_bias=true", "model.scale_scores=true"]).model_config()
    assert model.qkv_bias and model.scale_scores


def test_set_overrides_and_bad_settings():
    config = apply_overrides(PRESETS["fast"], ["seed=3", "lda.alpha=0.5", "two_stage.optimizer=adam"])
    assert (config.seed, config.lda.alpha, config.two_stage.optimizer) == (3, 0.5, "adam")
    assert config.training("two_stage").seed == 3   # every stage draws from the experiment's seed
    with pytest.raises(ConfigError, match="unknown setting"):
        apply_overrides(PRESETS["fast"], ["no_such_key=1"])
    with pytest.raises(ConfigError, match="integer"):
        apply_overrides(PRESETS["fast"], ["seed=abc"])
    for bad, message in (("lda.alpha=0", "alpha"), ("lda.alpha=-0.1", "alpha"), ("masking.p_select=1.5", "p_select"),
                         ("masking.frac_mask=0.5", "sum to 1"), ("lda.d_vocab=50", "does not fit"),
                         ("lda.min_len=1", "min_len"), ("uniform.value_l2=-1", "value_l2"),
                         ("model.qkv_bias=maybe", "boolean"), ("joint.seed=2", "Set seed=2 instead")):
        with pytest.raises(ConfigError, match=message):
            apply_overrides(PRESETS["fast"], [bad])
    with pytest.raises(ToyConfigError, match="alpha"):
        TopicExperimentConfig(lda=dataclasses.replace(LDAConfig(), alpha=0.0))


def test_cli_reports_bad_settings_without_a_traceback(tmp_path, capsys):
    assert main(["toy", "topic", "--preset", "fast", "--set", "lda.alpha=0", "--out", str(tmp_path)]) == 2
    assert "alpha" in capsys.readouterr().err
    assert main(["toy", "topic", "--preset", "fast", "--set", "bogus=1", "--out", str(tmp_path)]) == 2
    assert main(["toy", "topic", "--list-presets"]) == 0
    assert "paper" in capsys.readouterr().out


@pytest.mark.slow
def test_fast_preset_shows_all_four_claims_in_under_two_minutes(fast_toy_run):
    run = fast_toy_run("topic")  # `mechprobe toy topic --preset fast`, shared with test_determinism.py
    summary = json.loads((run.folder / "summary.json").read_text())
    assert json.loads((run.folder / "timings.json").read_text())["total"] < 120
    assert all(claim["holds"] for claim in summary["claims"]), summary["claims"]
    assert summary["attention_ratio"] > 2.0
    assert summary["embedding_same_topic_cosine"] > 0.5 > 0.0 > summary["embedding_different_topic_cosine"]
    assert summary["wv_block_score"] > 0.5 and summary["wv_block_score_ceiling"] == pytest.approx(0.879, abs=1e-3)
    assert summary["two_stage"]["separated"]
    assert summary["two_stage"]["wv_moves_at"] < summary["two_stage"]["wkq_moves_at"]
    assert "attention_ratio" in run.stdout
