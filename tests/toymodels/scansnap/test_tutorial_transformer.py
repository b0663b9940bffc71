"""The hooked PyTorch-tutorial transformer and its word-level training: parity with torch, hooks, known answers."""

from __future__ import annotations

import math

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.scansnap.tutorial_transformer import TutorialTransformer, TutorialTransformerConfig, sinusoidal_positions
from toymodels.scansnap.word_lm import (
    WordLMTrainConfig,
    basic_english,
    batchify,
    build_vocabulary,
    encode,
    train_word_lm,
    windows,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def torch_encoder_layer_copy(model: TutorialTransformer) -> torch.nn.TransformerEncoderLayer:
    """``nn.TransformerEncoderLayer`` (post-LN, ReLU) holding the weights of ``model.blocks[0]``."""
    cfg, block = model.cfg, model.blocks[0]
    d = cfg.d_model
    layer = torch.nn.TransformerEncoderLayer(d, cfg.n_heads, cfg.d_mlp, dropout=0.0, batch_first=True).eval()

    def flat(w: torch.Tensor) -> torch.Tensor:  # [head d_model d_head] -> in_proj rows
        return w.permute(1, 0, 2).reshape(d, d).T

    with torch.no_grad():
        attn = block.attn
        layer.self_attn.in_proj_weight.copy_(torch.cat([flat(attn.W_Q), flat(attn.W_K), flat(attn.W_V)]))
        layer.self_attn.in_proj_bias.copy_(torch.cat([attn.b_Q.flatten(), attn.b_K.flatten(), attn.b_V.flatten()]))
        layer.self_attn.out_proj.weight.copy_(attn.W_O.reshape(d, d).T)
        layer.self_attn.out_proj.bias.copy_(attn.b_O)
        layer.linear1.load_state_dict(block.mlp_in.state_dict())
        layer.linear2.load_state_dict(block.mlp_out.state_dict())
        layer.norm1.load_state_dict(block.ln1.state_dict())
        layer.norm2.load_state_dict(block.ln2.state_dict())
    return layer


def test_matches_torch_transformer_encoder_layer_with_a_causal_mask():
    cfg = TutorialTransformerConfig(d_vocab=50, d_model=16, d_mlp=24, n_heads=2, n_ctx=10, dropout=0.0, seed=3)
    model = TutorialTransformer(cfg).eval()
    with torch.no_grad():  # non-trivial biases and norms, so every parameter is checked
        for p in (model.blocks[0].attn.b_Q, model.blocks[0].attn.b_V, model.blocks[0].ln1.bias):
            p.normal_()
    layer = torch_encoder_layer_copy(model)
    tokens = torch.randint(0, 50, (3, 10), generator=torch.Generator().manual_seed(0))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(10)
    x = model.W_E[tokens] * math.sqrt(16) + sinusoidal_positions(10, 16)
    with torch.no_grad():
        expected = layer(x, src_mask=mask) @ model.W_U + model.b_U
        torch.testing.assert_close(model(tokens), expected, atol=1e-5, rtol=1e-5)


def test_hooks_pattern_and_initialisation():
    cfg = TutorialTransformerConfig(d_vocab=40, d_model=8, d_mlp=8, n_ctx=6)
    model = TutorialTransformer(cfg)
    tokens = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(1))
    _, cache = model.run_with_cache(tokens)
    for name in ("hook_embed", "hook_pos_embed", "blocks.0.attn.hook_q", "blocks.0.attn.hook_pattern",
                 "blocks.0.attn.hook_z", "blocks.0.hook_resid_mid", "blocks.0.hook_resid_post"):
        assert name in cache
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (2, 1, 6, 6)
    torch.testing.assert_close(pattern.sum(-1), torch.ones(2, 1, 6))
    assert float(pattern.triu(1).abs().max()) == 0.0  # causal
    assert float(model.W_E.detach().abs().max()) <= 0.1 and float(model.W_U.detach().abs().max()) <= 0.1
    assert not model.b_U.any()
    torch.testing.assert_close(sinusoidal_positions(3, 4)[2], torch.tensor(
        [math.sin(2), math.cos(2), math.sin(2 / 100), math.cos(2 / 100)]))
    assert TutorialTransformer(TutorialTransformerConfig(d_vocab=40, seed=5)).W_E.equal(
        TutorialTransformer(TutorialTransformerConfig(d_vocab=40, seed=5)).W_E)
    assert model.cfg.attention_dir == "causal" and model.cfg.d_head == 8


def test_config_and_input_errors():
    with pytest.raises(ToyConfigError, match="divisible"):
        TutorialTransformerConfig(d_vocab=10, d_model=10, n_heads=3)
    with pytest.raises(ToyConfigError, match="dropout"):
        TutorialTransformerConfig(d_vocab=10, dropout=1.0)
    model = TutorialTransformer(TutorialTransformerConfig(d_vocab=10, d_model=4, d_mlp=4, n_ctx=5))
    with pytest.raises(ToyConfigError, match="pos <= n_ctx = 5"):
        model(torch.zeros(1, 6, dtype=torch.long))


def test_basic_english_vocabulary_and_batchify():
    assert basic_english("Hello, World! It's \"a\" test; ok: (yes)") == \
        ["hello", ",", "world", "!", "it", "'", "s", "a", "test", "ok", "(", "yes", ")"]
    lines = ["b a b", "", "c b <unk>"]
    vocabulary = build_vocabulary(lines)
    assert vocabulary == ["<unk>", "b", "a", "c"]
    stream = encode([*lines, "zzz"], vocabulary)
    assert stream.tolist() == [1, 2, 1, 3, 1, 0, 0]
    columns = batchify(torch.arange(11), 2)
    assert columns.tolist() == [[0, 5], [1, 6], [2, 7], [3, 8], [4, 9]]
    pairs = windows(columns, 3)
    assert [p[0].tolist() for p in pairs] == [[[0, 1, 2], [5, 6, 7]], [[3], [8]]]
    assert [p[1].tolist() for p in pairs] == [[[1, 2, 3], [6, 7, 8]], [[4], [9]]]
    with pytest.raises(ToyConfigError, match="too short"):
        batchify(torch.arange(3), 2)


def test_training_follows_the_tutorial_schedule_and_learns_a_repeating_text():
    stream = torch.arange(5).repeat(200)  # 0 1 2 3 4 0 1 ...: the next word is always determined
    model = TutorialTransformer(TutorialTransformerConfig(d_vocab=5, d_model=16, d_mlp=16, n_ctx=8, dropout=0.0))
    config = WordLMTrainConfig(lr=1.0, gamma=0.5, bptt=8, epochs=3, seed=0)
    seen = []
    history = train_word_lm(model, batchify(stream, 4), config, callbacks=[lambda s, m, h: seen.append(s)])
    per_epoch = len(windows(batchify(stream, 4), 8))
    assert history.steps == seen == list(range(1, 3 * per_epoch + 1))
    lr, loss = history.values["lr"], history.values["loss"]
    assert lr[0] == 1.0 and lr[per_epoch] == 0.5 and lr[-1] == 0.25
    assert loss[0] > 1.2 and loss[-1] < 0.1 and not model.training
    short = train_word_lm(TutorialTransformer(model.cfg), batchify(stream, 4),
                          WordLMTrainConfig(bptt=8, max_steps=3))
    assert short.steps == [1, 2, 3]
    with pytest.raises(ToyConfigError, match="gamma"):
        WordLMTrainConfig(gamma=0.0)


def test_word_lm_resumed_from_a_checkpoint_ends_as_an_uninterrupted_run(tmp_path):
    """Dropout on: the checkpoint carries the global CPU generator, so the resumed run draws the same masks."""
    from toymodels.training import Checkpointer

    columns = batchify(torch.arange(7).repeat(60), 4)
    cfg = TutorialTransformerConfig(d_vocab=7, d_model=8, d_mlp=8, n_ctx=6, dropout=0.3, seed=1)
    config = WordLMTrainConfig(lr=0.5, gamma=0.5, bptt=6, epochs=2, seed=3)
    full = TutorialTransformer(cfg)
    expected = train_word_lm(full, columns, config)
    part = TutorialTransformer(cfg)
    train_word_lm(part, columns, WordLMTrainConfig(lr=0.5, gamma=0.5, bptt=6, epochs=2, max_steps=7, seed=3),
                  checkpointer=Checkpointer(tmp_path, every=7))
    resumed = TutorialTransformer(cfg)
    seen: list[int] = []
    history = train_word_lm(resumed, columns, config, checkpointer=Checkpointer(tmp_path, every=7),
                            callbacks=[lambda step, model, history: seen.append(step)])
    assert seen == expected.steps[7:]  # it went on from step 7
    assert history.steps == expected.steps and history.values == expected.values
    assert all(torch.equal(a, b) for a, b in zip(resumed.state_dict().values(), full.state_dict().values()))
