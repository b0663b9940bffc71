"""The classifier's reading (:mod:`analyses.induction.reading`): the position split against a slow loop, and the key
components on the planted previous-token -> induction circuit (its keys read the copier alone, or, rewired, the
token embedding alone), on batches of one repeated row (every per-position mean is the row itself; also on a toy
with an MLP, whose output is one more component) and on the induction toy at initialisation (nothing read beyond
uniform attention)."""

from __future__ import annotations

import pytest
import torch

from analyses.induction.config import PRESETS
from analyses.induction.edge import toy_batches
from analyses.induction.findings import build_model
from analyses.induction.reading import POSITIONS, classifier_reading, position_sums
from analyses.pretrained.held_out import halves
from probes import feed_probes
from probes.attention.generalized_induction import GeneralizedInductionProbe
from probes.core.batch import TokenBatch
from tests.probes.causal.planted_circuit import (
    D_HEAD,
    SEQ_LEN,
    SHARP,
    TOKEN,
    V,
    circuit_batches,
    planted_circuit_bridge,
)
from toymodels.standard import StandardModelConfig, build_standard_model

pytestmark = pytest.mark.usefixtures("one_thread")


def slow_position_sums(tokens, valid, pattern, order):
    """One query and one key at a time, from the definitions."""
    n_rows, n_pos = tokens.shape
    queries = torch.zeros(n_rows, dtype=torch.float64)
    mass, uniform = torch.zeros(n_rows, 3, dtype=torch.float64), torch.zeros(n_rows, 3, dtype=torch.float64)
    for b in range(n_rows):
        for q in range(n_pos):
            def is_target(k, b=b, q=q):
                return valid[b, k] and all(k - j >= 0 and q + 1 - j >= 0 and valid[b, k - j] and valid[b, q + 1 - j]
                                           and tokens[b, k - j] == tokens[b, q + 1 - j] for j in range(1, order))
            keys = [k for k in range(q + 1) if is_target(k)]
            if not valid[b, q] or not keys:
                continue
            queries[b] += 1
            for k in range(q + 1):
                kind = 0 if k in keys else 1 if q - k < order else 2
                mass[b, kind] += float(pattern[b, q, k])
                uniform[b, kind] += 1 / (q + 1)
    return queries, mass, uniform


def test_the_position_split_sums_to_one_per_query_and_equals_a_slow_loop():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 3, (3, 12), generator=generator)
    valid = torch.ones_like(tokens, dtype=torch.bool)
    valid[1, :2] = False
    scores = torch.randn(3, 12, 12, generator=generator).masked_fill(~torch.ones(12, 12, dtype=torch.bool).tril(),
                                                                      float("-inf"))
    pattern = scores.softmax(-1)
    for order in (2, 3):
        queries, mass, uniform = position_sums(tokens, valid, pattern, order)
        slow = slow_position_sums(tokens, valid, pattern, order)
        assert queries.sum() > 0
        torch.testing.assert_close(queries, slow[0])
        torch.testing.assert_close(mass, slow[1])
        torch.testing.assert_close(uniform, slow[2])
        torch.testing.assert_close(mass.sum(-1), queries.double())
        torch.testing.assert_close(uniform.sum(-1), queries.double())


def test_keys_that_read_only_the_copier_lose_the_score_with_it_and_nothing_else():
    model, batches = planted_circuit_bridge(), circuit_batches(4, 32)
    reading = classifier_reading(model, batches, 2)
    assert reading.copier == (0, 0) and reading.classifier == (1, 0)
    # every query attends to its previous token, which is BOS (not counted: invalid) on 1 of the 16 queries
    assert reading.layer1.shape == (4, 2) and float(reading.layer1[0, 1]) == pytest.approx(15 / 16, abs=1e-3)
    probe = GeneralizedInductionProbe(2)
    feed_probes(model, [probe], halves(batches)[1], progress=False)
    scores = probe.compute()
    assert reading.score == pytest.approx(float(scores.scores[1, 0]), abs=1e-5)
    assert reading.chance == pytest.approx(scores.chance, abs=1e-6)
    assert sum(reading.shares.values()) == pytest.approx(1.0)
    assert list(reading.shares) == list(POSITIONS) and reading.score > 0.99
    drops = reading.drops()
    assert reading.drop_share("copier") > 0.9 and reading.drop_share("head0") == reading.drop_share("copier")
    assert drops["copier"][1] > 0.8
    for name in ("token", "position", "other_heads", "head1", "head2", "head3"):
        assert abs(drops[name][0]) < 1e-6, name


def successor(tokens):
    """The token after ``tokens`` in the cycle 1 .. V - 1."""
    return tokens % (V - 1) + 1


def keys_read_the_token():
    """The planted circuit with layer 2 head 0 reading tokens alone: its query the query's token's successor, its
    key the key's token (nothing of the previous-token block)."""
    model = planted_circuit_bridge()
    params = {name.replace("_original_component.", ""): p for name, p in model.original_model.named_parameters()}
    tokens = torch.arange(1, V)
    with torch.no_grad():
        for kind, dims in (("q", successor(tokens)), ("k", tokens)):
            weight = params[f"layers.1.attn.{kind}.weight"]
            weight[:D_HEAD] = 0.0
            weight[dims, TOKEN + tokens] = SHARP
    return model


def successor_batches(n_batches, rows):
    """``[BOS=0] X X`` rows whose X runs through the cycle from a random token: the token after an earlier copy of
    the query's token is its successor, so a head that matches tokens to successors is an induction head."""
    generator = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(n_batches):
        block = successor(torch.randint(0, V - 1, (rows, 1), generator=generator) + torch.arange(SEQ_LEN))
        tokens = torch.cat([torch.zeros(rows, 1, dtype=torch.long), block, block], 1)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        valid[:, 0] = False
        batches.append(TokenBatch(tokens, valid))
    return batches


def test_keys_that_read_only_the_token_embedding_lose_the_score_with_it_not_with_the_copier():
    reading = classifier_reading(keys_read_the_token(), successor_batches(4, 32), 2)
    assert reading.copier == (0, 0) and reading.classifier == (1, 0) and reading.score > 0.8
    drops = reading.drops()
    assert reading.drop_share("token") > 0.9 and drops["token"][1] > 0.5
    for name in ("copier", "head0"):
        assert abs(drops[name][0]) < 1e-6, name


def test_on_one_repeated_row_every_per_position_mean_is_the_row_itself():
    (row,) = successor_batches(1, 1)
    batches = [TokenBatch(row.tokens.repeat(4, 1), row.valid.repeat(4, 1)) for _ in range(4)]
    reading = classifier_reading(keys_read_the_token(), batches, 2)
    assert 0.5 < reading.score < 1
    for name in reading.components:
        if name != "position":
            assert reading.without[name] == pytest.approx(reading.score, abs=1e-6), name


def test_the_toy_at_initialisation_reads_nothing_beyond_uniform_attention():
    config = PRESETS["standard"]
    reading = classifier_reading(build_model(config).eval(), toy_batches(config, 8), config.data.order, n_boot=200)
    for name in POSITIONS:
        assert reading.shares[name] == pytest.approx(reading.uniform_shares[name], abs=0.03), name
    for name, (estimate, low, high) in reading.drops().items():
        assert abs(estimate) < 0.01 and high - low < 0.03, name


def test_a_toy_with_an_mlp_has_its_output_replaced_too_and_one_repeated_row_moves_nothing():
    model = build_standard_model(StandardModelConfig(d_model=32, n_heads=4, d_vocab=V, n_ctx=24, attn_only=False,
                                                     seed=1)).eval()
    (row,) = successor_batches(1, 1)
    batches = [TokenBatch(row.tokens.repeat(4, 1), row.valid.repeat(4, 1)) for _ in range(4)]
    reading = classifier_reading(model, batches, 2)
    assert "mlp" in reading.components and "mlp" not in classifier_reading(keys_read_the_token(), batches, 2).components
    for name in reading.components:
        if name != "position":
            assert reading.without[name] == pytest.approx(reading.score, abs=1e-6), name
