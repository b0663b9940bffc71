"""Head ablation on a model with one planted induction head: known answers, a nested-loop reference of the
batched null, additivity, and typed errors for bad input."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.causal import AblationPlan, ablation_sums, head_output_means, repeated_half
from probes.causal.means import z_hook
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_info import ModelInfo
from tests.probes.causal.planted_models import INDUCTION_HEAD, PlantedInductionModel, repeated_batches

SEQ_LEN = 8
SLICES = {"repeated_half": repeated_half(SEQ_LEN), "first": probes.first_occurrence_mask}

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    return PlantedInductionModel()


@pytest.fixture(scope="module")
def batches():
    return repeated_batches(seq_len=SEQ_LEN)


@pytest.mark.parametrize("method", ["zero", "mean", "resample"])
def test_ablating_the_planted_induction_head_removes_copying_and_another_head_does_not(model, batches, method):
    planted = probes.head_ablation(model, [INDUCTION_HEAD], batches, slices=SLICES, method=method)
    other = probes.head_ablation(model, [(1, 1)], batches, slices=SLICES, method=method)
    assert planted.clean_loss[0] < 0.05  # the planted head copies the repeated half almost perfectly
    # without it the repeated half is no better than guessing among the 23 tokens (log 23 = 3.1 nats)
    assert planted.change[0] > 3.0 and planted.low[0] > 3.0
    assert abs(other.change[0]) < 0.01


def test_zero_ablation_equals_the_model_without_the_head(model, batches):
    result = probes.head_ablation(model, [INDUCTION_HEAD], batches, slices=SLICES, method="zero")
    without = PlantedInductionModel()
    with torch.no_grad():
        without.weight[INDUCTION_HEAD] = 0.0
    mask = torch.stack([repeated_half(SEQ_LEN)(b) for b in batches])
    tokens = torch.stack([b.tokens for b in batches])

    @torch.no_grad()
    def loss(m):
        logits = torch.stack([m(b.tokens) for b in batches]).log_softmax(-1)
        nll = -logits.gather(-1, tokens.roll(-1, -1)[..., None])[..., 0]
        return nll[mask].double().mean()

    assert float(result.change[0]) == pytest.approx(float(loss(without) - loss(model)), rel=1e-5)


@torch.no_grad()
def _reference_changes(model, batches, plan, means):
    """One forward pass per head set (nested loops): the mean loss change on the repeated half."""
    mask = repeated_half(SEQ_LEN)
    out = []
    for s in range(plan.sets.shape[0]):
        total_clean = total_ablated = count = 0.0
        for batch in batches:
            cache = {}
            keep = [(z_hook(layer), lambda z, hook, layer=layer, cache=cache: cache.__setitem__(layer, z.clone()))
                    for layer in plan.layers]
            model.run_with_hooks(batch.tokens, fwd_hooks=keep)
            perm = probes.derangement(batch.shape[0], seed=plan.seed)

            def ablate(z, hook, layer, s=s, cache=cache, perm=perm):  # bound now: the hooks run in this iteration
                z = z.clone()
                for head in range(z.shape[2]):
                    if plan.sets[s, plan.layers.index(layer), head]:
                        if plan.method == "zero":
                            z[:, :, head] = 0
                        elif plan.method == "mean":
                            z[:, :, head] = means.mean(layer, z.shape[1])[:, head].float()
                        else:
                            z[:, :, head] = cache[layer][perm][:, :, head]
                return z

            hooks = [(z_hook(layer), lambda z, hook, layer=layer: ablate(z, hook, layer)) for layer in plan.layers]
            m = mask(batch)
            for logits, which in ((model(batch.tokens), "clean"),
                                  (model.run_with_hooks(batch.tokens, fwd_hooks=hooks), "ablated")):
                nll = -logits.log_softmax(-1).gather(-1, batch.tokens.roll(-1, 1)[..., None])[..., 0]
                if which == "clean":
                    total_clean += float(nll[m].double().sum())
                else:
                    total_ablated += float(nll[m].double().sum())
            count += float(m.sum())
        out.append((total_ablated - total_clean) / count)
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("method", ["zero", "mean", "resample"])
def test_batched_null_equals_one_forward_per_head_set(model, batches, method):
    info = ModelInfo.of(model)
    plan = AblationPlan.build(info, [(0, 1), (1, 0), (1, 3)], method=method, n_draws=6, seed=3)
    means = head_output_means(model, plan.layers, batches)
    # 4 rows per batch, 12 rows per forward: 7 sets in groups of 3, 3 and 1
    sums = ablation_sums(model, plan, batches, {"repeated_half": repeated_half(SEQ_LEN)}, means=means, max_rows=12)
    reference = _reference_changes(model, batches, plan, means)
    torch.testing.assert_close(sums.loss_change()[:, 0], reference, rtol=1e-5, atol=1e-6)


def test_merged_halves_equal_the_whole(model, batches):
    plan = AblationPlan.build(ModelInfo.of(model), [INDUCTION_HEAD], method="mean", n_draws=5, seed=0)
    means = head_output_means(model, plan.layers, batches)
    halves = head_output_means(model, plan.layers, batches[:2]).merge(
        head_output_means(model, plan.layers, batches[2:]))
    for whole, merged in zip(means.sums, halves.sums):
        torch.testing.assert_close(whole, merged)
    whole = ablation_sums(model, plan, batches, SLICES, means=means)
    merged = ablation_sums(model, plan, batches[:2], SLICES, means=means).merge(
        ablation_sums(model, plan, batches[2:], SLICES, means=means))
    torch.testing.assert_close(whole.loss_change(), merged.loss_change(), rtol=0, atol=0)
    assert whole.ablated.shape == (4, 6, 2) and float(whole.rows.sum()) == 16


def test_random_sets_match_the_heads_per_layer_and_the_null_gives_a_p_value(model, batches):
    heads = ((0, 1), (1, 0), (1, 3))
    sets = probes.layer_matched_head_sets(heads, 4, 300, seed=1)
    assert sets.shape == (300, 2, 4) and (sets.sum(-1) == torch.tensor([1, 2])).all()
    assert torch.equal(sets, probes.layer_matched_head_sets(heads, 4, 300, seed=1))
    result = probes.head_ablation(model, [INDUCTION_HEAD], batches, slices=SLICES, method="zero", n_draws=200,
                                  stop_at=None)
    # a draw is one random head of layer 1: 1 in 4 draws is the planted head itself, and it ties the observed value
    hits = int((result.null[:, 0] >= result.change[0] - 1e-9).sum())
    assert 30 <= hits <= 70 and float(result.p_value[0]) == pytest.approx((1 + hits) / 201)
    assert result.null_heads.shape == (200, 1, 2) and (result.null_heads[:, 0, 0] == 1).all()
    # drawn sequentially (groups of 10, stop at 2 hits: 2 / 200 = 0.01), the same draws stop once both slices tie
    # twice: the p-value 2 / n_2 can no longer reach 0.01, and the decision is the fixed count's
    sequential = probes.head_ablation(model, [INDUCTION_HEAD], batches, slices=SLICES, method="zero", n_draws=200)
    n = sequential.null.shape[0]
    assert n % 10 == 0 and n < 200 and "stopped after" in sequential.null_stop
    torch.testing.assert_close(sequential.null, result.null[:n], rtol=0, atol=0)
    for s in range(2):
        second = int(((result.null[:, s] >= result.change[s] - 1e-9).cumsum(0) == 2).nonzero()[0]) + 1
        assert float(sequential.p_value[s]) == pytest.approx(2 / second) and 2 / second >= 0.01


def test_slices_on_a_hand_made_row():
    batch = TokenBatch(torch.tensor([[0, 5, 6, 5, 6, 7]]), torch.tensor([[False] + [True] * 5]))
    assert probes.earlier_occurrence_mask(batch).tolist() == [[False, False, False, True, True, False]]
    assert probes.first_occurrence_mask(batch).tolist() == [[False, True, True, False, False, False]]
    repeated = TokenBatch(torch.tensor([[0, 5, 6, 7, 5, 6, 7]]), torch.tensor([[False] + [True] * 6]))
    assert repeated_half(3)(repeated).tolist() == probes.earlier_occurrence_mask(repeated).tolist()


def test_result_saves_and_loads(model, batches, tmp_path):
    result = probes.head_ablation(model, [INDUCTION_HEAD], batches, slices=SLICES, method="mean", n_draws=10)
    loaded = probes.ProbeResult.load(result.save(tmp_path / "ablation"))
    assert loaded.heads == [INDUCTION_HEAD] and torch.equal(loaded.null, result.null)
    assert list(result.to_dataframe()["slice"]) == ["repeated_half", "first"]


@pytest.mark.parametrize("heads, method, error, words", [
    ([(2, 0)], "mean", InputError, "layers 0..1"),
    ([(0, 4)], "mean", InputError, "heads 0..3"),
    ([], "mean", InputError, "empty"),
    ([(0, 0), (0, 0)], "mean", InputError, "repeat"),
    ([(0, 0)], "knockout", ConfigError, "zero, mean, resample"),
])
def test_bad_input_says_how_to_fix_it(model, batches, heads, method, error, words):
    with pytest.raises(error, match=words):
        probes.head_ablation(model, heads, batches, slices=SLICES, method=method)


def test_a_model_without_hook_z_and_one_row_resample_are_typed_errors(batches):
    with pytest.raises(ModelError, match=r"blocks\.1\.attn\.hook_z"):
        probes.head_ablation(PlantedInductionModel(with_z=False), [(1, 0)], batches, slices=SLICES, method="zero")
    one_row = [TokenBatch(b.tokens[:1], b.valid[:1]) for b in batches]
    with pytest.raises(InputError, match="at least 2 sequences"):
        probes.head_ablation(PlantedInductionModel(), [(1, 0)], one_row, slices=SLICES, method="resample")
    with pytest.raises(InputError, match="list of batches"):
        probes.head_ablation(PlantedInductionModel(), [(1, 0)], iter(batches), slices=SLICES, method="mean")


def test_a_null_that_can_only_draw_the_chosen_heads_is_refused_and_a_small_one_is_flagged(caplog):
    every_head_of_layer_1 = tuple((1, h) for h in range(4))
    with pytest.raises(probes.InputError, match=r"every head of layer\(s\) 1.*p = 1 by construction"):
        probes.layer_matched_head_sets(every_head_of_layer_1, 4, 10, seed=0)
    assert probes.layer_matched_head_sets(every_head_of_layer_1, 4, 0, seed=0).shape == (0, 1, 4)  # no null asked
    with caplog.at_level("WARNING", logger="probes.causal.head_sets"):
        probes.layer_matched_head_sets(((1, 0), (1, 1), (1, 2)), 4, 10, seed=0)  # C(4, 3) = 4 sets
        assert "Only 4 head sets" in caplog.text
        caplog.clear()
        probes.layer_matched_head_sets(((0, 0), (0, 1), (1, 0), (1, 1)), 8, 10, seed=0)  # C(8, 2)^2 = 784 sets
        assert caplog.text == ""
