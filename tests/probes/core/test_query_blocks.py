"""Long sequences: attention reaches the probes as reductions of a fused kernel (probes.core.attention_rows).

- The reductions (rows rebuilt from q, k and the row log-sum-exp; label sums taken in the model's own call)
  reproduce ``hook_pattern`` on three architectures (rotary, soft-capped sliding-window Gemma2, a RoBERTa
  encoder), the fused kernel equals the blocked eager computation, and the model's output is unchanged.
- The probe suite fed reductions (``max_pattern_bytes=0``, rows materialised in several blocks where a probe asks
  for them) equals the suite fed whole patterns, padded encoder batches included, and never fires ``hook_pattern``.
- Where the reductions would be wrong or a probe needs whole layers, the runner falls back to ``hook_pattern``.
"""

from __future__ import annotations

import pytest
import torch

import probes
from probes.core import attention_rows, reductions_check, runner
from probes.core.batch import TokenBatch
from probes.core.model_info import pattern_hook
from probes.core.result import results_close
from tests.hooked_models import OracleModel
from tests.probes.attention.test_head_scores import reference_scores
from tests.probes.tl_support import checkpoint_kinds, loadable_checkpoint_kinds
from tests.random_checkpoints import make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("query-blocks")
    return {kind: probes.load_model(make_random_checkpoint(kind, root / kind, seed=1))
            for kind in loadable_checkpoint_kinds()}


@pytest.fixture(autouse=True)
def fresh_checks(monkeypatch):
    """Materialised rows in blocks of 5 (several per layer) and no verdict remembered from another test."""
    monkeypatch.setattr(attention_rows, "ROW_BLOCK_BYTES", 5 * 4 * 4 * 2 * 40)  # 5 rows at batch 2, 4 heads, 40 keys
    monkeypatch.setattr(runner, "_REDUCTIONS_CHECKED", type(runner._REDUCTIONS_CHECKED)())


def _tokens(n_rows: int = 2, n_pos: int = 40, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 3000, (n_rows, n_pos), generator=torch.Generator().manual_seed(seed))


def _suite(d_vocab: int) -> list[probes.Probe]:
    labels = torch.arange(d_vocab) % 5
    labels[:3] = -1
    tracked = _tokens(seed=0)[0, :12].unique().tolist()  # tokens the probed batches hold
    return [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3),
            probes.TopicAttentionProbe(labels, n_permutations=6, permutation_seed=2),
            probes.TopicAttentionProbe(labels),  # from label sums in the model's own call (no null: no pairs)
            probes.SameTokenAttentionProbe(labels),
            probes.CopierProbe(max_distance=3),
            probes.KeyTokenAttentionProbe(tracked, tracked, distance_matched=True),
            probes.KeyTokenAttentionProbe(tracked[:4], None, query_position="last", window=6)]


@pytest.mark.parametrize("kind", checkpoint_kinds())
def test_reductions_reproduce_hook_pattern_and_the_models_output(checkpoints, kind):
    model = checkpoints[kind]
    tokens = _tokens()
    assert reductions_check.reductions_match_hook_pattern(model, tokens)
    columns = torch.nn.functional.one_hot(tokens % 3, 3).float()
    layers: dict[bool, list] = {True: [], False: []}
    with torch.inference_mode():
        expected = model(tokens)
        for fused in (True, False):
            with attention_rows.reduced_attention(model, layers[fused].append, columns=columns, fused=fused):
                got = model(tokens)
            assert torch.allclose(got, expected, atol=1e-5)
    for fused, blocked in zip(layers[True], layers[False]):  # the fused kernel against the blocked reference
        assert torch.allclose(fused.lse, blocked.lse, atol=1e-5)
        assert torch.allclose(fused.column_mass, blocked.column_mass, atol=1e-5)
        rows = blocked.rows(0, 40)
        assert torch.allclose(rows @ columns[:, None], blocked.column_mass, atol=1e-5)
        b, q, k = torch.tensor([0, 1, 1, 0]), torch.tensor([5, 39, 0, 3]), torch.tensor([4, 2, 0, 3])
        assert torch.allclose(fused.entries(b, q, k), rows[b, :, q, k], atol=1e-6)


@pytest.mark.parametrize("kind", checkpoint_kinds())
def test_the_suite_in_blocks_equals_the_suite_on_whole_patterns(checkpoints, kind):
    model = checkpoints[kind]
    info = probes.ModelInfo.of(model)
    batches: list = [_tokens(seed=s) for s in range(2)]
    if kind == "roberta":  # padded rows, as the report feeds an encoder
        mask = torch.ones(2, 40, dtype=torch.long)
        mask[1, 31:] = 0
        tokens = batches[0].clone()
        tokens[1, 31:] = 1  # RoBERTa's PAD id here
        batches[0] = TokenBatch(tokens, mask.bool(), mask)
    fired = []
    for layer in range(info.n_layers):
        model.hook_dict[pattern_hook(layer)].add_hook(lambda tensor, hook: fired.append(hook.name))
    try:
        blocks = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=0)
    finally:
        model.reset_hooks()
    fired_in_blocks_run = list(fired)
    whole = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=None)
    for a, b in zip(blocks, whole):
        assert results_close(a, b, rtol=1e-4, atol=1e-6), type(a).__name__
        assert a.provenance.n_tokens == b.provenance.n_tokens
    # only the short verification pass went through hook_pattern: the probed batches never fired it
    assert len(fired_in_blocks_run) == info.n_layers


class WholeLayers(probes.CopierProbe):
    """A layerwise probe written with ``_update_layer`` only: it needs each layer's whole pattern."""

    def _update_layer(self, index, activation, batch, context):
        probes.CopierProbe._update_rows(self, index, activation, 0, batch, context)

    _update_rows = probes.LayerwiseProbe._update_rows


def test_a_probe_that_needs_whole_layers_keeps_the_whole_patterns(checkpoints, caplog):
    model = checkpoints["gpt_neox"]
    assert not WholeLayers.folds_query_rows() and probes.CopierProbe.folds_query_rows()
    make = lambda: [probes.HeadScoreProbe(), WholeLayers(max_distance=2)]  # noqa: E731
    with caplog.at_level("INFO", logger="probes.core.runner"):
        got = probes.run_probes(model, make(), [_tokens()], progress=False, max_pattern_bytes=0)
    assert "needs whole layers" in caplog.text
    expected = probes.run_probes(model, make(), [_tokens()], progress=False, max_pattern_bytes=None)
    assert all(results_close(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, expected))


def test_reductions_that_disagree_with_hook_pattern_fall_back(checkpoints, monkeypatch, caplog):
    model = checkpoints["gemma2"]
    correct = attention_rows.reduced_attention_forward

    def wrong_scale(module, query, key, value, attention_mask, scaling=None, **kwargs):
        return correct(module, query, key, value, attention_mask, scaling=2 * (scaling or module.head_dim**-0.5),
                       **kwargs)

    monkeypatch.setattr(attention_rows, "reduced_attention_forward", wrong_scale)
    info = probes.ModelInfo.of(model)
    with caplog.at_level("WARNING", logger="probes.core.runner"):
        got = probes.run_probes(model, _suite(info.d_vocab), [_tokens()], progress=False, max_pattern_bytes=0)
    assert "do not reproduce hook_pattern" in caplog.text
    expected = probes.run_probes(model, _suite(info.d_vocab), [_tokens()], progress=False, max_pattern_bytes=None)
    assert all(results_close(a, b, rtol=1e-12, atol=1e-12) for a, b in zip(got, expected))


def test_models_without_hugging_face_attention_use_whole_patterns():
    """OracleModel has no Hugging Face attention to reduce: asked for reductions, the runner folds its whole
    patterns, and every score equals the nested-loop reference on those patterns."""
    model = OracleModel()
    assert not attention_rows.supports_reductions(model)
    tokens = _tokens(n_pos=12) % 50
    got = probes.run_probes(model, [probes.HeadScoreProbe()], [tokens], progress=False, max_pattern_bytes=0)
    batch = probes.as_token_batch(tokens, probes.ModelInfo.of(model))
    patterns = [OracleModel.patterns(batch.tokens, 4)] * 2
    for kind in probes.HEAD_SCORE_KINDS:
        expected = reference_scores(patterns, batch.tokens, batch.valid, kind)
        torch.testing.assert_close(got[0].scores[kind].double(), expected, rtol=0, atol=1e-6)


def test_rows_arrive_once_each_in_order():
    info = probes.ModelInfo.of(OracleModel())
    probe = probes.HeadScoreProbe().bind(info)
    batch = probes.as_token_batch(_tokens(n_pos=12) % 50, info)
    pattern = OracleModel.patterns(batch.tokens, info.n_heads)
    probe.begin_batch(batch)
    probe.fold_rows(pattern_hook(0), pattern[:, :, :5], 0, batch)
    with pytest.raises(probes.ProbeStateError, match="in order"):
        probe.fold_rows(pattern_hook(0), pattern[:, :, 6:], 6, batch)
    whole = WholeLayers().bind(info)
    whole.begin_batch(batch)
    with pytest.raises(probes.ProbeStateError, match="whole layers only"):
        whole.fold_rows(pattern_hook(0), pattern, 0, batch)


@pytest.fixture(scope="module")
def windowed_gqa(tmp_path_factory):
    """A tiny random Mistral: grouped-query attention (4 query heads on 2 key heads) and a sliding window of 8."""
    from transformers import MistralConfig, MistralForCausalLM

    from tests.random_checkpoints import smollm2_tokenizer

    tokenizer = smollm2_tokenizer()
    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                           max_position_embeddings=512, bos_token_id=tokenizer.bos_token_id,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    config.architectures = ["MistralForCausalLM"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = MistralForCausalLM(config)
    folder = tmp_path_factory.mktemp("mistral")
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return probes.load_model(folder)


def test_windowed_gqa_with_padding_and_bos_uses_the_fused_kernel_and_equals_whole_patterns(windowed_gqa, monkeypatch):
    """Sliding window and grouped-query attention on the fused path (the blocked fallback would fail this test),
    a right-padded row and a BOS at position 0: the suite equals the suite on whole patterns."""
    model = windowed_gqa
    info = probes.ModelInfo.of(model)
    tokens = _tokens(n_pos=40)
    tokens[:, 0] = model.tokenizer.bos_token_id
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 30:] = 0
    tokens[1, 30:] = model.tokenizer.pad_token_id
    batch = TokenBatch(tokens, mask.bool() & (torch.arange(40) > 0), mask)
    whole = probes.run_probes(model, _suite(info.d_vocab), [batch], progress=False, max_pattern_bytes=None)

    def no_fallback(*args, **kwargs):
        raise AssertionError("the blocked fallback ran where the fused kernel should have")

    monkeypatch.setattr(attention_rows, "_blocked", no_fallback)
    assert reductions_check.reductions_match_hook_pattern(model, tokens[:1])
    reduced = probes.run_probes(model, _suite(info.d_vocab), [batch], progress=False, max_pattern_bytes=0)
    for a, b in zip(reduced, whole):
        assert results_close(a, b, rtol=1e-4, atol=1e-6), type(a).__name__
