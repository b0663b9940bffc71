"""The paper-faithful topic model: formula, hooks, variants, biases and score scaling, key masking, config errors."""

from __future__ import annotations

import pytest
import torch

import probes
from toymodels.errors import ToyConfigError
from toymodels.topic.model import TopicModel, TopicModelConfig

SMALL = {"d_vocab": 14, "n_words": 12, "pad_id": 13, "d_model": 8, "n_ctx": 20, "words_per_topic": 4, "init_std": 0.3}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_forward_is_the_papers_formula_and_hooks_have_tl_names():
    model = TopicModel(TopicModelConfig(**SMALL))
    tokens = torch.tensor([[0, 5, 7, 11, 12, 3]])
    logits, cache = model.run_with_cache(tokens)
    Z = model.W_E[tokens[0]].T                                    # [d, N], columns = positions
    A = torch.softmax((model.W_K @ Z).T @ (model.W_Q @ Z), dim=0)  # A[k, q]: column q sums to 1 over keys
    expected = (model.W_dec @ (model.W_V @ Z @ A) + model.b_dec[:, None]).T
    torch.testing.assert_close(logits[0], expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, 0], A.T, atol=1e-6, rtol=1e-6)
    assert cache["blocks.0.attn.hook_q"].shape == (1, 6, 1, 8)
    assert cache["blocks.0.attn.hook_z"].shape == (1, 6, 1, 8)
    assert cache["hook_embed"].shape == (1, 6, 8)
    info = probes.ModelInfo.of(model)
    assert (info.n_layers, info.n_heads, info.d_vocab, info.causal) == (1, 1, 14, False)
    scores = probes.head_scores(model, seq_len=6, n_batches=1, batch_size=2)
    assert scores.scores["induction"].shape == (1, 1)


def test_pad_and_excluded_keys_get_no_attention():
    model = TopicModel(TopicModelConfig(**SMALL))
    tokens = torch.tensor([[1, 2, 13, 4, 13]])
    key_mask = torch.tensor([[True, False, True, True, True]])
    _, cache = model.run_with_cache(tokens, key_mask=key_mask)
    pattern = cache["blocks.0.attn.hook_pattern"][0, 0]
    assert (pattern[:, [1, 2, 4]] == 0).all()
    torch.testing.assert_close(pattern.sum(-1), torch.ones(5))


def test_uniform_attention_one_hot_embeddings_and_frozen_parts():
    cfg = TopicModelConfig(**SMALL, embedding="one_hot_frozen", attention="uniform_frozen", value="block_frozen",
                           decoder="identity_frozen")
    model = TopicModel(cfg)
    assert cfg.width == 14 and torch.equal(model.W_E, torch.eye(14))
    assert [name for name, p in model.named_parameters() if p.requires_grad] == []
    tokens = torch.tensor([[0, 1, 4, 13, 8]])
    logits, cache = model.run_with_cache(tokens)
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, 0], torch.full((5, 5), 0.25).masked_fill(
        torch.tensor([False, False, False, True, False]), 0.0).expand(5, 5))
    # block W_V: 1/v within a topic; the output is the mean topic mixture spread over each topic's words
    assert model.W_V[0, 3] == pytest.approx(0.25) and model.W_V[0, 4] == 0 and model.W_V[12, 12] == 0
    expected_topic_mass = torch.tensor([2, 1, 1]) / 4 / 4   # topics of [0, 1, 4, 8] / 4 words, spread over 4 words
    torch.testing.assert_close(logits[0, 0].view(3, 4), expected_topic_mass[:, None].expand(3, 4).float())


def test_trainable_parameters_of_each_variant():
    def trainable(**kw):
        model = TopicModel(TopicModelConfig(**SMALL, **kw))
        return sorted(n for n, p in model.named_parameters() if p.requires_grad)

    assert trainable() == ["W_E", "W_K", "W_Q", "W_V", "W_dec", "b_dec"]
    assert trainable(embedding="one_hot_frozen", attention="uniform_frozen") == ["W_V", "W_dec", "b_dec"]
    assert trainable(embedding="one_hot_frozen", value="identity_frozen", decoder="identity_frozen") == ["W_K", "W_Q"]
    assert torch.equal(TopicModel(TopicModelConfig(**SMALL, seed=3)).W_V,
                       TopicModel(TopicModelConfig(**SMALL, seed=3)).W_V)


def test_options_off_reproduce_the_model_without_them_exactly():
    tokens = torch.tensor([[0, 5, 7, 11, 12, 3], [1, 1, 2, 13, 13, 4]])
    plain = TopicModel(TopicModelConfig(**SMALL))
    off = TopicModel(TopicModelConfig(**SMALL, qkv_bias=False, scale_scores=False))
    zero_bias = TopicModel(TopicModelConfig(**SMALL, qkv_bias=True))
    assert [n for n, _ in plain.named_parameters()] == [n for n, _ in off.named_parameters()]
    for name, weight in plain.named_parameters():   # the biases draw no random numbers: same weights
        assert torch.equal(weight, dict(off.named_parameters())[name])
        assert torch.equal(weight, dict(zero_bias.named_parameters())[name])
    assert torch.equal(off(tokens), plain(tokens))
    assert torch.equal(zero_bias(tokens), plain(tokens))   # zero-initialised biases change nothing
    queries = torch.tensor([[1, 3], [0, 2]])
    assert torch.equal(off.query_logits(tokens, queries), plain.query_logits(tokens, queries))


def test_biases_and_score_scaling_follow_the_bert_formula():
    cfg = TopicModelConfig(**SMALL, qkv_bias=True, scale_scores=True)
    model = TopicModel(cfg)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name in ("b_Q", "b_K", "b_V"):
            getattr(model, name).copy_(torch.randn(8, generator=g))
    tokens = torch.tensor([[0, 5, 7, 11, 12, 3]])
    logits, cache = model.run_with_cache(tokens)
    Z = model.W_E[tokens[0]]                                            # [N, d], rows = positions
    q, k, v = Z @ model.W_Q.T + model.b_Q, Z @ model.W_K.T + model.b_K, Z @ model.W_V.T + model.b_V
    A = torch.softmax(q @ k.T / 8**0.5, dim=-1)                          # d_head = d_model = 8
    torch.testing.assert_close(cache["blocks.0.attn.hook_pattern"][0, 0], A, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(logits[0], (A @ v) @ model.W_dec.T + model.b_dec, atol=1e-5, rtol=1e-5)
    queries = torch.tensor([[4, 0, 2]])
    torch.testing.assert_close(model.query_logits(tokens, queries), logits[:, [4, 0, 2]], atol=1e-5, rtol=1e-5)
    assert cfg.score_scale == pytest.approx(8**-0.5) and TopicModelConfig(**SMALL).score_scale == 1.0
    scaled_only = TopicModel(TopicModelConfig(**SMALL, scale_scores=True))
    _, cache = scaled_only.run_with_cache(tokens)
    Z = scaled_only.W_E[tokens[0]]
    raw = (Z @ scaled_only.W_Q.T) @ (Z @ scaled_only.W_K.T).T
    torch.testing.assert_close(cache["blocks.0.attn.hook_attn_scores"][0, 0], raw / 8**0.5, atol=1e-6, rtol=1e-6)


def test_frozen_parts_freeze_their_biases():
    def trainable(**kw):
        model = TopicModel(TopicModelConfig(**SMALL, qkv_bias=True, **kw))
        return sorted(n for n, p in model.named_parameters() if p.requires_grad)

    assert trainable() == ["W_E", "W_K", "W_Q", "W_V", "W_dec", "b_K", "b_Q", "b_V", "b_dec"]
    assert trainable(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen") == \
        ["W_V", "b_V"]
    assert trainable(embedding="one_hot_frozen", value="block_frozen") == ["W_K", "W_Q", "W_dec", "b_K", "b_Q", "b_dec"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"value": "block_frozen"}, "one_hot_frozen"),
        ({"decoder": "identity_frozen"}, "one_hot_frozen"),
        ({"embedding": "random"}, "embedding must be one of"),
        ({"n_words": 20}, "n_words"),
        ({"pad_id": 14}, "pad_id"),
        ({"attention_dir": "causal"}, "bidirectional"),
        ({"d_model": 0}, "d_model"),
        ({"qkv_bias": "yes"}, "qkv_bias must be true or false"),
        ({"scale_scores": 1}, "scale_scores must be true or false"),
    ],
)
def test_bad_model_settings(kwargs, message):
    with pytest.raises(ToyConfigError, match=message):
        TopicModelConfig(**{**SMALL, **kwargs})
