"""The fused path's gathered entries (``LayerAttention.entries`` / ``entry_weights``: ``exp(scale * q . k - lse)``
from the layer's own ``q``, ``k`` and the fused kernel's row log-sum-exp) equal ``hook_pattern`` at every
``(b, q, k)`` of a short batch whose tokens repeat (the induction, duplicate and n-gram entries the probes gather
exist only where tokens repeat), causal and bidirectional, with a padded row; and the once-per-model check
:func:`probes.core.reductions_check.reductions_match_hook_pattern` refuses entries that do not.
"""

from __future__ import annotations

import pytest
import torch

import probes
from mechprobe import forward
from probes.core import attention_rows, reductions_check
from probes.core.model_info import pattern_hook
from probes.core.model_kind import mask_kwargs
from tests.probes.tl_support import needs_bridge_adapter
from tests.random_checkpoints import RANDOM_CHECKPOINTS, make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

N_POS = 16
KINDS = [pytest.param(kind, marks=needs_bridge_adapter(RANDOM_CHECKPOINTS[kind].architecture))
         for kind in ("gpt_neox", "gemma2", "roberta")]  # rotary causal, soft-capped sliding window, bidirectional


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, request):
    kind = request.param
    return probes.load_model(make_random_checkpoint(kind, tmp_path_factory.mktemp(f"entries-{kind}") / kind, seed=2))


def repeating_tokens(seed: int = 0) -> torch.Tensor:
    """Two rows of ``N_POS`` tokens drawn from 5 ids, so every row holds repeats (and repeated bigrams)."""
    pool = torch.tensor([17, 230, 1041, 2222, 2999])
    tokens = pool[torch.randint(0, 5, (2, N_POS), generator=torch.Generator().manual_seed(seed))]
    assert all(len(set(row.tolist())) < N_POS // 2 for row in tokens)
    return tokens


def every_entry(n_batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, q, k = torch.meshgrid(torch.arange(n_batch), torch.arange(N_POS), torch.arange(N_POS), indexing="ij")
    return b.flatten(), q.flatten(), k.flatten()


def fused_layers(model, tokens: torch.Tensor, mask: torch.Tensor | None) -> list[attention_rows.LayerAttention]:
    layers: list[attention_rows.LayerAttention] = []
    blocked = attention_rows._blocked

    def not_blocked(query, key, value, allowed, causal, scaling, softcap):
        if softcap is None:  # soft-capped scores (Gemma2) have no fused kernel: the blocked computation is theirs
            raise AssertionError("the blocked fallback ran where the fused kernel should have")
        return blocked(query, key, value, allowed, causal, scaling, softcap)

    with pytest.MonkeyPatch.context() as patch, torch.inference_mode():
        patch.setattr(attention_rows, "_blocked", not_blocked)
        with attention_rows.reduced_attention(model, layers.append):
            forward.run(model, tokens, **mask_kwargs(model, mask))
    assert [layer.layer for layer in layers] == list(range(model.cfg.n_layers))
    return layers


@pytest.mark.parametrize("checkpoint", KINDS, indirect=True)
@pytest.mark.parametrize("padded", [None, "left", "right"])
def test_gathered_entries_equal_hook_pattern_at_every_entry(checkpoint, padded):
    model = checkpoint
    tokens = repeating_tokens()
    mask = None
    if padded:  # row 1 padded on 5 positions: its keys there are forbidden (for a causal model: left padding)
        mask = torch.ones(2, N_POS, dtype=torch.long)
        mask[1, :5] = 0 if padded == "left" else 1
        mask[1, N_POS - 5:] = 0 if padded == "right" else 1
    names = [pattern_hook(layer) for layer in range(model.cfg.n_layers)]
    with torch.inference_mode():
        _, cache = forward.cached(model, tokens, names=names, **mask_kwargs(model, mask))
    b, q, k = every_entry(2)
    real = torch.ones(2, N_POS, dtype=torch.bool) if mask is None else mask.bool()
    rows = real[b, q]  # padded query rows: the model's pattern there is whatever its mask convention gives
    for layer in fused_layers(model, tokens, mask):
        expected = cache[names[layer.layer]].float()  # [batch head q k]
        got = layer.entries(b, q, k)  # [entry head]
        assert got.shape == (len(b), model.cfg.n_heads)
        torch.testing.assert_close(got[rows], expected[b, :, q, k][rows], atol=1e-5, rtol=0)
        flat = layer.entry_weights(b * N_POS + q, b * N_POS + k, b, q, k)  # the probes' call, [head entry]
        torch.testing.assert_close(flat.T, got, atol=0, rtol=0)
        if layer.causal:
            assert bool((got[k > q] == 0).all())
        if padded:
            assert bool((got[~real[b, k] & rows] == 0).all())  # no weight on a padded key
        for row in range(2):  # each real query row sums to 1 over its keys
            sums = got[(b == row) & rows].view(-1, N_POS, model.cfg.n_heads).sum(1)
            torch.testing.assert_close(sums, torch.ones_like(sums), atol=1e-5, rtol=0)


@pytest.mark.parametrize("checkpoint", KINDS[:1], indirect=True)
def test_the_check_refuses_entries_that_differ_from_hook_pattern(checkpoint, monkeypatch):
    """Rows and label sums right, the gathered entries wrong (each previous-token entry 2% too large): the
    once-per-model check says no, so the runner reads whole patterns."""
    model = checkpoint
    tokens = repeating_tokens(seed=1)
    assert reductions_check.reductions_match_hook_pattern(model, tokens)
    correct = attention_rows.LayerAttention.entry_weights

    def previous_token_off(self, query_rows, key_rows, b, q, k, **kwargs):
        return correct(self, query_rows, key_rows, b, q, k, **kwargs) * (1 + 0.02 * (q - k == 1))

    monkeypatch.setattr(attention_rows.LayerAttention, "entry_weights", previous_token_off)
    assert not reductions_check.reductions_match_hook_pattern(model, tokens)
