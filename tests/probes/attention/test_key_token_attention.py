"""Per-key-token attention from query tokens: reference loops, known answers, merging, the Y/Z model."""

from __future__ import annotations

import math

import pytest
import torch

import probes
from probes.attention.key_token_attention import KeyTokenAttentionProbe, entropy_nats
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ProbeStateError
from probes.core.model_info import ModelInfo, pattern_hook

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


INFO = ModelInfo(name="fake", n_layers=2, n_heads=3, n_ctx=9, d_vocab=6, causal=True, bos_token_id=None,
                 special_token_ids=())


def random_batch(seed: int, n_batch: int = 4, n_pos: int = 9, causal: bool = True):
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, INFO.d_vocab, (n_batch, n_pos), generator=generator)
    valid = torch.rand(n_batch, n_pos, generator=generator) > 0.15
    patterns = {}
    for layer in range(INFO.n_layers):
        scores = torch.randn(n_batch, INFO.n_heads, n_pos, n_pos, generator=generator) * 2
        if causal:
            scores = scores.masked_fill(torch.ones(n_pos, n_pos, dtype=torch.bool).triu(1), float("-inf"))
        patterns[pattern_hook(layer)] = scores.softmax(-1)
    return TokenBatch(tokens, valid), patterns


def reference(batches, queries, keys, *, query_position, causal, exclude_self, window):
    """Nested loops over sequences, query positions and key positions."""
    n_q, n_k = len(queries), len(keys)
    mass = torch.zeros(INFO.n_layers, INFO.n_heads, n_q, n_k, dtype=torch.float64)
    occurrences = torch.zeros(n_q, n_k, dtype=torch.float64)
    rows = torch.zeros(n_q, dtype=torch.float64)
    entropy = torch.zeros(INFO.n_layers, INFO.n_heads, n_q, dtype=torch.float64)
    for batch, patterns in batches:
        tokens, valid = batch.tokens.tolist(), batch.valid.tolist()
        for b in range(len(tokens)):
            last = max([p for p in range(len(tokens[b])) if valid[b][p]], default=-1)
            for q in range(len(tokens[b])):
                if not valid[b][q] or tokens[b][q] not in queries or (query_position == "last" and q != last):
                    continue
                qi = queries.index(tokens[b][q])
                rows[qi] += 1
                for layer in range(INFO.n_layers):
                    for head in range(INFO.n_heads):
                        row = patterns[pattern_hook(layer)][b, head, q].double()
                        entropy[layer, head, qi] += -sum(float(p) * math.log(float(p)) for p in row if p > 0)
                for k in range(len(tokens[b])):
                    if not valid[b][k] or tokens[b][k] not in keys:
                        continue
                    if (exclude_self and k == q) or (causal and k > q) or (window and abs(q - k) > window):
                        continue
                    ki = keys.index(tokens[b][k])
                    occurrences[qi, ki] += 1
                    for layer in range(INFO.n_layers):
                        for head in range(INFO.n_heads):
                            mass[layer, head, qi, ki] += float(patterns[pattern_hook(layer)][b, head, q, k])
    return mass / rows[:, None], mass / occurrences, occurrences, rows, entropy / rows


def feed(probe, batches):
    probe.bind(INFO)
    for batch, patterns in batches:
        probe.update(patterns, batch)
    return probe


@pytest.mark.parametrize("query_position, causal, exclude_self, window", [
    ("all", True, True, None), ("all", False, False, None), ("last", True, True, None), ("all", True, True, 2),
])
def test_matches_the_nested_loop_reference(query_position, causal, exclude_self, window):
    batches = [random_batch(seed, causal=causal) for seed in range(3)]
    queries, keys = [0, 2, 3, 5], [1, 2, 3, 4, 5]
    probe = KeyTokenAttentionProbe(queries, keys, query_position=query_position, causal=causal,
                                   exclude_self=exclude_self, window=window)
    result = feed(probe, batches).compute()
    mass, per_occurrence, occurrences, rows, entropy = reference(
        batches, queries, keys, query_position=query_position, causal=causal, exclude_self=exclude_self,
        window=window)
    assert torch.equal(result.rows, rows.long())
    assert torch.equal(result.occurrences, occurrences.float())
    assert torch.allclose(result.mass.double(), mass, atol=1e-6, equal_nan=True)
    assert torch.allclose(result.per_occurrence.double(), per_occurrence, atol=1e-6, equal_nan=True)
    assert torch.allclose(result.position_entropy.double(), entropy, atol=1e-5, equal_nan=True)


def test_hand_made_known_answer():
    info = ModelInfo(name="hand", n_layers=1, n_heads=1, n_ctx=4, d_vocab=4, causal=True, bos_token_id=None,
                     special_token_ids=())
    tokens = torch.tensor([[1, 2, 2, 3]])
    pattern = torch.zeros(1, 1, 4, 4)
    pattern[0, 0] = torch.tensor([[1, 0, 0, 0], [0.5, 0.5, 0, 0], [0.2, 0.3, 0.5, 0], [0.1, 0.2, 0.3, 0.4]])
    probe = KeyTokenAttentionProbe([3], [1, 2, 3], query_position="last").bind(info)
    probe.update({pattern_hook(0): pattern}, TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool)))
    result = probe.compute()
    assert result.mass[0, 0, 0].tolist() == pytest.approx([0.1, 0.5, 0.0])  # self (0.4) not counted
    assert result.occurrences[0].tolist() == [1, 2, 0]
    assert result.per_occurrence[0, 0, 0, :2].tolist() == pytest.approx([0.1, 0.25])
    assert result.key_mass(3, [2]) == pytest.approx(0.5)
    assert result.composition(3, [1, 2]).tolist() == pytest.approx([1 / 6, 5 / 6])
    expected_entropy = -sum(p * math.log(p) for p in (0.1, 0.2, 0.3, 0.4))
    assert float(result.position_entropy[0, 0, 0]) == pytest.approx(expected_entropy, rel=1e-6)
    assert result.token_entropy(3, [1, 2]) == pytest.approx(-(1 / 6) * math.log(1 / 6) - (5 / 6) * math.log(5 / 6))


def test_merge_of_two_halves_equals_the_whole():
    batches = [random_batch(seed) for seed in range(4)]
    whole = feed(KeyTokenAttentionProbe([1, 4]), batches).compute()
    first = feed(KeyTokenAttentionProbe([1, 4]), batches[:2])
    second = feed(KeyTokenAttentionProbe([1, 4]), batches[2:])
    merged = first.merge(second).compute()
    for field in ("mass", "per_occurrence", "occurrences", "rows", "position_entropy"):
        assert torch.allclose(getattr(whole, field).double(), getattr(merged, field).double(), atol=1e-6,
                              equal_nan=True), field


def test_inputs_are_not_modified():
    batch, patterns = random_batch(0)
    before = {k: v.clone() for k, v in patterns.items()}
    tokens = batch.tokens.clone()
    feed(KeyTokenAttentionProbe(), [(batch, patterns)])
    assert all(torch.equal(before[k], patterns[k]) for k in patterns) and torch.equal(tokens, batch.tokens)


def test_yz_model_probe_matches_expected_attention():
    from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
    from toymodels.scansnap.model import YZModelConfig, YZTransformer

    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, init="linear", seed=3))
    with torch.no_grad():
        model.Z.mul_(10)
    tokens, _, _ = data.sample(192, torch.Generator().manual_seed(0), fact=1)
    (result,) = probes.run_probes(model, [KeyTokenAttentionProbe([31], query_position="last")], tokens.split(96),
                                  progress=False)
    expected = model.expected_attention(data.fact_last, data.context_probs)[1]
    assert result.rows.tolist() == [192]
    assert (result.mass[0, 0, 0].double() - expected).abs().max() < 0.01
    assert result.key_mass(31, data.common_tokens) + result.key_mass(31, data.distinct_tokens[1]) == pytest.approx(1.0)


def test_entropy_nats():
    assert float(entropy_nats(torch.tensor([1.0, 1.0, 1.0, 1.0]))) == pytest.approx(math.log(4))
    assert float(entropy_nats(torch.tensor([0.0, 3.0]))) == 0.0


def test_errors():
    with pytest.raises(ProbeStateError, match="before any data"):
        KeyTokenAttentionProbe().bind(INFO).compute()
    with pytest.raises(ConfigError, match="non-negative token ids"):
        KeyTokenAttentionProbe([-1])
    with pytest.raises(ConfigError, match="must not repeat"):
        KeyTokenAttentionProbe([1, 1])
    with pytest.raises(ConfigError, match="query_position must be 'last' or 'all'"):
        KeyTokenAttentionProbe(query_position="first")
    with pytest.raises(ConfigError, match="outside the vocabulary"):
        feed(KeyTokenAttentionProbe([99]), [random_batch(0)])
    big = ModelInfo(name="big", n_layers=12, n_heads=12, n_ctx=8, d_vocab=50_000, causal=True, bos_token_id=None,
                    special_token_ids=())
    with pytest.raises(ConfigError, match="Pass shorter"):
        KeyTokenAttentionProbe().bind(big).update(
            {pattern_hook(layer): torch.zeros(1, 12, 2, 2) for layer in range(12)},
            TokenBatch(torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.bool)))
    batch, patterns = random_batch(0)
    result = feed(KeyTokenAttentionProbe([0, 1, 2, 3, 4, 5]), [(batch, patterns)]).compute()
    with pytest.raises(InputError, match="not tracked"):
        result.key_mass(0, [77])
    bad = {k: v[:, :, :-1] for k, v in patterns.items()}
    with pytest.raises(InputError, match=r"\[batch head q_pos k_pos\]"):
        feed(KeyTokenAttentionProbe(), [(batch, bad)])


def test_result_saves_loads_and_converts(tmp_path):
    result = feed(KeyTokenAttentionProbe([1, 4], [0, 1, 2]), [random_batch(0)]).compute()
    loaded = probes.ProbeResult.load(result.save(tmp_path / "kta"))
    assert type(loaded) is type(result)
    assert torch.allclose(loaded.mass, result.mass, equal_nan=True) and torch.equal(loaded.rows, result.rows)
    frame = result.to_dataframe()
    assert len(frame) == 2 * 3 * 2 * 3 and set(frame["key_token"]) == {0, 1, 2}
