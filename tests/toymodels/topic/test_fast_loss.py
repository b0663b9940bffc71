"""The training fast path of the topic model: selected query rows only, same loss and gradients as the full forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from toymodels.topic.data import LDAConfig, MaskingConfig, mask_documents, sample_documents
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.topic.training import batch_loss, masked_lm_loss, model_logits, selected_positions

LDA = LDAConfig(n_topics=3, words_per_topic=4, min_len=8, max_len=12)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def test_selected_positions_by_hand():
    selected = torch.tensor([[False, True, False, True], [False, False, False, False], [True, True, True, False]])
    index, valid = selected_positions(selected)
    assert index.shape == (3, 3)
    assert index[0, :2].tolist() == [1, 3] and index[2].tolist() == [0, 1, 2]
    assert valid.tolist() == [[True, True, False], [False, False, False], [True, True, True]]
    values = torch.arange(12).view(3, 4)
    assert torch.equal(values.gather(1, index)[valid], values[selected])   # same rows, same order


def _batch(seed: int):
    generator = torch.Generator().manual_seed(seed)
    masked = mask_documents(sample_documents(LDA, 16, generator), MaskingConfig(p_select=0.3), generator, lda=LDA)
    return masked, ~masked.selected


@pytest.mark.parametrize("variant", [
    {},
    {"embedding": "one_hot_frozen"},
    {"embedding": "one_hot_frozen", "attention": "uniform_frozen", "decoder": "identity_frozen"},
    {"embedding": "one_hot_frozen", "value": "block_frozen"},
    {"qkv_bias": True, "scale_scores": True},
    {"embedding": "one_hot_frozen", "attention": "uniform_frozen", "decoder": "identity_frozen", "qkv_bias": True},
])
@pytest.mark.parametrize("kind", ["squared", "cross_entropy"])
def test_query_rows_give_the_full_forwards_loss_and_gradients(variant, kind):
    model = TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id, d_model=8,
                                        n_ctx=LDA.max_len, words_per_topic=4, init_std=0.5, **variant))
    if model.cfg.qkv_bias:   # non-zero biases, so that they take part in the comparison
        with torch.no_grad():
            for name, bias in model.named_parameters():
                if name in ("b_Q", "b_K", "b_V") and bias.requires_grad:
                    bias.copy_(torch.linspace(-0.5, 0.5, bias.numel()))
    masked, key_mask = _batch(1)
    trainable = [p for p in model.parameters() if p.requires_grad]
    # slow reference: every position through forward(), then keep the selected ones
    full = masked_lm_loss(model_logits(model, masked.inputs, key_mask, LDA.pad_id), masked.targets, masked.selected,
                          kind)
    fast = batch_loss(model, masked, key_mask, LDA.pad_id, kind)
    torch.testing.assert_close(fast, full, rtol=1e-5, atol=1e-6)
    index, _ = selected_positions(masked.selected)
    rows = model(masked.inputs, key_mask=key_mask).gather(1, index[:, :, None].expand(-1, -1, LDA.n_words))
    torch.testing.assert_close(model.query_logits(masked.inputs, index, key_mask), rows, rtol=1e-5, atol=1e-6)
    if trainable:
        for a, b in zip(torch.autograd.grad(full, trainable), torch.autograd.grad(fast, trainable)):
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-6)


def test_all_keys_hidden_falls_back_to_uniform_and_hooks_force_the_full_forward():
    model = TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id, d_model=8,
                                        n_ctx=LDA.max_len, words_per_topic=4, init_std=0.5))
    tokens = torch.tensor([[1, 2, 3, LDA.pad_id]])
    hidden = torch.zeros(1, 4, dtype=torch.bool)
    queries = torch.tensor([[0, 2]])
    torch.testing.assert_close(model.query_logits(tokens, queries, hidden), model(tokens, key_mask=hidden)[:, [0, 2]])
    masked, key_mask = _batch(2)
    seen = []
    model.add_hook("blocks.0.attn.hook_pattern", lambda pattern, hook: seen.append(pattern.shape))
    assert model.has_active_hooks()
    batch_loss(model, masked, key_mask, LDA.pad_id, "squared")
    assert seen == [(16, 1, masked.inputs.shape[1], masked.inputs.shape[1])]   # hooks see the full pattern
    model.reset_hooks()
    assert not model.has_active_hooks()
    nothing = dataclasses.replace(masked, selected=torch.zeros_like(masked.selected))
    loss = batch_loss(model, nothing, key_mask, LDA.pad_id, "squared")
    loss.backward()
    assert loss.item() == 0.0
