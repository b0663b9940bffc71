"""The simplified Chen et al. model: hooks, shapes, a nested-loop reference forward, its fast path."""

from __future__ import annotations

import math

import pytest
import torch

import probes
from probes.attention.copier import CopierProbe
from toymodels.errors import ToyConfigError
from toymodels.induction import (
    SUBSET_WEIGHTS_HOOK,
    FullInductionModel,
    SimplifiedInductionConfig,
    SimplifiedInductionModel,
    WindowBatch,
    head_distances,
)
from toymodels.induction.data import MarkovConfig, sample_markov_icl


def model_with_random_weights(seed: int = 0, **kwargs) -> SimplifiedInductionModel:
    model = SimplifiedInductionModel(SimplifiedInductionConfig(**kwargs))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))
    return model


def reference_log_probs(model: SimplifiedInductionModel, tokens: torch.Tensor) -> torch.Tensor:
    """Nested loops over the paper's definitions (slots, subsets, softmax over keys k <= q)."""
    cfg = model.cfg
    S, H, _M = cfg.n_states, cfg.n_heads, cfg.max_distance
    logits = model.rel_logits.detach().double()
    c2 = model.c.detach().double() ** 2
    weights = c2 / (c2.sum() + (model.c_token.detach().double() ** 2).sum())  # token subsets: zero terms
    windows = head_distances(H, cfg.window, cfg.head_windows)
    a = float(model.a.detach())
    n_batch, L = tokens.shape
    out = torch.zeros(n_batch, L, S, dtype=torch.float64)
    for b in range(n_batch):
        seq = tokens[b].tolist()

        def slot(t: int, seq: list[int] = seq) -> list[torch.Tensor]:
            features = []
            for h in range(H):
                ds = [d for d in windows[h] if t - d >= 0]
                v = torch.zeros(S, dtype=torch.float64)
                if ds:
                    w = torch.softmax(torch.stack([logits[h, d - 1] for d in ds]), 0)
                    for wd, d in zip(w, ds):
                        v[seq[t - d]] += wd
                features.append(v / (v.norm() + 1e-8))
            return features

        slots = [slot(t) for t in range(L + 1)]
        for q in range(L):
            scores = []
            for k in range(q + 1):
                kernel = 0.0
                for w_s, subset in zip(weights, model.subsets):
                    kernel += float(w_s) * math.prod(float(slots[q + 1][h] @ slots[k][h]) for h in subset)
                scores.append(a * kernel)
            attention = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
            p = torch.zeros(S, dtype=torch.float64)
            for k in range(q + 1):
                p[seq[k]] += attention[k]
            out[b, q] = ((1 - cfg.eps) * p + cfg.eps / S).log()
    return out


REFERENCE_LAYOUT = dict(window=3, head_windows="shifted", empty_subset=True, token_subsets=True)


@pytest.mark.parametrize("layout", [{"window": 4}, REFERENCE_LAYOUT])
def test_forward_matches_the_nested_loop_reference_and_the_fast_last_token_path(layout):
    model = model_with_random_weights(n_states=3, n_heads=3, max_subset=2, **layout)
    tokens = torch.randint(0, 3, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        last = model.final_log_probs(tokens)
    assert torch.allclose(full.double(), reference_log_probs(model, tokens), atol=1e-5)
    assert torch.allclose(full[:, -1], last, atol=1e-6)
    assert torch.allclose(full.exp().sum(-1), torch.ones(2, 12), atol=1e-5)


def test_hooks_follow_transformer_lens_names_and_probes_accept_the_model():
    model = SimplifiedInductionModel(SimplifiedInductionConfig(n_states=4, n_heads=3, max_subset=2))
    tokens = torch.randint(0, 4, (3, 20), generator=torch.Generator().manual_seed(0))
    _, cache = model.run_with_cache(tokens)
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 3, 20, 20)
    assert cache["blocks.1.attn.hook_pattern"].shape == (3, 3, 20, 20)
    assert cache["blocks.0.attn.hook_z"].shape == (3, 20, 3, 4)
    assert cache[SUBSET_WEIGHTS_HOOK].shape == (3, 6)
    assert torch.allclose(cache[SUBSET_WEIGHTS_HOOK][0], torch.full((6,), 1 / 6))
    layer2 = cache["blocks.1.attn.hook_pattern"]
    assert torch.allclose(layer2.sum(-1), torch.ones(3, 3, 20), atol=1e-5)
    assert float(layer2.triu(1).abs().max()) == 0.0  # causal
    info = probes.ModelInfo.of(model)
    assert (info.n_layers, info.n_heads, info.d_vocab, info.causal) == (2, 3, 4, True)
    scores = probes.head_scores(model, seq_len=10, n_batches=1, batch_size=2)
    assert scores.scores["induction"].shape == (2, 3)
    assert model.subset_labels == ["{0}", "{1}", "{2}", "{0,1}", "{0,2}", "{1,2}"]


def test_head_h_starts_peaked_at_distance_h_plus_one():
    model = SimplifiedInductionModel(SimplifiedInductionConfig(n_heads=3, window=6, w_plus=3.0, w_minus=0.0))
    tokens = torch.randint(0, 3, (2, 30), generator=torch.Generator().manual_seed(0))
    (profile,) = probes.run_probes(model, [CopierProbe(6)], [tokens], progress=False)
    assert profile.copied_distance[0].tolist() == [1, 2, 3]
    peak = math.exp(3) / (math.exp(3) + 5)
    assert torch.allclose(profile.mass[0, [0, 1, 2], [1, 2, 3]], torch.full((3,), peak), atol=1e-5)
    assert torch.allclose(profile.mass[0, :, 0], torch.zeros(3))  # strictly earlier positions only


def test_patching_the_layer2_pattern_changes_the_output():
    model = SimplifiedInductionModel(SimplifiedInductionConfig())
    tokens = torch.tensor([[0, 1, 2, 0, 1, 2, 0, 1]])

    def attend_first(pattern, hook):
        out = torch.zeros_like(pattern)
        out[..., 0] = 1.0
        return out

    log_probs = model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_pattern", attend_first)])
    # every query now copies token 0 (id 0): p = (1 - eps) + eps / S
    assert torch.allclose(log_probs[0, :, 0].exp(), torch.full((8,), 1 - 1e-3 + 1e-3 / 3), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, words",
    [({"n_states": 1}, "n_states"), ({"n_heads": 0}, "n_heads"), ({"max_subset": 4, "n_heads": 3}, "max_subset"),
     ({"window": 2, "n_heads": 3}, "window"), ({"eps": 1.0}, "eps")],
)
def test_bad_model_settings_raise(kwargs, words):
    with pytest.raises(ToyConfigError, match=words):
        SimplifiedInductionConfig(**kwargs)


def test_bad_tokens_raise():
    model = SimplifiedInductionModel(SimplifiedInductionConfig(n_states=3, n_ctx=10))
    with pytest.raises(ToyConfigError, match="token ids"):
        model(torch.tensor([[0, 3]]))
    with pytest.raises(ToyConfigError, match="n_ctx"):
        model(torch.zeros(1, 11, dtype=torch.long))


def test_full_model_reduces_to_the_simplified_one_with_zero_qk_and_identity_ov():
    cfg = SimplifiedInductionConfig(n_states=3, window=5)
    simplified = model_with_random_weights(window=5)
    full = FullInductionModel(cfg)
    full.load_state_dict({**full.state_dict(), **simplified.state_dict()})
    with torch.no_grad():
        full.W_Q.zero_()
    tokens = torch.randint(0, 3, (3, 15), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.allclose(full(tokens), simplified(tokens), atol=1e-6)


@pytest.mark.parametrize("model_class", [SimplifiedInductionModel, FullInductionModel])
def test_outputs_are_causal_and_the_fast_path_matches(model_class):
    """The prediction at q must not see token q + 1 (the full model's query slot has no token)."""
    model = model_class(SimplifiedInductionConfig(n_states=4, window=4, seed=1))
    with torch.no_grad():
        model.c.add_(torch.arange(6.0))
        model.a.fill_(3.0)
    tokens = torch.randint(0, 4, (2, 14), generator=torch.Generator().manual_seed(0))
    changed = tokens.clone()
    changed[:, 9] = (changed[:, 9] + 1) % 4
    with torch.no_grad():
        before, after = model(tokens), model(changed)
        assert torch.allclose(before[:, :9], after[:, :9], atol=1e-6)
        assert not torch.allclose(before[:, 9:], after[:, 9:], atol=1e-4)
        assert torch.allclose(model(tokens[:, :9])[:, -1], model.final_log_probs(tokens[:, :9]), atol=1e-6)
    _, cache = model.run_with_cache(tokens)
    assert torch.allclose(cache["blocks.0.attn.hook_pattern"][:, :, 1:].sum(-1), torch.ones(2, 3, 13), atol=1e-5)


def test_reference_layout_windows_subsets_and_initialisation():
    """Head h sees distances h+1 .. h+3 with w+ at h+1; subsets include {} and the token ones (D=2, H=3: 4)."""
    assert head_distances(3, 3, "shifted") == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]
    model = SimplifiedInductionModel(SimplifiedInductionConfig(w_plus=3.0, w_minus=0.1, c_init=0.01,
                                                               **REFERENCE_LAYOUT))
    assert model.cfg.max_distance == 5 and model.c_token.shape == (4,)
    assert model.subset_labels == ["{}", "{0}", "{1}", "{2}", "{0,1}", "{0,2}", "{1,2}"]
    peak, rest = math.exp(3.0), math.exp(0.1)
    expected = torch.zeros(3, 5)
    for h in range(3):
        expected[h, h] = peak / (peak + 2 * rest)
        expected[h, h + 1: h + 3] = rest / (peak + 2 * rest)
    assert torch.allclose(model.distance_weights(), expected, atol=1e-6)
    assert torch.allclose(model.subset_weights(), torch.full((7,), 1 / 7))
    assert float(model.live_fraction().detach()) == pytest.approx(7 / 11)
    tokens = torch.tensor([[0, 1, 2, 0, 1, 2, 0, 1]])
    _, cache = model.run_with_cache(tokens)
    pattern = cache["blocks.0.attn.hook_pattern"][0]
    assert float(pattern[2, :3].sum()) == 0.0 and float(pattern[2, 3].sum()) == pytest.approx(1.0)  # head 2: d >= 3


@pytest.mark.parametrize("model_class", [SimplifiedInductionModel, FullInductionModel])
@pytest.mark.parametrize("layout", [{"window": 4}, REFERENCE_LAYOUT])
def test_grouped_final_probs_equal_the_slot_by_slot_path_with_gradients(model_class, layout):
    generator = torch.Generator().manual_seed(3)
    model = model_class(SimplifiedInductionConfig(n_states=3, seed=2, **layout))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator))
    tokens = torch.randint(0, 3, (16, 30), generator=generator)
    windows = model.window_batch(tokens)
    assert isinstance(windows, WindowBatch) and windows.key_index.shape == (16, 30)
    assert windows.key_windows.shape[0] <= (4 ** model.cfg.max_distance) * 3
    grouped, direct = model.final_probs_grouped(windows), model.final_probs_direct(tokens)
    assert torch.allclose(model.final_probs(tokens), direct, atol=1e-6)  # whichever path it picks
    assert torch.allclose(grouped, direct, atol=1e-6)
    assert torch.allclose(grouped.sum(-1), torch.ones(16), atol=1e-6)
    grads = [torch.autograd.grad(p[:, 0].square().sum(), list(model.parameters()), allow_unused=True)
             for p in (grouped, direct)]
    for a, b in zip(*grads):
        assert (a is None) == (b is None) and (a is None or torch.allclose(a, b, atol=1e-5))


@pytest.mark.parametrize("model_class", [SimplifiedInductionModel, FullInductionModel])
@pytest.mark.parametrize("layout, n_chains, grouped", [
    ({"window": 8, "head_windows": "shifted"}, 64, False),
    ({"window": 3, "empty_subset": True, "token_subsets": True}, 256, True),
])
def test_a_kept_window_batch_gives_the_values_of_the_weights_now(model_class, layout, n_chains, grouped):
    """``final_probs`` keeps a batch's layer-1 kernel terms: reused while the same model asks with unchanged layer-1
    weights, recomputed (bit for bit the uncached path) when a weight changes (even a zero's sign) or another model
    asks, and neither read nor kept where a layer-1 weight needs a gradient."""
    model = model_class(SimplifiedInductionConfig(n_states=3, **layout))
    tokens = sample_markov_icl(MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1), n_chains, 0).inputs
    windows = model.window_batch(tokens)
    assert windows.grouping_pays == grouped  # both paths of final_probs
    fresh = model.final_probs_grouped if grouped else (lambda batch: model.final_probs_direct(tokens))
    computed = []
    compute = model.kernel_terms
    model.kernel_terms = lambda batch: computed.append(1) or compute(batch)  # counts the computations
    with torch.no_grad():
        kept = model.final_probs(windows)
        assert torch.equal(model.final_probs(windows), kept) and len(computed) == 1  # reused
        assert torch.equal(kept, fresh(windows))
        model.rel_logits[0, 0] = 0.0  # head 0 loses its peak at distance 1
        changed = model.final_probs(windows)
        assert len(computed) == 2 and not torch.equal(changed, kept) and torch.equal(changed, fresh(windows))
        model.rel_logits[0, 0] = -0.0  # the same value, the other sign
        assert torch.equal(model.final_probs(windows), changed) and len(computed) == 3
    (grad,) = torch.autograd.grad(model.final_probs(windows)[:, 0].sum(), [model.rel_logits])  # computed afresh
    assert len(computed) == 4 and float(grad.abs().sum()) > 0
    with torch.no_grad():
        assert torch.equal(model.final_probs(windows), changed) and len(computed) == 4  # that one was not kept
        other = model_class(SimplifiedInductionConfig(n_states=3, max_subset=1, **layout))  # the same layer 1
        for mine, theirs in zip(model.layer1_parameters(), other.layer1_parameters()):
            theirs.copy_(mine)
        fresh_other = other.final_probs_grouped(windows) if grouped else other.final_probs_direct(tokens)
        assert torch.equal(other.final_probs(windows), fresh_other)
