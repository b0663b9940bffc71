"""Masked-LM training of the topic models: loss, data, callbacks, exact checkpoint resume, TL variant."""

from __future__ import annotations

import math

import pytest
import torch

import probes
from mechprobe import records
from probes.attention.topic_attention import TopicAttentionProbe
from toymodels.errors import ToyConfigError
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.topic.data import LDAConfig, MaskingConfig
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.topic.training import (
    MaskedLMData,
    MaskedLMDataConfig,
    TopicTrainingConfig,
    attention_weights,
    batch_loss,
    masked_lm_loss,
    record_attention_norms,
    record_value,
    train_topic_model,
    training_fingerprint,
    value_l2_penalty,
)
from toymodels.training import Checkpointer, History

LDA = LDAConfig(n_topics=3, words_per_topic=4, min_len=8, max_len=12)
MASKING = MaskingConfig()


def data(**settings) -> MaskedLMData:
    """The training set of LDA with ``settings`` (MaskedLMDataConfig fields; ``seed`` draws it)."""
    seed = settings.pop("seed", 0)
    return MaskedLMData(LDA, MASKING, MaskedLMDataConfig(**settings), seed=seed)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def small_model(**kw) -> TopicModel:
    return TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id, d_model=8,
                                       n_ctx=LDA.max_len, words_per_topic=4, **kw))


def test_masked_lm_loss_values():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    targets = torch.tensor([[0, 2]])
    selected = torch.tensor([[True, False]])
    # squared: (2 - 1)^2 + 0 + 0 on the one selected position
    assert float(masked_lm_loss(logits, targets, selected, "squared")) == pytest.approx(1.0)
    expected_ce = -math.log(math.exp(2) / (math.exp(2) + 2))
    assert float(masked_lm_loss(logits, targets, selected, "cross_entropy")) == pytest.approx(expected_ce)
    assert float(masked_lm_loss(logits, targets, torch.zeros_like(selected), "squared")) == 0.0


def test_value_l2_penalty_by_hand_and_its_gradient():
    model = small_model(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen")
    with torch.no_grad():
        model.W_V.zero_()
        model.W_V[0, 0], model.W_V[0, 1], model.W_V[1, 1] = 1.0, 2.0, -1.0
    penalty = value_l2_penalty(model, 0.1)
    assert penalty.item() == pytest.approx(0.1 * (1 + 4 + 1))   # lambda * ||W_V||_F^2
    (grad,) = torch.autograd.grad(penalty, model.W_V)
    torch.testing.assert_close(grad, 2 * 0.1 * model.W_V.detach())
    assert float(value_l2_penalty(model, 0.0)) == 0.0
    frozen = small_model(embedding="one_hot_frozen", value="identity_frozen")
    assert float(value_l2_penalty(frozen, 0.1)) == 0.0     # nothing to regularise


def test_logged_loss_is_the_masked_lm_loss_plus_the_value_penalty():
    config = TopicTrainingConfig(n_steps=1, batch_size=8, lr=1e-2, loss="cross_entropy", value_l2=0.05, seed=3)
    variant = {"embedding": "one_hot_frozen", "attention": "uniform_frozen", "decoder": "identity_frozen",
               "init_std": 0.5}
    before = small_model(**variant)
    # the first batch the training loop draws: its generator is seeded with `seed`
    masked, key_mask = data(n_documents=64).batch(8, torch.Generator().manual_seed(3))
    with torch.no_grad():
        squares = float(before.W_V.pow(2).sum())
        expected = float(batch_loss(before, masked, key_mask, LDA.pad_id, "cross_entropy")) + 0.05 * squares
    history = train_topic_model(small_model(**variant), data(n_documents=64), config)
    assert history.column("loss")[0] == pytest.approx(expected, rel=1e-6)
    plain = train_topic_model(small_model(**variant), data(n_documents=64), TopicTrainingConfig(
        n_steps=1, batch_size=8, lr=1e-2, loss="cross_entropy", seed=3))
    assert history.column("loss")[0] - plain.column("loss")[0] == pytest.approx(
        0.05 * squares, rel=1e-5)


def test_static_masks_repeat_and_dynamic_masks_change():
    static = data(n_documents=1, static_masks=True)
    dynamic = data(n_documents=1, static_masks=False)
    g = torch.Generator().manual_seed(0)
    first, _ = static.batch(16, g)
    assert (first.selected == first.selected[:1]).all()   # one document, masked once
    second, key_mask = dynamic.batch(16, g)
    assert not (second.selected == second.selected[:1]).all()
    assert torch.equal(key_mask, ~second.selected)   # masked positions are hidden from the keys
    keep = data(exclude_masked_keys=False)
    assert keep.batch(4, g)[1].all()


def test_training_lowers_the_loss_and_records_norms():
    model = small_model()
    history = train_topic_model(model, data(n_documents=256), TopicTrainingConfig(n_steps=60, batch_size=16, lr=3e-2),
                                callbacks=[record_attention_norms(every=10),
                                           record_value("w_v_max", lambda m: float(m.W_V.abs().max()), every=30)])
    loss = history.column("loss")
    assert sum(loss[-10:]) / 10 < sum(loss[:10]) / 10
    norms = [v for v in history.column("w_v_norm") if not math.isnan(v)]
    assert len(norms) == 7   # steps 1, 10, ..., 60
    assert norms[-1] == pytest.approx(float(model.W_V.detach().norm()), rel=1e-6)
    assert {"w_k_norm", "w_q_norm", "w_v_max"} <= set(history.values)


def test_interrupted_run_resumes_to_the_same_weights(tmp_path):
    config = TopicTrainingConfig(n_steps=10, batch_size=8, lr=1e-2, seed=2)
    training_set = data(static_masks=False)
    straight = small_model()
    reference = train_topic_model(straight, training_set, config)

    def checkpointer(model):
        return Checkpointer(tmp_path, every=4, fingerprint=training_fingerprint(model, training_set, config))

    def crash(step, model, history):
        if step == 7:
            raise KeyboardInterrupt

    interrupted = small_model()
    with pytest.raises(KeyboardInterrupt):
        train_topic_model(interrupted, training_set, config, callbacks=[crash], checkpointer=checkpointer(interrupted))
    resumed = small_model()
    seen: list[int] = []
    history = train_topic_model(resumed, training_set, config, checkpointer=checkpointer(resumed),
                                callbacks=[lambda step, model, history: seen.append(step)])
    assert seen == [5, 6, 7, 8, 9, 10]  # the checkpoint at step 4 was read: only the later steps ran
    for a, b in zip(straight.parameters(), resumed.parameters()):
        assert torch.equal(a, b)
    assert history == reference
    assert records.load(History, records.strict_json(records.to_json(history))) == reference


def test_standard_bidirectional_tl_model_trains_and_is_probed():
    model = build_standard_model(StandardModelConfig(
        n_layers=1, n_heads=1, d_model=16, d_vocab=LDA.vocab_size, n_ctx=LDA.max_len, attn_only=True,
        positional="none", attention_dir="bidirectional", normalization="none"))
    assert set(attention_weights(model)) == {"W_Q", "W_K", "W_V"}
    history = train_topic_model(model, data(), TopicTrainingConfig(n_steps=5, batch_size=8, loss="cross_entropy"),
                                callbacks=[record_attention_norms()])
    assert len(history.column("w_k_norm")) == 5
    tokens = torch.randint(0, LDA.n_words, (2, 10))
    (result,) = probes.run_probes(model, [TopicAttentionProbe(LDA.token_topics())], [tokens], progress=False)
    assert result.ratio.shape == (1, 1) and result.chance_ratio == pytest.approx(1.0)


def test_bad_training_settings():
    with pytest.raises(ToyConfigError, match="static_masks"):
        MaskedLMDataConfig(n_documents=None, static_masks=True)
    with pytest.raises(ToyConfigError, match="lr"):
        TopicTrainingConfig(lr=0.0)
    with pytest.raises(ToyConfigError, match="loss"):
        TopicTrainingConfig(loss="hinge")
    for bad in (-1e-3, float("nan"), True):
        with pytest.raises(ToyConfigError, match="value_l2 must be a finite number >= 0"):
            TopicTrainingConfig(value_l2=bad)
    model = TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id))
    with pytest.raises(ToyConfigError, match="d_vocab"):
        train_topic_model(model, MaskedLMData(LDAConfig(), MASKING), TopicTrainingConfig(n_steps=1))
