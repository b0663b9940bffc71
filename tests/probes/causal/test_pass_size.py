"""The grouped passes of the ablation null: their size is set by a byte budget and not by the number of draws, a
smaller budget gives the same sums in smaller passes, an out-of-memory pass is retried in halves (kept for later
batches), and on a bridge the passes compute attention without patterns."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.causal import AblationPlan, ablation, ablation_sums, repeated_half
from probes.causal.means import z_hook
from probes.causal.pass_size import CPU_PASS_TOKENS, PassSize, copy_bytes
from probes.causal.routes import ForwardRoute
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, ModelError
from probes.core.model_info import ModelInfo
from tests.random_checkpoints import make_random_checkpoint

SEQ_LEN = 10
HEADS = [(1, 0), (1, 2)]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def bridge(tmp_path_factory):
    folder = tmp_path_factory.mktemp("neox") / "gpt_neox"
    return probes.load_model(make_random_checkpoint("gpt_neox", folder, seed=0))


@pytest.fixture(scope="module")
def batches(bridge):
    g = torch.Generator().manual_seed(1)
    return [probes.repeated_random_tokens(ModelInfo.of(bridge), seq_len=SEQ_LEN, n_sequences=3, generator=g)
            for _ in range(2)]


def _pass_rows(model, plan, batches, slices=None, **kwargs):
    """The sums and the rows of every forward pass through the plan's lowest ablated layer (its hook_z calls: the
    route check's and the clean passes' have the batch's rows, the grouped passes a multiple)."""
    rows: list[int] = []
    handle = model.hook_dict[z_hook(min(plan.layers))].register_forward_hook(
        lambda module, args, out: rows.append(int(out.shape[0])))
    try:
        sums = ablation_sums(model, plan, batches, slices or {"repeated_half": repeated_half(SEQ_LEN)}, **kwargs)
    finally:
        handle.remove()
    return sums, rows


def test_copy_bytes_counts_one_block_and_the_quadratic_pattern_only_when_eager():
    cfg = type("Cfg", (), {"d_model": 8, "n_heads": 2, "d_head": 4, "d_mlp": 32, "d_vocab": 100})()
    model = type("M", (), {"cfg": cfg, "parameters": lambda self: iter([torch.zeros(1)])})()
    per_token = 4 * (8 * 8 + 4 * 8 + 3 * 32)  # float32: residual and friends, q k v z, MLP hidden
    assert copy_bytes(model, ForwardRoute(unembed=True, fused=True), 3, 5) == 3 * 5 * per_token
    eager = per_token + 2 * 5 * (4 + 4)  # two heads' scores and float32 pattern over 5 keys
    assert copy_bytes(model, ForwardRoute(unembed=True), 3, 5) == 3 * 5 * eager
    assert copy_bytes(model, ForwardRoute(fused=True), 3, 5) == 3 * 5 * (per_token + 4 * 100)  # full logits


def test_the_pass_size_is_the_budgets_whatever_the_number_of_draws(bridge, batches):
    info = ModelInfo.of(bridge)
    budget = 20 * copy_bytes(bridge, ForwardRoute(unembed=True, fused=True, start_layer=1, cut_tail=True), 3,
                             2 * SEQ_LEN + 1)
    widest = []
    for n_draws in (8, 60):
        plan = AblationPlan.build(info, HEADS, method="zero", n_draws=n_draws, seed=0)
        _, rows = _pass_rows(bridge, plan, batches, pass_bytes=budget, max_rows=10_000)
        widest.append(max(rows))
    assert widest[0] == 3 * 9  # 8 draws and the heads: every set in one pass
    assert widest[1] == 3 * 20  # 61 sets: passes of the 20 copies the budget holds
    assert 3 * 20 * (2 * SEQ_LEN + 1) <= CPU_PASS_TOKENS  # the CPU's token cap is not what bounds them


def test_a_smaller_budget_gives_the_same_sums_in_smaller_passes(bridge, batches):
    plan = AblationPlan.build(ModelInfo.of(bridge), HEADS, method="resample", n_draws=12, seed=3)
    big, big_rows = _pass_rows(bridge, plan, batches)
    small, small_rows = _pass_rows(bridge, plan, batches, pass_bytes=1)
    assert max(small_rows) == 3 and max(big_rows) == 3 * 13
    torch.testing.assert_close(small.ablated, big.ablated, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(small.clean, big.clean, rtol=0, atol=0)


def test_an_out_of_memory_pass_is_retried_in_halves_and_the_half_is_kept(bridge, batches):
    plan = AblationPlan.build(ModelInfo.of(bridge), HEADS, method="zero", n_draws=12, seed=0)
    reference, _ = _pass_rows(bridge, plan, batches)
    failures = []

    def fail_when_wide(module, args, out):
        if out.shape[0] > 3 * 4:
            failures.append(int(out.shape[0]))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    handle = bridge.hook_dict[z_hook(1)].register_forward_hook(fail_when_wide)
    try:
        halved, rows = _pass_rows(bridge, plan, batches)
    finally:
        handle.remove()
    assert failures == [3 * 13, 3 * 6]  # 13 copies, then 6 fail in the first batch; 3 then fit, in both batches
    assert max(rows) == 3 * 3
    torch.testing.assert_close(halved.ablated, reference.ablated, rtol=1e-5, atol=1e-6)


def test_out_of_memory_on_one_copy_says_what_to_do(bridge, batches, monkeypatch):
    plan = AblationPlan.build(ModelInfo.of(bridge), HEADS, method="zero", n_draws=2, seed=0)
    measured = ablation.token_losses

    def ablated_passes_fail(model, route, inputs, kwargs, hooks, copies, resid=None):
        if any(name == z_hook(1) for name, _ in hooks):  # the grouped passes (the clean pass keeps no z)
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return measured(model, route, inputs, kwargs, hooks, copies, resid)

    monkeypatch.setattr(ablation, "token_losses", ablated_passes_fail)
    with pytest.raises(ModelError, match="Out of memory ablating heads on one copy of a batch of 3 x 21 tokens"):
        ablation_sums(bridge, plan, batches, {"repeated_half": repeated_half(SEQ_LEN)})


def test_a_bridge_ablates_without_attention_patterns(bridge, batches):
    plan = AblationPlan.build(ModelInfo.of(bridge), HEADS, method="zero", n_draws=4, seed=0)
    patterns = []
    handle = bridge.hook_dict["blocks.1.attn.hook_pattern"].register_forward_hook(
        lambda module, args, out: patterns.append(tuple(out.shape)))
    try:
        fast, _ = _pass_rows(bridge, plan, batches)
    finally:
        handle.remove()
    assert all(shape[0] <= 3 for shape in patterns)  # only the route check's reference and the clean passes
    whole = ablation_sums(bridge, plan, batches, {"repeated_half": repeated_half(SEQ_LEN)}, shortcuts=False)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bad", [0, -1, True, 1.5])
def test_a_bad_budget_is_refused(bad):
    with pytest.raises(ConfigError, match="pass_bytes must be an integer >= 1"):
        PassSize(pass_bytes=bad)


def test_batches_of_other_lengths_get_their_own_pass_size(bridge):
    plan = AblationPlan.build(ModelInfo.of(bridge), HEADS, method="zero", n_draws=20, seed=0)
    short = TokenBatch(torch.randint(100, 1000, (2, 6)), torch.ones(2, 6, dtype=torch.bool))
    long = TokenBatch(torch.randint(100, 1000, (2, 60)), torch.ones(2, 60, dtype=torch.bool))
    budget = 5 * copy_bytes(bridge, ForwardRoute(unembed=True, fused=True, start_layer=1), 2, 60)
    shapes: list[tuple[int, int]] = []
    handle = bridge.hook_dict[z_hook(1)].register_forward_hook(lambda module, args, out: shapes.append(out.shape[:2]))
    try:
        ablation_sums(bridge, plan, [short, long], {"all": probes.predicted_positions}, pass_bytes=budget,
                      max_rows=10_000)
    finally:
        handle.remove()
    assert max(rows for rows, pos in shapes if pos == 6) == 2 * 21  # every set in one pass
    assert max(rows for rows, pos in shapes if pos == 60) == 2 * 5  # the budget's 5 copies
