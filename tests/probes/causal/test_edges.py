"""Edges by path patching on a planted previous-token -> induction K-composition: the batched passes against a slow
reference (one sequence, one edge, explicit hooks through the weights), every edge of a null measured alone, and
the verdicts: the planted edge holds, its Q- and V-edges and a non-edge are absent."""

from __future__ import annotations

import pytest
import torch

from mechprobe import forward
from probes import random_weight_control
from probes.causal import (
    EdgePlan,
    distance_matched_edges,
    edge_effect,
    edge_sums,
    edge_with_null,
    head_output_means,
    repeated_half,
)
from probes.causal.edges import input_hook
from probes.causal.means import z_hook
from probes.causal.routes import resid_hook
from probes.core.errors import InputError, ModelError
from probes.core.model_info import ModelInfo, pattern_hook
from tests.hooked_models import OracleModel
from tests.probes.causal.planted_circuit import (
    INDUCTION_HEAD,
    PREVIOUS_HEAD,
    SEQ_LEN,
    circuit_batches,
    planted_circuit_bridge,
    planted_circuit_hooked_transformer,
)
from tests.probes.tl_support import needs_hooked_transformer
from toymodels.standard import StandardModelConfig, build_standard_model

pytestmark = pytest.mark.usefixtures("one_thread")

SLICE = repeated_half(SEQ_LEN)
PLANTED = (*PREVIOUS_HEAD, *INDUCTION_HEAD)


BUILDS = {"native_bridge": pytest.param(planted_circuit_bridge),
          "hooked_transformer": pytest.param(planted_circuit_hooked_transformer, marks=needs_hooked_transformer)}


@pytest.fixture(scope="module", params=BUILDS.values(), ids=BUILDS.keys())
def model(request):
    return request.param()


@pytest.fixture(scope="module")
def batches():
    return circuit_batches()


@torch.no_grad()
def reference_effects(model, tokens, edge, kind, replacement, norm=lambda x: x):
    """Loss change and receiver-score drop of one edge on ``tokens`` [rows pos], written out: the sender's change to
    the residual is ``(replacement - z_sender) @ W_O``, the receiver's ``kind`` input is recomputed from the clean
    residual plus that change through the receiver layer's ``norm`` (its LayerNorm; none in the planted model) and
    its own weights, put in at ``hook_{kind}`` for that head alone, and the loss and the receiver's pattern are read
    from that one forward, position by position."""
    ls, hs, lr, hr = edge
    cache = {}

    def save(name, key):
        return name, lambda x, hook: cache.__setitem__(key, x.clone())

    clean_logits = forward.run(model, tokens, fwd_hooks=[save(z_hook(ls), "z"), save(resid_hook(lr), "resid"),
                                                         save(pattern_hook(lr), "clean_pattern")])
    sender_z = cache["z"][:, :, hs]
    delta = (replacement(cache["z"])[:, :, hs] - sender_z) @ model.W_O[ls, hs]
    patched_input = norm(cache["resid"] + delta) @ getattr(model, f"W_{kind.upper()}")[lr, hr] + getattr(
        model, f"b_{kind.upper()}")[lr, hr]

    def put(x, hook):
        x = x.clone()
        x[:, :, hr] = patched_input
        return x

    logits = forward.run(model, tokens, fwd_hooks=[(input_hook(lr, kind), put), save(pattern_hook(lr), "pattern")])
    batch_mask = SLICE(circuit_batches(1, tokens.shape[0])[0])
    loss_sum = mass_sum = 0.0
    n_tokens = n_queries = 0
    for row in range(tokens.shape[0]):
        for q in range(tokens.shape[1]):
            if not batch_mask[row, q]:
                continue
            target = tokens[row, q + 1]
            loss_sum += float(clean_logits[row, q].log_softmax(-1)[target] - logits[row, q].log_softmax(-1)[target])
            n_tokens += 1
            keys = [k for k in range(1, q + 1) if tokens[row, k - 1] == tokens[row, q]]
            if keys:
                n_queries += 1
                mass_sum += sum(float(cache["clean_pattern"][row, hr, q, k] - cache["pattern"][row, hr, q, k])
                                for k in keys)
    return loss_sum / n_tokens, mass_sum / n_queries


@pytest.mark.parametrize("method", ["zero", "mean", "resample"])
@pytest.mark.parametrize("kind", ["k", "q"])
def test_the_planted_edge_and_a_random_one_equal_the_slow_reference(model, batches, method, kind):
    info = ModelInfo.of(model)
    rows = 2 if method == "resample" else 1  # one sequence; resample takes the sender's output from another one
    batch = circuit_batches(1, rows, seed=5)[0]
    means = head_output_means(model, (0,), batches)
    perm = torch.tensor([1, 0])  # the only derangement of two rows
    for edge in (PLANTED, (0, 2, 1, 1)):
        plan = EdgePlan.build(info, edge[:2], edge[2:], input=kind, method=method, seed=3)
        sums = edge_sums(model, plan, [batch], SLICE, means=means)
        replace = {"zero": lambda z: torch.zeros_like(z), "mean": lambda z: means.mean(0, z.shape[1]).float()[None]
                   .expand_as(z), "resample": lambda z: z[perm]}[method]
        loss, score = reference_effects(model, batch.tokens, edge, kind, replace)
        assert float(sums.effects()[0, 0]) == pytest.approx(loss, abs=1e-5)
        assert float(sums.effects()[0, 1]) == pytest.approx(score, abs=1e-5)
        if edge == PLANTED and kind == "k" and method != "resample":  # the planted K-edge: a large known effect
            assert loss > 2.0 and score > 0.5


@pytest.mark.parametrize("kind", ["k", "q", "v"])
def test_an_edge_into_a_layernormed_receiver_equals_the_reference_through_its_layernorm(kind):
    model = build_standard_model(StandardModelConfig(n_layers=3, d_model=32, n_heads=4, d_vocab=16, seed=4)).eval()
    with torch.no_grad():  # weights 4 times their initial size: effects well above float noise, patterns not saturated
        for parameter in model.parameters():
            if parameter.ndim == 2:
                parameter.mul_(4.0)
    batch = circuit_batches(1, 1, seed=5)[0]
    plan = EdgePlan.build(ModelInfo.of(model), (0, 1), (2, 3), input=kind, method="zero")
    effects = edge_sums(model, plan, [batch], SLICE).effects()[0]
    loss, score = reference_effects(model, batch.tokens, (0, 1, 2, 3), kind, torch.zeros_like, norm=model.blocks[2].ln1)
    assert abs(loss) > 0.03 and (kind == "v" or abs(score) > 0.01)  # an effect the comparison can miss
    assert float(effects[0]) == pytest.approx(loss, abs=1e-5) and float(effects[1]) == pytest.approx(score, abs=1e-5)


def test_every_batched_edge_equals_that_edge_measured_alone_on_the_whole_forward(model, batches):
    info = ModelInfo.of(model)
    plan = EdgePlan.build(info, PREVIOUS_HEAD, INDUCTION_HEAD, input="k", method="resample", n_draws=12, seed=1)
    batched = edge_sums(model, plan, batches[:2], SLICE).effects()
    for row in range(plan.edges.shape[0]):
        alone = edge_sums(model, plan.subset(row, row + 1), batches[:2], SLICE, shortcuts=False, pass_bytes=1)
        torch.testing.assert_close(batched[row], alone.effects()[0], atol=1e-6, rtol=1e-6)
    halves = edge_sums(model, plan, batches[:1], SLICE).merge(edge_sums(model, plan, batches[1:2], SLICE))
    torch.testing.assert_close(halves.effects(), batched, atol=1e-9, rtol=1e-9)


@pytest.mark.parametrize("pass_bytes", [2**28, 1], ids=["clean passes shared", "over budget: one per group"])
def test_a_null_drawn_in_groups_equals_its_edges_measured_at_once(model, batches, pass_bytes):
    plan = EdgePlan.build(ModelInfo.of(model), PREVIOUS_HEAD, INDUCTION_HEAD, input="k", method="resample",
                          n_draws=12, seed=1)
    sums, null = edge_with_null(model, plan, batches, SLICE, group=3, pass_bytes=pass_bytes)
    assert null is not None and null.n_drawn == 12 and sums.n_edges == 13  # the planted edge beats every draw
    at_once = edge_sums(model, plan, batches, SLICE).effects()
    torch.testing.assert_close(sums.effects(), at_once, atol=1e-9, rtol=1e-9)
    torch.testing.assert_close(null.draws, at_once[1:], atol=1e-9, rtol=1e-9)


def test_the_planted_k_edge_holds_and_its_q_and_v_edges_and_a_non_edge_are_absent(model, batches):
    control_model = random_weight_control(model, seed=0)

    def measured(sender, receiver, kind, on=model):
        return edge_effect(on, sender, receiver, batches, slice_fn=SLICE, input=kind, method="mean", n_draws=100,
                           n_boot=200, data="planted circuit")

    verdicts = {}
    for name, (sender, receiver, kind) in {"planted k": (PREVIOUS_HEAD, INDUCTION_HEAD, "k"),
                                           "planted q": (PREVIOUS_HEAD, INDUCTION_HEAD, "q"),
                                           "planted v": (PREVIOUS_HEAD, INDUCTION_HEAD, "v"),
                                           "non-edge": ((0, 1), INDUCTION_HEAD, "k")}.items():
        result, control = measured(sender, receiver, kind), measured(sender, receiver, kind, control_model)
        verdicts[name] = {effect: result.finding(effect, control) for effect in result.effects}
    for effect in ("loss_change", "score_drop"):
        planted = verdicts["planted k"][effect]
        assert planted.verdict == "holds", planted
        assert planted.null_draws == 100 and planted.p_value < 0.01
        for name in ("planted q", "planted v", "non-edge"):
            assert verdicts[name][effect].verdict == "absent", (name, verdicts[name][effect])
    assert verdicts["planted k"]["loss_change"].value > 2.0 and verdicts["planted k"]["loss_change"].null_value < 0.1


def test_bad_edges_and_models_without_the_hooks_are_refused_with_the_fix(model, batches):
    info = ModelInfo.of(model)
    with pytest.raises(InputError, match="later layer"):
        EdgePlan.build(info, (1, 0), (0, 0), input="k")
    with pytest.raises(InputError, match="outside"):
        EdgePlan.build(info, (0, 9), (1, 0), input="k")
    with pytest.raises(Exception, match="'k' \\(keys\\)"):
        EdgePlan.build(info, (0, 0), (1, 0), input="x")
    with pytest.raises(InputError, match="means=head_output_means"):
        edge_sums(model, EdgePlan.build(info, (0, 0), (1, 0), input="k", method="mean"), batches, SLICE)
    oracle = OracleModel()
    with pytest.raises(ModelError, match="HookPoint"):
        edge_sums(oracle, EdgePlan.build(ModelInfo.of(oracle), (0, 0), (1, 0), input="k", method="zero"), batches,
                  SLICE)


def test_the_null_draws_every_edge_that_shares_no_head_with_the_measured_one_and_no_other():
    """Enumerated by hand: the (layer, head) pairs at the edge's distance, minus every edge touching its sender or
    its receiver (a 3-layer, 3-head model, distance 1: 2 x 2 edges of layers 0 -> 1 and 3 x 3 of layers 1 -> 2 minus
    the 3 that start at the receiver = 10)."""
    sender, receiver = (0, 1), (1, 2)
    draws = distance_matched_edges(sender, receiver, 3, 3, 3000, seed=5)
    allowed = {(ls, hs, ls + 1, hr) for ls in range(2) for hs in range(3) for hr in range(3)
               if (ls, hs) not in (sender, receiver) and (ls + 1, hr) not in (sender, receiver)}
    assert len(allowed) == 10
    drawn = [tuple(row) for row in draws.tolist()]
    assert set(drawn) == allowed  # all of them, uniformly: each about 300 times
    assert max(drawn.count(e) for e in allowed) < 400 and min(drawn.count(e) for e in allowed) > 200
    assert torch.equal(distance_matched_edges(sender, receiver, 3, 3, 40, seed=5), draws[:40])  # draw i fixed
    assert distance_matched_edges((0, 0), (1, 1), 2, 2, 5, seed=0).tolist() == [[0, 1, 1, 0]] * 5  # the one left
    with pytest.raises(InputError, match="shares no head with L0H0 -> L1H0"):
        distance_matched_edges((0, 0), (1, 0), 2, 1, 5, seed=0)
    assert distance_matched_edges((0, 0), (1, 0), 2, 1, 0, seed=0).shape == (0, 4)
