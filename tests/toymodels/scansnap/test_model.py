"""The Y/Z model: the paper's forward pass, TransformerLens hooks, the pattern convention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import probes
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer


@pytest.fixture()
def trained_like():
    """A Y/Z model with random Y and Z and a batch of the paper's data."""
    data = CooccurrenceData(CooccurrenceConfig(seq_len=16))
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=16, init="linear", seed=1))
    with torch.no_grad():
        model.Z.mul_(8)
    tokens, labels, _ = data.sample(6, torch.Generator().manual_seed(0))
    return model, data, tokens, labels


def reference_logits(model: YZTransformer, tokens: torch.Tensor) -> torch.Tensor:
    """The paper's definition, one sequence at a time."""
    out = []
    for row in tokens:
        query, context = int(row[-1]), row[:-1]
        attention = torch.softmax(torch.stack([model.Z[query, int(t)] for t in context]), 0)
        pooled = torch.zeros(model.cfg.d_vocab)
        for a, t in zip(attention, context):
            pooled[int(t)] += a
        out.append(model.Y @ (pooled / pooled.norm()))
    return torch.stack(out)


def test_zero_init_gives_uniform_prediction_and_log_vocab_loss():
    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab))
    tokens, labels, _ = data.sample(8, torch.Generator().manual_seed(0))
    loss = F.cross_entropy(model(tokens)[:, -1], labels)
    assert loss.item() == pytest.approx(math.log(34), abs=1e-6)


def test_forward_matches_the_paper_definition(trained_like):
    model, _, tokens, _ = trained_like
    with torch.no_grad():
        expected = reference_logits(model, tokens)
        assert torch.allclose(model(tokens)[:, -1], expected, atol=1e-5)
        assert torch.allclose(model.query_logits(tokens), expected, atol=1e-5)


def test_pattern_convention(trained_like):
    model, _, tokens, _ = trained_like
    _, cache = model.run_with_cache(tokens)
    pattern = cache["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (6, 1, 16, 16)
    assert torch.allclose(pattern.sum(-1), torch.ones(6, 1, 16))
    assert pattern.diagonal(dim1=-2, dim2=-1).abs().max() == 0  # no position attends to itself
    # row q is softmax_{k != q} Z[x_q, x_k]; the last row is the query's attention
    q = 3
    logits = model.Z[tokens[:, q, None], tokens].detach()
    logits[:, q] = float("-inf")
    assert torch.allclose(pattern[:, 0, q], logits.softmax(-1), atol=1e-6)
    assert cache["blocks.0.attn.hook_z"].shape == (6, 16, 1, model.cfg.d_vocab)


def test_pattern_hook_feeds_the_logits(trained_like):
    """Patching the pattern changes the output: the hook sits on the real computation."""
    model, _, tokens, _ = trained_like
    uniform = (torch.ones(16, 16) - torch.eye(16)) / 15

    def patch(pattern, hook):
        return uniform.expand_as(pattern).clone()

    with torch.no_grad():
        patched = model.run_with_hooks(tokens, fwd_hooks=[("blocks.0.attn.hook_pattern", patch)])[:, -1]
        flat = YZTransformer(YZModelConfig(d_vocab=model.cfg.d_vocab, n_ctx=16))
        flat.Y.copy_(model.Y)
        assert torch.allclose(patched, flat(tokens)[:, -1], atol=1e-5)
        assert not torch.allclose(patched, model(tokens)[:, -1], atol=1e-3)


def test_gradient_reaches_only_the_query_row_of_z(trained_like):
    model, _, tokens, labels = trained_like
    F.cross_entropy(model(tokens)[:, -1], labels).backward()
    rows_with_grad = set(model.Z.grad.abs().sum(1).nonzero().flatten().tolist())
    assert rows_with_grad == set(tokens[:, -1].tolist())
    grad_forward = model.Z.grad.clone()
    model.zero_grad()
    F.cross_entropy(model.query_logits(tokens), labels).backward()
    assert torch.allclose(grad_forward, model.Z.grad, atol=1e-6)


def test_model_info_and_generic_probes_accept_it(trained_like):
    model, _, tokens, _ = trained_like
    info = probes.ModelInfo.of(model)
    assert (info.n_layers, info.n_heads, info.n_ctx, info.d_vocab, info.causal) == (1, 1, 16, model.cfg.d_vocab, False)
    scores = probes.head_scores(model, tokens, kinds=("previous_token",))
    assert scores.scores["previous_token"].shape == (1, 1)


def test_expected_attention_is_prob_times_exp_z():
    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=34, init="linear", seed=0))
    c = model.expected_attention(data.fact_last, data.context_probs)
    manual = data.context_probs[1] * model.Z[31].detach().double().exp()
    assert torch.allclose(c[1], manual / manual.sum())


@pytest.mark.parametrize("kwargs, fragment", [
    ({"d_vocab": 1}, "d_vocab must be an integer >= 2"),
    ({"d_vocab": 34, "init": "normal"}, "init must be 'zero' or 'linear'"),
    ({"d_vocab": 34, "n_ctx": True}, "n_ctx"),
])
def test_bad_model_settings(kwargs, fragment):
    with pytest.raises(ToyConfigError, match=fragment):
        YZModelConfig(**kwargs)


def test_bad_tokens():
    model = YZTransformer(YZModelConfig(d_vocab=5))
    with pytest.raises(ToyConfigError, match="pos >= 2"):
        model(torch.tensor([[1]]))
    with pytest.raises(ToyConfigError, match="needs a YZModelConfig"):
        YZTransformer({"d_vocab": 5})
