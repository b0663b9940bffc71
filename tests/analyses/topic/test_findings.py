"""The topic toy's findings: they hold on the trained toy and not at initialisation, they fail with their
mechanism switched off, ``run`` measures them on the models it trains, and the summary keeps them."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from analyses.topic.config import PRESETS, TopicExperimentConfig
from analyses.topic.experiment import FINDINGS, run, seed_findings
from analyses.topic.findings import UNIFORM_VARIANT, block_score_of_masses, value_column_masses
from analyses.topic.result import TopicResult
from analyses.toy_findings import aggregate_seeds
from probes.core.errors import ConfigError
from probes.dynamics.block_structure import block_structure, centred_block_ceiling
from tests.analyses.topic.test_experiment import tiny
from toymodels.topic.data import LDAConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ATTENTION = ("topic_attention_mean", "topic_attention_best_head")
ATTENTION_OFF = {"embedding": "trained", "attention": "uniform_frozen"}
VALUE_OFF = {**UNIFORM_VARIANT, "value": "identity_frozen", "decoder": "trained"}   # the decoder is all that trains


def small() -> TopicExperimentConfig:
    """The fast preset cut to seconds: 5 topics x 6 words, documents of 20-30 words, 200 joint and 100 W_V steps."""
    fast = PRESETS["fast"]
    return dataclasses.replace(
        fast, lda=LDAConfig(n_topics=5, words_per_topic=6, min_len=20, max_len=30),
        data=dataclasses.replace(fast.data, n_documents=512), model=dataclasses.replace(fast.model, d_model=16),
        joint=dataclasses.replace(fast.joint, n_steps=200), uniform=dataclasses.replace(fast.uniform, n_steps=100),
        eval_documents=32)


def _held(findings) -> list[str]:
    return [name for name, finding in findings.items() if finding.holds]


def test_trained_toy_holds_every_finding_and_the_toy_at_initialisation_none():
    one = seed_findings(small(), 0)
    assert one.seed == 0 and tuple(one.findings) == FINDINGS
    assert _held(one.findings) == list(FINDINGS), {n: f.to_dict() for n, f in one.findings.items()}
    assert _held(one.control) == []
    # one head: the mean over heads and the best head are the same number, from the same code path
    mean, best = (one.findings[name] for name in ATTENTION)
    assert (mean.value, mean.ci, mean.p_value) == (best.value, best.ci, best.p_value)
    # the initialised toy attends almost uniformly: its ratio is the permutation null's, 1
    assert one.findings["topic_attention_mean"].control_value == pytest.approx(1.0, abs=0.01)


def test_attention_and_value_switched_off_hold_neither_finding_but_embeddings_still_do():
    one = seed_findings(small(), 0, joint_variant=ATTENTION_OFF, uniform_variant=VALUE_OFF)
    assert not [name for name in (*ATTENTION, "value_block_structure") if one.findings[name].holds]
    assert one.findings["topic_attention_mean"].value == pytest.approx(1.0, abs=1e-6)   # uniform attention
    assert one.findings["value_block_structure"].value == pytest.approx(0.0, abs=1e-9)  # W_V = identity
    assert one.findings["embedding_topic_similarity"].holds   # switching attention off leaves the embeddings alone


def test_frozen_embeddings_and_a_planted_but_unlearned_value_matrix_do_not_hold():
    planted = {**UNIFORM_VARIANT, "value": "block_frozen", "decoder": "trained"}
    one = seed_findings(small(), 0, joint_variant={"embedding": "one_hot_frozen"}, uniform_variant=planted)
    assert not one.findings["embedding_topic_similarity"].holds
    assert one.findings["embedding_topic_similarity"].value == pytest.approx(0.0, abs=1e-9)  # one-hot rows
    # W_V is the ideal block matrix, but so is the toy at initialisation: the control, not the null, stops it
    value = one.findings["value_block_structure"]
    ceiling = centred_block_ceiling(small().lda.token_topics()[: small().lda.n_words])
    assert value.value == pytest.approx(ceiling) and value.control_value == pytest.approx(ceiling)
    assert value.p_value < 0.01 and not value.holds


def test_column_masses_give_the_block_score_of_block_structure():
    labels = torch.arange(100) // 10
    ideal = (labels[:, None] == labels[None, :]).double()
    noisy = ideal + torch.randn(100, 100, generator=torch.Generator().manual_seed(0))
    for matrix in (ideal, noisy):
        for centre in (False, True):
            masses = {k: v.sum(0, keepdim=True) for k, v in value_column_masses(matrix, labels, centre=centre).items()}
            expected = block_structure(matrix, labels, centre_columns=centre).score
            assert float(block_score_of_masses(masses)[0]) == pytest.approx(expected, abs=1e-12)
    ideal_masses = {k: v.sum(0, keepdim=True) for k, v in value_column_masses(ideal, labels, centre=True).items()}
    assert float(block_score_of_masses(ideal_masses)[0]) == pytest.approx(0.879, abs=1e-3)  # the centred ceiling


def test_seed_findings_wants_a_topic_config():
    with pytest.raises(ConfigError, match="TopicExperimentConfig"):
        seed_findings(PRESETS["fast"].lda, 0)


@pytest.mark.slow
def test_fast_preset_holds_every_finding_on_three_seeds_and_initialisation_holds_nothing():
    seeds = [seed_findings(PRESETS["fast"], seed) for seed in (0, 1, 2)]
    for one in seeds:
        assert _held(one.findings) == list(FINDINGS), (one.seed, {n: f.to_dict() for n, f in one.findings.items()})
        assert _held(one.control) == [], one.seed
        assert one.findings["value_block_structure"].value > 0.8   # the centred ceiling is 0.879
    over_seeds = aggregate_seeds("topic", seeds)   # the Student-t interval over 3 seeds clears the references
    for name, finding in over_seeds.items():
        assert finding.holds and finding.held == 3, name
        assert not finding.control_finding().holds, name


@pytest.mark.slow
def test_run_measures_the_findings_on_its_own_models_and_the_summary_keeps_them(tmp_path):
    config = tiny(joint=10, uniform=5, fixed_value=5, two_stage=20)
    result = run(config, tmp_path, progress=False)
    assert result.findings == aggregate_seeds("topic", [seed_findings(config, config.seed)])
    assert result.toy_findings() is result.findings
    written = json.loads((tmp_path / "summary.json").read_text())
    assert tuple(written["findings"]) == FINDINGS
    assert written["findings"]["value_block_structure"]["seeds"]["seeds"] == [config.seed]
    loaded = TopicResult.load(tmp_path)
    assert loaded.findings == result.findings and loaded == result
