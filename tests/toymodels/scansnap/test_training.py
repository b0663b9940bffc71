"""Two-learning-rate training on the co-occurrence task: the paper's claims on small settings."""

from __future__ import annotations

import math

import pytest
import torch

from probes.attention.key_token_attention import entropy_nats
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.scansnap.training import (
    TwoRateConfig,
    make_two_rate_optimizers,
    parameter_groups,
    train_on_cooccurrence,
)
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import Checkpointer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


@pytest.fixture(scope="module")
def paper_run():
    """The paper's main run: 2 facts, vocabulary 34, L = 128, Y = Z = 0, SGD momentum 0.9, eta = 1."""
    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab))
    history = train_on_cooccurrence(model, data, TwoRateConfig(eta_y=1.0, eta_z=1.0, n_steps=100, seed=0))
    return data, model, history


def test_loss_falls_from_log_34_below_005_within_10_steps(paper_run):
    _, _, history = paper_run
    losses = history.values["loss"]
    assert losses[0] == pytest.approx(math.log(34), abs=1e-5)  # step 1 is the loss at initialisation
    assert min(losses[:10]) < 0.05
    assert losses[-1] < 1e-3


def test_attention_moves_from_common_to_distinct_tokens(paper_run):
    data, model, _ = paper_run
    c = model.expected_attention(data.fact_last, data.context_probs)
    distinct = torch.gather(c, 1, data.distinct_tokens).sum(1)
    common = c[:, data.common_tokens].sum(1)
    # at the start (uniform attention) common tokens hold 10 / 15.5 = 0.645 of the mass
    assert (common > 0.3).all() and (distinct > 1.4 * common).all()
    per_token_ratio = (distinct / data.config.num_distinct) / (common / data.config.num_common)
    assert (per_token_ratio > 1.4).all()


def test_distinct_attention_follows_cooccurrence_and_does_not_collapse(paper_run):
    data, model, _ = paper_run
    c = model.expected_attention(data.fact_last, data.context_probs)
    for fact in range(2):
        distinct = c[fact, data.distinct_tokens[fact]]
        assert (distinct.diff() > 0).all()  # ordered like linspace(0.1, 1.0): low co-occurrence lowest
        z = model.Z[data.fact_last[fact], data.distinct_tokens[fact]].detach()
        assert (z.diff() > 0).all()  # the learned logits themselves follow co-occurrence
        assert distinct.max() < 0.5 * distinct.sum()  # not winner-take-all


def test_snap_attention_freezes_once_the_loss_is_small():
    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab))
    snapshots = []
    train_on_cooccurrence(model, data, TwoRateConfig(n_steps=100),
                          callbacks=[lambda step, m, h: snapshots.append(m.Z.detach().clone())])
    early = (snapshots[29] - snapshots[9]).abs().max()
    late = (snapshots[99] - snapshots[79]).abs().max()
    assert late < 0.05 * early


def distinct_entropy(num_last: int, eta_z: float, ratio: float, seed: int) -> float:
    data = CooccurrenceData(CooccurrenceConfig(num_last=num_last, num_next_per_last=2, seq_len=64))
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=64, init="linear", seed=seed))
    train_on_cooccurrence(model, data, TwoRateConfig(eta_y=ratio * eta_z, eta_z=eta_z, n_steps=60, batch_size=64,
                                                     seed=seed))
    c = model.expected_attention(data.fact_last, data.context_probs)
    return float(entropy_nats(torch.gather(c, 1, data.distinct_tokens)).mean())


def test_small_sweep_entropy_falls_as_eta_z_grows():
    entropy = {eta_z: sum(distinct_entropy(1, eta_z, 1.0, seed) for seed in range(2)) / 2 for eta_z in (0.5, 2.0, 5.0)}
    assert entropy[0.5] > entropy[2.0] + 0.05 > entropy[5.0] + 0.1
    assert entropy[0.5] < math.log(10)


def test_parameter_groups_of_the_standard_model():
    model = build_standard_model(StandardModelConfig(n_layers=1, d_model=8, n_heads=1, d_vocab=6, n_ctx=4,
                                                     positional="none"))
    groups = parameter_groups(model)
    names = {id(p): n for n, p in model.named_parameters()}
    z_names = sorted(names[id(p)] for p in groups["Z"])
    assert z_names and all(".attn." in n and (".q." in n or ".k." in n) for n in z_names)
    y_names = [names[id(p)] for p in groups["Y"]]
    assert any(".v." in n for n in y_names) and not any(n.startswith("pos.") for n in y_names)  # frozen: excluded
    total = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert sum(p.numel() for g in groups.values() for p in g) == total


def test_two_optimisers_with_their_own_rates_and_adam_option():
    model = YZTransformer(YZModelConfig(d_vocab=5))
    opt_y, opt_z = make_two_rate_optimizers(model, TwoRateConfig(eta_y=0.3, eta_z=2.0))
    assert opt_y.param_groups[0]["lr"] == 0.3 and opt_y.param_groups[0]["params"][0] is model.Y
    assert opt_z.param_groups[0]["lr"] == 2.0 and opt_z.param_groups[0]["momentum"] == 0.9
    adam = make_two_rate_optimizers(model, TwoRateConfig(optimizer="adam", eta_y=0.1, eta_z=0.1))
    assert all(isinstance(o, torch.optim.Adam) for o in adam)


def test_standard_model_trains_on_the_same_data():
    data = CooccurrenceData(CooccurrenceConfig(seq_len=32))
    model = build_standard_model(StandardModelConfig(n_layers=1, d_model=16, n_heads=1, d_vocab=data.d_vocab,
                                                     n_ctx=32, positional="none"))
    history = train_on_cooccurrence(model, data, TwoRateConfig(eta_y=0.02, eta_z=0.02, optimizer="adam",
                                                               n_steps=25, batch_size=32))
    assert history.values["loss"][0] > 2.5 and history.values["loss"][-1] < 0.1


def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path):
    data = CooccurrenceData(CooccurrenceConfig(seq_len=16))
    config = TwoRateConfig(n_steps=6, batch_size=8)
    full = YZTransformer(YZModelConfig(d_vocab=34, n_ctx=16))
    train_on_cooccurrence(full, data, config)
    part = YZTransformer(YZModelConfig(d_vocab=34, n_ctx=16))
    train_on_cooccurrence(part, data, TwoRateConfig(n_steps=3, batch_size=8),
                          checkpointer=Checkpointer(tmp_path, every=3))
    resumed = YZTransformer(YZModelConfig(d_vocab=34, n_ctx=16))
    seen: list[int] = []
    history = train_on_cooccurrence(resumed, data, config, checkpointer=Checkpointer(tmp_path, every=3),
                                    callbacks=[lambda step, model, history: seen.append(step)])
    assert seen == [4, 5, 6]  # the checkpoint at step 3 was read: only the later steps ran
    assert history.steps == list(range(1, 7))
    assert torch.allclose(resumed.Z, full.Z) and torch.allclose(resumed.Y, full.Y)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"eta_y": 0.0}, "eta_y must be a finite number > 0"),
    ({"eta_z": float("nan")}, "eta_z must be a finite number > 0"),
    ({"optimizer": "rmsprop"}, "'sgd' or 'adam'"),
    ({"momentum": 1.0}, r"momentum must lie in \[0, 1\)"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1"),
    ({"n_steps": 2.5}, "n_steps"),
])
def test_bad_training_settings_raise_clear_errors(kwargs, fragment):
    with pytest.raises(ToyConfigError, match=fragment):
        TwoRateConfig(**kwargs)


def test_model_and_data_vocabularies_must_agree():
    data = CooccurrenceData(CooccurrenceConfig())
    with pytest.raises(ToyConfigError, match=r"vocabulary \(40\) differs from the data's \(34\)"):
        train_on_cooccurrence(YZTransformer(YZModelConfig(d_vocab=40)), data, TwoRateConfig(n_steps=1))
