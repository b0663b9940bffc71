"""The shortcuts of the ablation's forward passes: the blocks below the ablated layers shared with the clean pass and
the unembedding applied at the slice positions only give the whole forward's numbers, the skipped blocks do not run,
the logits come in bounded chunks, and a model where a shortcut does not reproduce the forward falls back with a
warning."""

from __future__ import annotations

import logging

import pytest
import torch

import probes
from probes.causal import (
    AblationPlan,
    ablation_sums,
    first_occurrence_mask,
    head_output_means,
    predicted_positions,
    repeated_half,
    token_loss,
)
from probes.causal.ablation import ablation_clean_passes, ablation_route
from probes.causal.routes import PLAIN, ForwardRoute, choose_route
from probes.causal.token_loss import LossInputs
from probes.core.batch import TokenBatch
from probes.core.model_info import ModelInfo
from tests.probes.causal.planted_models import PlantedInductionModel, repeated_batches
from tests.random_checkpoints import make_random_checkpoint

SEQ_LEN = 8
SLICES = {"repeated_half": repeated_half(SEQ_LEN), "first": first_occurrence_mask}
HEADS = [(1, 0), (1, 2)]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def batches():
    return repeated_batches(seq_len=SEQ_LEN)


def _route(model, batch, heads=HEADS):
    plan = AblationPlan.build(ModelInfo.of(model), heads, method="zero")
    masks = torch.stack([fn(batch) for fn in SLICES.values()])
    return choose_route(model, batch, LossInputs.of(model, batch, masks, plan.loss), {}, min(plan.layers))


def _both_ways(model, batches, method, heads=HEADS, slices=SLICES, **kwargs):
    plan = AblationPlan.build(ModelInfo.of(model), heads, method=method, n_draws=5, seed=2)
    means = head_output_means(model, plan.layers, batches) if method == "mean" else None
    fast = ablation_sums(model, plan, batches, slices, means=means, **kwargs)
    whole = ablation_sums(model, plan, batches, slices, means=means, shortcuts=False, **kwargs)
    return fast, whole


@pytest.mark.parametrize("method", ["zero", "mean", "resample"])
def test_shortcuts_give_the_whole_forwards_sums_and_skip_the_lower_block(batches, method):
    model = PlantedInductionModel()
    assert _route(model, batches[0]) == ForwardRoute(unembed=True, start_layer=1, cut_tail=True)
    plan = AblationPlan.build(ModelInfo.of(model), HEADS, method=method, n_draws=5, seed=2)
    means = head_output_means(model, plan.layers, batches) if method == "mean" else None
    model.calls[:] = [0, 0]
    fast = ablation_sums(model, plan, batches, SLICES, means=means, max_rows=8)
    # the unembedding and cut-rows checks ran in _route above on the same rows and weights, so the check runs the
    # whole forward (both blocks) and the skipped-blocks check (block 1); then per batch the clean pass runs both,
    # and each of the 3 grouped passes (6 sets, 2 per pass) block 1 only (the slices reach the last predicted
    # position: nothing is cut)
    assert model.calls == [1 + 4, 2 + 4 * (1 + 3)]
    whole = ablation_sums(model, plan, batches, SLICES, means=means, max_rows=8, shortcuts=False)
    torch.testing.assert_close(fast.clean, whole.clean, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-6, atol=1e-9)


def test_the_unembedding_sees_bounded_chunks_of_slice_positions(batches, monkeypatch):
    model = PlantedInductionModel()
    sizes = []
    model.unembed.register_forward_hook(lambda module, args, out: sizes.append(args[0].shape[:-1].numel()))
    monkeypatch.setattr(token_loss, "LOGIT_CHUNK_BYTES", 4 * model.cfg.d_vocab * 5)  # 5 positions per chunk
    fast, whole = _both_ways(model, batches, "zero", max_rows=4)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-6, atol=1e-9)
    # completed calls of the unembedding: the whole forward's 4 rows x 17 positions in the check's reference and on the
    # whole route (per batch: clean + 6 sets, one per pass), 4 rows x 9 positions in the check of cut rows, else
    # chunks of at most 5 positions
    whole_calls = [n for n in sizes if n > 5]
    assert sorted(set(whole_calls)) == [4 * (SEQ_LEN + 1), 4 * (2 * SEQ_LEN + 1)]
    assert len(whole_calls) == 1 + 1 + 4 * (1 + 6)
    assert len(sizes) > len(whole_calls)


@pytest.mark.parametrize("model, warning, route", [
    (PlantedInductionModel(head="softcap"), "changes the clean per-token loss", ForwardRoute(start_layer=1,
                                                                                           cut_tail=True)),
    (PlantedInductionModel(head="inline"), "no model.unembed", ForwardRoute(start_layer=1, cut_tail=True)),
    (PlantedInductionModel(resid_hook=False), "no blocks.1.hook_resid_pre", ForwardRoute(unembed=True, cut_tail=True)),
])
def test_a_shortcut_that_does_not_reproduce_the_forward_falls_back_with_a_warning(batches, caplog, model, warning,
                                                                                  route):
    # a shortcut that runs and differs is a warning; a model without the module or hook is told at INFO (it is
    # only slower, and a toy without an unembed module would repeat it on every ablation of a report)
    level = logging.WARNING if "changes" in warning else logging.INFO
    with caplog.at_level(logging.INFO, logger="probes.causal.routes"):
        assert _route(model, batches[0]) == route
    assert [r for r in caplog.records if warning in r.getMessage() and r.levelno == level]
    fast, whole = _both_ways(model, batches, "mean")
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-6, atol=1e-9)


def test_heads_in_layer_0_share_nothing_and_need_no_warning(batches, caplog):
    with caplog.at_level(logging.WARNING, logger="probes.causal.routes"):
        assert _route(PlantedInductionModel(), batches[0], heads=[(0, 1), (1, 0)]) == ForwardRoute(unembed=True,
                                                                                                  cut_tail=True)
    assert caplog.text == ""


def _early(batch: TokenBatch) -> torch.Tensor:
    """Positions 2..5: a slice that ends long before the rows do."""
    mask = torch.zeros(batch.shape, dtype=torch.bool)
    mask[:, 2:6] = True
    return mask


def test_rows_are_cut_after_the_last_measured_positions_target_and_give_the_whole_rows_sums(batches):
    """A slice ending at position 5 of 17: the clean pass and every ablated copy run positions 0..6 only (the loss at
    5 predicts token 6); the sums equal the whole rows' for each method."""
    model = PlantedInductionModel()
    lengths = []
    model.blocks[1].register_forward_pre_hook(lambda module, args: lengths.append(args[0].shape[1]))
    for method in ("zero", "mean", "resample"):
        lengths.clear()
        fast, whole = _both_ways(model, batches, method, slices={"early": _early}, max_rows=8)
        torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-6, atol=1e-9)
        torch.testing.assert_close(fast.clean, whole.clean, rtol=1e-6, atol=1e-9)
        assert fast.count.sum() == whole.count.sum() == 4 * 4 * 4  # 4 positions x 4 rows x 4 batches
        # (mean: the means' pass over the 4 whole batches) the fast measurement's check (the whole forward, the
        # unembedding, the cut rows, the skipped blocks: 17, 17, 9, 17 positions; for the later methods the model
        # remembers all but the first and last), then 4 batches x (clean + 3 grouped passes) cut to 7; the whole
        # measurement's 4 x (1 + 3) passes of 17
        means = [17] * 4 if method == "mean" else []
        check = [17, 17, 9, 17] if method == "zero" else [17, 17]
        assert lengths == means + check + [7] * 16 + [17] * 16, (method, lengths)


class ReadsLaterTokens(PlantedInductionModel):
    """Layer 1's uniform heads attend to every position, later ones included: not a causal model."""

    def patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        layer0, layer1 = super().patterns(tokens)
        n = tokens.shape[1]
        layer1 = layer1.clone()
        layer1[:, 1:] = 1.0 / n
        return [layer0, layer1]


def test_a_model_that_reads_later_tokens_keeps_its_rows_whole(batches, caplog):
    model = ReadsLaterTokens()
    with caplog.at_level(logging.WARNING, logger="probes.causal.routes"):
        route = _route(model, batches[0])
    assert route == ForwardRoute(unembed=True, start_layer=1)
    assert "cutting the rows after the last measured position changes the clean per-token loss" in caplog.text
    fast, whole = _both_ways(model, batches, "zero", slices={"early": _early}, max_rows=8)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-6, atol=1e-9)


def test_a_position_free_check_is_the_plain_route(caplog):
    model = PlantedInductionModel()
    batch = TokenBatch(torch.tensor([[0, 3]]), torch.tensor([[False, True]]))
    with caplog.at_level(logging.WARNING, logger="probes.causal.routes"):
        assert choose_route(model, batch, LossInputs.of(model, batch, torch.zeros(1, 1, 2, dtype=torch.bool), "next"),
                            {}, 1) == PLAIN
    assert "no position to check" in caplog.text


@pytest.fixture(scope="module", params=["gpt_neox", "gemma2"])
def bridge(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param) / request.param
    return probes.load_model(make_random_checkpoint(request.param, folder, seed=0))


def test_a_bridge_with_left_and_right_padding_gives_the_whole_forwards_sums(bridge, caplog):
    """Random GPT-NeoX and Gemma 2 bridges (Gemma 2 soft-caps its logits after the unembedding: with random weights
    the cap changes them by far less than the tolerance), rows padded on the right and on the left."""
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(100, 1000, (4, 12), generator=g)
    mask = torch.ones(4, 12, dtype=torch.long)
    mask[1, 9:] = 0  # right padding
    mask[2, :4] = 0  # left padding: positions come from the attention mask
    tokens[mask == 0] = bridge.tokenizer.pad_token_id
    batches = [TokenBatch(tokens, mask.bool(), mask), TokenBatch(tokens.flip(0), mask.flip(0).bool(), mask.flip(0))]
    with caplog.at_level(logging.INFO, logger="probes.causal.routes"):
        fast, whole = _both_ways(bridge, batches, "resample", heads=[(1, 0), (1, 3)],
                                 slices={"all": predicted_positions}, max_rows=8)
    assert "unembedding at the slice positions, fused attention, blocks 0..0 shared with the clean pass" in caplog.text
    torch.testing.assert_close(fast.clean, whole.clean, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-5, atol=1e-6)
    assert fast.count.tolist() == [[4 * 11 - 3 - 4]] * 2  # 4 rows of 11 queries, less 3 right- and 4 left-padded


def test_a_second_check_on_the_same_rows_runs_only_the_layer_dependent_part_until_the_weights_change(batches):
    """The unembedding, fused-attention and cut-rows checks are remembered per model, rows and weights: a second
    choice of route on the same rows runs the whole forward and the skipped-blocks check only (block 0 once, block
    1 twice), for another lowest layer too; an in-place change to a weight runs every check again."""
    model = PlantedInductionModel()
    model.calls[:] = [0, 0]
    first = _route(model, batches[0])
    assert model.calls == [3, 4]  # the whole forward, the unembedding, the cut rows; block 1 also skipped-blocks
    model.calls[:] = [0, 0]
    assert _route(model, batches[0]) == first
    assert model.calls == [1, 2]
    model.calls[:] = [0, 0]
    assert _route(model, batches[0], heads=[(0, 1), (1, 0)]) == ForwardRoute(unembed=True, cut_tail=True)
    assert model.calls == [1, 1]  # start layer 0: nothing to skip, nothing else to check
    model.calls[:] = [0, 0]
    assert _route(model, batches[1]) == first  # other rows: checked again
    assert model.calls == [3, 4]
    with torch.no_grad():
        next(model.parameters()).mul_(1.0)
    model.calls[:] = [0, 0]
    assert _route(model, batches[1]) == first
    assert model.calls == [3, 4]
    assert not torch.equal(batches[0].tokens, batches[1].tokens)


@pytest.mark.parametrize("method", ["zero", "mean", "resample"])
def test_the_groups_of_a_null_share_each_batchs_clean_pass_with_the_same_sums(batches, method):
    """The null's groups of sets read one clean pass per batch, kept from before the first group: block 0 (below
    the ablated layer) never runs in a group, and the sums equal each group's own clean passes bit for bit."""
    model = PlantedInductionModel()
    plan = AblationPlan.build(ModelInfo.of(model), HEADS, method=method, n_draws=6, seed=2)
    means = head_output_means(model, plan.layers, batches) if method == "mean" else None
    route = ablation_route(model, plan, batches[0], SLICES)
    assert route.start_layer == 1
    clean = ablation_clean_passes(model, plan, batches, SLICES, route, max_bytes=2**20)
    assert clean is not None and len(clean) == len(batches)
    groups = [(0, 3), (3, 7)]
    model.calls[:] = [0, 0]
    shared = [ablation_sums(model, plan.subset(a, b), batches, SLICES, means=means, route=route, clean=clean)
              for a, b in groups]
    assert model.calls[0] == 0
    alone = [ablation_sums(model, plan.subset(a, b), batches, SLICES, means=means, route=route) for a, b in groups]
    assert model.calls[0] == len(groups) * len(batches)
    for one, other in zip(shared, alone):
        assert torch.equal(one.clean, other.clean) and torch.equal(one.ablated, other.ablated)
    # what a batch keeps (the residual entering layer 1) beyond the budget: each group runs its own clean passes
    assert ablation_clean_passes(model, plan, batches, SLICES, route, max_bytes=0) is None
