"""Probes fold one layer at a time inside the forward pass, reduce in float32 and match the float64 path.

- Folding each layer as its hook fires (``run_probes``) gives the result of ``update`` on the whole
  captured batch (the old path), on a real TransformerBridge and on the oracle model.
- A layer's pattern is no longer referenced once the next layer runs: the runner keeps nothing.
- Reducing float32 patterns over keys in float32 equals feeding the same patterns as float64
  (every reduction then runs in float64) to 1e-6 relative.
- A forward pass that fails half way (after some layers were folded) counts nothing.
- ``masked_row_sums`` in query chunks equals a plain einsum.
"""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest
import torch

import probes
from probes.core import pattern_sums
from probes.core.batch import as_token_batch
from probes.core.errors import ProbeStateError
from probes.core.model_info import pattern_hook
from probes.core.result import results_close
from tests.hooked_models import OracleModel
from tests.random_checkpoints import make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def gemma2(tmp_path_factory):
    """A tiny random-weight Gemma2 bridge (soft-capped, sliding-window attention; 2 layers, 4 heads)."""
    return probes.load_model(make_random_checkpoint("gemma2", tmp_path_factory.mktemp("gemma2") / "gemma2", seed=0))


def _tokens(info: probes.ModelInfo, n_rows: int = 3, n_pos: int = 24, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, 60, (n_rows, n_pos), generator=generator) % info.d_vocab


def _suite(info: probes.ModelInfo) -> list[probes.Probe]:
    labels = torch.arange(info.d_vocab) % 4
    labels[:3] = -1
    frequent = list(range(3, 30))
    return [
        probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3),
        probes.TopicAttentionProbe(labels, n_permutations=5, permutation_seed=1),
        probes.SameTokenAttentionProbe(labels), probes.CopierProbe(max_distance=3),
        probes.KeyTokenAttentionProbe(frequent, frequent, query_position="all", distance_matched=True),
    ]


def _whole_batch_results(model, info, batches, dtype=None) -> list:
    """The old path: capture every hook of the batch, then ``update`` with all of them at once."""
    suite = [probe.bind(info) for probe in _suite(info)]
    names = sorted({name for probe in suite for name in probe.hook_names(info)})
    with torch.inference_mode():
        for tokens in batches:
            batch = as_token_batch(tokens, info)
            captured = probes.capture(model, batch, names)
            if dtype is not None:
                captured = {name: value.to(dtype) for name, value in captured.items()}
            for probe in suite:
                probe.update({name: captured[name] for name in probe.hook_names(info)}, batch)
    return [probe.compute() for probe in suite]


@pytest.mark.parametrize("which", ["oracle", "gemma2"])
def test_folding_per_layer_equals_updating_with_the_whole_batch(which, request):
    model = OracleModel() if which == "oracle" else request.getfixturevalue("gemma2")
    info = probes.ModelInfo.of(model)
    batches = [_tokens(info, seed=s) for s in range(2)]
    folded = probes.run_probes(model, _suite(info), batches, progress=False)
    whole = _whole_batch_results(model, info, batches)
    for a, b in zip(folded, whole):
        assert results_close(a, b, rtol=1e-12, atol=1e-12), type(a).__name__


def test_float32_reduction_equals_the_float64_path(gemma2):
    info = probes.ModelInfo.of(gemma2)
    batches = [_tokens(info, n_pos=40, seed=s) for s in range(2)]
    in_float32 = _whole_batch_results(gemma2, info, batches)
    in_float64 = _whole_batch_results(gemma2, info, batches, dtype=torch.float64)
    for a, b in zip(in_float32, in_float64):
        for field in dataclasses.fields(a):
            x, y = getattr(a, field.name), getattr(b, field.name)
            pairs = [(x[k], y[k]) for k in x] if isinstance(x, dict) else [(x, y)]
            for u, v in pairs:
                if isinstance(u, torch.Tensor) and u.is_floating_point():
                    assert torch.allclose(u.double(), v.double(), rtol=1e-6, atol=1e-9, equal_nan=True), \
                        f"{type(a).__name__}.{field.name}"


class _LayerWatcher(probes.LayerwiseProbe):
    """Records, at each layer's fold, whether the previous layer's pattern is still alive anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.previous: weakref.ref | None = None
        self.previous_alive: list[bool] = []

    def settings(self):
        return {}

    def hook_names(self, info):
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch, first):
        return None

    def _update_layer(self, index, activation, batch, context):
        if self.previous is not None:
            gc.collect()
            self.previous_alive.append(self.previous() is not None)
        self.previous = weakref.ref(activation)
        self._add_at("seen", index, self.info.n_layers, torch.ones(()))

    def _compute(self, state, info, provenance):
        return probes.ProbeResult(provenance=provenance)


def test_a_layers_pattern_is_freed_before_the_next_layer_is_folded(gemma2):
    watcher = _LayerWatcher()
    probes.run_probes(gemma2, [watcher, probes.HeadScoreProbe()], [_tokens(probes.ModelInfo.of(gemma2))],
                      progress=False)
    assert watcher.previous_alive == [False] * (probes.ModelInfo.of(gemma2).n_layers - 1)
    assert torch.equal(watcher.state_dict()["seen"], torch.ones(2, dtype=torch.float64))


class _FailsAtLastLayer(OracleModel):
    """Runs out of memory after its first layer's hook fired, on batches of more than ``max_rows`` rows."""

    def __init__(self, max_rows: int) -> None:
        super().__init__()
        self.max_rows = max_rows

    def forward(self, tokens):
        pattern = self.patterns(tokens, self.cfg.n_heads)
        self.blocks[0].attn.hook_pattern(pattern)
        if tokens.shape[0] > self.max_rows:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        for block in self.blocks[1:]:
            block.attn.hook_pattern(pattern)
        return pattern


def test_a_forward_pass_that_fails_half_way_counts_nothing():
    batches = [_tokens(probes.ModelInfo.of(OracleModel()), n_rows=8, seed=s) for s in range(2)]
    make = lambda: [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3)]  # noqa: E731
    whole = probes.run_probes(OracleModel(), make(), batches, progress=False)
    retried = probes.run_probes(_FailsAtLastLayer(max_rows=3), make(), batches, progress=False)
    for a, b in zip(whole, retried):
        assert results_close(a, b, rtol=1e-12, atol=1e-12)
        assert a.provenance.n_sequences == b.provenance.n_sequences == 16


def test_the_batch_protocol_is_checked():
    info = probes.ModelInfo.of(OracleModel())
    probe = probes.HeadScoreProbe().bind(info)
    batch = as_token_batch(_tokens(info), info)
    with pytest.raises(ProbeStateError, match="begin_batch"):
        probe.fold({}, batch)
    probe.begin_batch(batch)
    with pytest.raises(ProbeStateError, match="while a batch is open"):
        probe.begin_batch(batch)
    with pytest.raises(ProbeStateError, match=r"before .*blocks\.0\.attn\.hook_pattern"):
        probe.end_batch(batch)
    assert probe.state_dict() == {}  # the failed batch left nothing behind


@pytest.mark.parametrize("chunk_bytes", [pattern_sums.CHUNK_BYTES, 64])
def test_masked_row_sums_in_chunks_equal_an_einsum(monkeypatch, chunk_bytes):
    monkeypatch.setattr(pattern_sums, "CHUNK_BYTES", chunk_bytes)  # 64 bytes: one query row per chunk
    generator = torch.Generator().manual_seed(0)
    pattern = torch.rand(2, 3, 7, 7, generator=generator).to(torch.bfloat16)
    mask = torch.rand(2, 7, 7, generator=generator) > 0.5
    exact = pattern.double()
    assert torch.allclose(pattern_sums.masked_row_sums(pattern, mask),
                          torch.einsum("bhqk,bqk->bhq", exact, mask.double()), rtol=1e-6)


def test_a_probe_fed_two_corpora_names_both_in_its_provenance():
    model = OracleModel()
    info = probes.ModelInfo.of(model)
    probe = probes.HeadScoreProbe()
    probes.feed_probes(model, [probe], [_tokens(info, seed=0)], data="corpus A", seed=0, progress=False)
    probes.feed_probes(model, [probe], [_tokens(info, seed=1)], data="corpus B", seed=0, progress=False)
    assert probe.compute().provenance.data == "corpus A + corpus B"
    assert probe.compute().provenance.seed == 0
    other = probes.HeadScoreProbe()
    probes.feed_probes(model, [other], [_tokens(info, seed=2)], data="corpus C", seed=5, progress=False)
    merged = probe.merge(other).compute().provenance
    assert (merged.data, merged.seed) == ("corpus A + corpus B (seed 0) + corpus C (seed 5)", None)
    assert merged.n_sequences == 9


@pytest.mark.parametrize("shares", [(0.005, 0.005), (0.3, 0.3), (0.005, 0.3)])
@pytest.mark.parametrize("start, n_rows", [(0, 40), (5, 12)])
def test_key_mask_sums_sparse_and_dense_masks_like_an_einsum(shares, start, n_rows):
    generator = torch.Generator().manual_seed(1)
    mask = torch.stack([torch.rand(40, 40, generator=generator) < share for share in shares])
    pattern = torch.rand(2, 3, 40, 40, generator=generator)
    key_mask = pattern_sums.KeyMask.of(mask)
    sparse = mask.flatten(1).sum(1) <= pattern_sums.SPARSE_SHARE * 1600  # decided per sequence
    assert (key_mask.entries is not None) == bool(sparse.any())
    assert (key_mask.dense is not None) == bool((~sparse).any())
    rows = slice(start, start + n_rows)
    expected = torch.einsum("bhqk,bqk->h", pattern[:, :, rows].double(), mask[:, rows].double())
    assert torch.allclose(key_mask.pattern_sum(pattern[:, :, rows], start), expected, rtol=1e-6)
