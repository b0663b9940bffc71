"""Composition scores: every pair against the products written out, the planted K-composition found by its weights
alone (and its Q- and V-scores exactly zero), and the screen's rank correlation with patched effects."""

from __future__ import annotations

import pytest
import torch

from probes.causal.composition import composition_scores, head_weights, screen_rank_correlation
from probes.core.errors import ModelError
from tests.hooked_models import OracleModel
from tests.probes.causal.planted_circuit import INDUCTION_HEAD, PREVIOUS_HEAD, planted_circuit_bridge
from toymodels.standard import StandardModelConfig, build_standard_model

pytestmark = pytest.mark.usefixtures("one_thread")


def reference_scores(model) -> dict[str, torch.Tensor]:
    """Nested loops over the pairs with the [d_model d_model] circuits formed and normed."""
    w = head_weights(model)
    n_layers, n_heads = w["W_Q"].shape[:2]
    out = {kind: torch.full((n_layers, n_heads, n_layers, n_heads), float("nan"), dtype=torch.float64)
           for kind in "kqv"}
    for ls in range(n_layers):
        for hs in range(n_heads):
            ov_s = w["W_V"][ls, hs] @ w["W_O"][ls, hs]
            for lr in range(ls + 1, n_layers):
                for hr in range(n_heads):
                    qk_r = w["W_Q"][lr, hr] @ w["W_K"][lr, hr].T
                    ov_r = w["W_V"][lr, hr] @ w["W_O"][lr, hr]
                    for kind, right in (("q", qk_r), ("k", qk_r.T), ("v", ov_r)):
                        out[kind][ls, hs, lr, hr] = (torch.linalg.norm(ov_s @ right)
                                                     / (torch.linalg.norm(ov_s) * torch.linalg.norm(right)))
    return out


def test_every_pair_equals_the_written_out_products_and_the_planted_pair_composes_through_its_keys_only():
    random_model = build_standard_model(StandardModelConfig(n_layers=3, d_model=24, n_heads=3, d_vocab=11, seed=2))
    for model in (random_model, planted_circuit_bridge()):
        scores = composition_scores(model)
        for kind, expected in reference_scores(model).items():
            torch.testing.assert_close(scores.scores[kind], expected, rtol=1e-9, atol=1e-12, equal_nan=True)
    # the planted previous-token head writes the previous-token block, which the induction head's keys alone read
    assert scores.pair("k", PREVIOUS_HEAD, INDUCTION_HEAD) > 0.15  # random pairs of this model: 0.10-0.12
    assert scores.pair("q", PREVIOUS_HEAD, INDUCTION_HEAD) == 0.0 and scores.pair("v", PREVIOUS_HEAD,
                                                                                 INDUCTION_HEAD) == 0.0
    k = scores.scores["k"][0, :, 1, :]
    assert k.argmax() == PREVIOUS_HEAD[1] * k.shape[1] + INDUCTION_HEAD[1]
    assert len(scores.to_dataframe()) == 4 * 4


def test_the_rank_correlation_counts_each_edge_once_and_reads_the_screens_order():
    scores = composition_scores(planted_circuit_bridge())
    edges = torch.tensor([[0, h, 1, r] for h in range(4) for r in range(4)])
    k = scores.of_edges("k", edges)
    assert screen_rank_correlation(scores, "k", edges, k * 3 + 1) == pytest.approx(1.0)
    assert screen_rank_correlation(scores, "k", edges, -k) == pytest.approx(-1.0)
    repeated = torch.cat([edges, edges[:1].repeat(20, 1)])  # the first edge drawn 21 times counts once
    effects = torch.cat([k, torch.full((20,), 99.0)])
    assert screen_rank_correlation(scores, "k", repeated, effects) == pytest.approx(1.0)


def test_a_model_without_weights_is_refused_with_what_to_add():
    with pytest.raises(ModelError, match="W_Q"):
        composition_scores(OracleModel())
