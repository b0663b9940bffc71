"""The topic toy's findings: they hold on the trained toy and not at initialisation, they fail with their
mechanism switched off, ``run`` measures them on the models it trains, and the summary keeps them. The causal
finding (attention made uniform) holds on the fast preset, not on the smaller toy of most tests here."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from analyses.topic.config import PRESETS, TopicExperimentConfig
from analyses.topic.experiment import FINDINGS, run, seed_findings
from analyses.topic.findings import (
    JOINT_VARIANT,
    UNIFORM_VARIANT,
    block_score_of_masses,
    topic_absent,
    topic_heads_causal,
    topic_model,
    value_column_masses,
)
from analyses.topic.result import TopicResult
from analyses.toy_findings import aggregate_seeds, judge_against_init
from mechprobe import records
from probes.core.errors import ConfigError
from probes.dynamics.block_structure import block_structure, centred_block_ceiling
from tests.analyses.topic.test_experiment import tiny
from toymodels.topic.data import LDAConfig, MaskedDocuments
from toymodels.topic.training import MaskedLMData, train_topic_model

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

ATTENTION = ("topic_attention_mean", "topic_attention_best_head")
CAUSAL = "topic_heads_causal"
ATTENTION_OFF = {"embedding": "trained", "attention": "uniform_frozen"}
VALUE_OFF = {**UNIFORM_VARIANT, "value": "identity_frozen", "decoder": "trained"}   # the decoder is all that trains


def small() -> TopicExperimentConfig:
    """The fast preset cut to seconds: 5 topics x 6 words, documents of 20-30 words, 200 joint, 100 W_V and 200
    two-stage steps (the fast preset's 400 SGD steps at lr 10 diverge on this smaller toy, at step 357)."""
    fast = PRESETS["fast"]
    return dataclasses.replace(
        fast, lda=LDAConfig(n_topics=5, words_per_topic=6, min_len=20, max_len=30),
        data=dataclasses.replace(fast.data, n_documents=512), model=dataclasses.replace(fast.model, d_model=16),
        joint=dataclasses.replace(fast.joint, n_steps=200), uniform=dataclasses.replace(fast.uniform, n_steps=100),
        two_stage=dataclasses.replace(fast.two_stage, n_steps=200), eval_documents=32)


def _held(findings) -> list[str]:
    return [name for name, finding in findings.items() if finding.holds]


def test_trained_toy_holds_every_finding_and_the_toy_at_initialisation_none():
    one = seed_findings(small(), 0)
    assert one.seed == 0 and tuple(one.findings) == FINDINGS
    held = [name for name in FINDINGS if name != CAUSAL]
    assert _held(one.findings) == held, records.dump(one.findings)
    # 5 topics in 20-30 words: uniform attention already gives the document's topic mix, so the learned topic
    # attention (ratio 1.9) buys no loss (-0.001 nats; on the fast preset 0.04-0.06)
    assert abs(one.findings[CAUSAL].value) < 0.02
    assert _held(one.control) == []
    # one head: the mean over heads and the best head are the same number, from the same code path
    mean, best = (one.findings[name] for name in ATTENTION)
    assert (mean.value, mean.ci, mean.p_value) == (best.value, best.ci, best.p_value)
    # the initialised toy attends almost uniformly: its ratio is the permutation null's, 1
    assert one.findings["topic_attention_mean"].control_value == pytest.approx(1.0, abs=0.01)


def test_attention_and_value_switched_off_hold_neither_finding_but_embeddings_still_do():
    one = seed_findings(small(), 0, joint_variant=ATTENTION_OFF, uniform_variant=VALUE_OFF)
    assert not [name for name in (*ATTENTION, "value_block_structure", CAUSAL) if one.findings[name].holds]
    assert one.findings["topic_attention_mean"].value == pytest.approx(1.0, abs=1e-6)   # uniform attention
    # attention frozen uniform: making it uniform changes nothing, so every sign flip ties (p = 1)
    assert one.findings[CAUSAL].value == pytest.approx(0.0, abs=1e-9) and one.findings[CAUSAL].p_value == 1.0
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


def _joint_at_fast_preset(seed: int):
    """The fast preset's joint model trained at ``seed`` (the other models of ``seed_findings`` are not trained)."""
    config = dataclasses.replace(PRESETS["fast"], seed=seed)
    model = topic_model(config, **JOINT_VARIANT)
    train_topic_model(model, MaskedLMData(config.lda, config.masking, config.data, seed=seed), config.training("joint"))
    return config, model


def test_uniform_attention_costs_the_fast_joint_toy_loss_and_its_initialisation_none():
    config, model = _joint_at_fast_preset(0)
    init = topic_model(config, **JOINT_VARIANT)
    judged = judge_against_init({CAUSAL: topic_heads_causal(model, config)}, {CAUSAL: topic_heads_causal(init, config)},
                                0)
    finding, control = judged.findings[CAUSAL], judged.control[CAUSAL]
    # seed 0: 0.042 nats per masked token [0.031, 0.052]; seeds 0-4: 0.04-0.06, above the 0.02 threshold
    assert finding.holds and 0.03 < finding.value < 0.06 and finding.ci[0] > 0.02
    assert finding.p_value < 1e-3 and finding.null_value == 0.0
    # the initialised head attends almost uniformly: making it uniform changes the loss by < 1e-9 nats
    assert abs(control.value) < 1e-9 and not control.holds
    assert "120 of 9387 masked tokens have no other visible token of their topic" in finding.statistic


def test_topic_absent_marks_masked_tokens_without_another_visible_token_of_their_topic():
    inputs = torch.tensor([[0, 2, 1, 4]])    # 4 = [MASK]; topics of the words: 0, 1, 0
    selected = torch.tensor([[True, True, False, True]])
    masked = MaskedDocuments(inputs, torch.tensor([[0, 2, 1, 3]]), selected, torch.ones_like(selected))
    # masked keys hidden: position 0 (topic 0) sees word 1 (topic 0); 1 and 3 (topic 1) see no other topic-1 word
    assert topic_absent(masked, ~selected, LDAConfig(n_topics=2, words_per_topic=2).token_topics()).tolist() == \
        [[False, True, False, True]]


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
        assert _held(one.findings) == list(FINDINGS), (one.seed, records.dump(one.findings))
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
    assert written["findings"]["value_block_structure"]["seeds"] == [config.seed]
    loaded = TopicResult.load(tmp_path)
    assert loaded.findings == result.findings and loaded == result
