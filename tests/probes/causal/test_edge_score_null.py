"""An edge's null measured on the receiver's score alone (``null_loss=False``): the null's edges skip the pass from
the receiver's layer to the loss. Their score drops equal those of the null measured with both effects (the same
draws, bit for bit), the measured edge keeps its loss change and interval, the loss change's null is NaN and its
finding refused, the draws stop on the score's decision alone, and the null costs a fraction of the FLOPs."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from probes import load_model, repeated_random_tokens
from probes.causal import EdgePlan, edge_effect, edge_with_null, head_output_means, repeated_half
from probes.causal.edges import EFFECTS
from probes.core.errors import ConfigError
from probes.core.model_info import ModelInfo
from probes.stats.nulls import permutation_p_value
from probes.stats.sequential import SequentialRule, sequential_null
from tests.probes.causal.planted_circuit import (
    INDUCTION_HEAD,
    PREVIOUS_HEAD,
    SEQ_LEN,
    circuit_batches,
    planted_circuit_bridge,
)
from tests.random_checkpoints import smollm2_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

SLICE = repeated_half(SEQ_LEN)
LOSS, SCORE = EFFECTS.index("loss_change"), EFFECTS.index("score_drop")


@pytest.fixture(scope="module")
def model():
    return planted_circuit_bridge()


@pytest.fixture(scope="module")
def batches():
    return circuit_batches()


@pytest.mark.parametrize("stop_at", [0.01, None], ids=["sequential", "fixed count"])
def test_the_score_only_null_is_the_same_draws_without_their_loss(model, batches, stop_at):
    info = ModelInfo.of(model)
    both_plan, score_plan = (EdgePlan.build(info, PREVIOUS_HEAD, INDUCTION_HEAD, input="k", method="resample",
                                            n_draws=12, seed=1, null_loss=null_loss) for null_loss in (True, False))
    both_sums, both = edge_with_null(model, both_plan, batches, SLICE, group=3, stop_at=stop_at)
    score_sums, score = edge_with_null(model, score_plan, batches, SLICE, group=3, stop_at=stop_at)
    assert both is not None and score is not None and score.n_drawn == both.n_drawn == 12  # beats every draw
    assert torch.equal(score.draws[:, SCORE], both.draws[:, SCORE])  # the same edges, the same passes
    assert torch.equal(score_sums.effects()[0], both_sums.effects()[0])  # the measured edge: both effects
    assert bool(score.draws[:, LOSS].isnan().all()) and bool(both.draws[:, LOSS].isfinite().all())
    assert math.isnan(float(score.p_value[LOSS])) and float(score.p_value[SCORE]) == float(both.p_value[SCORE])


def test_the_measured_edge_keeps_its_loss_change_and_the_loss_null_is_refused(model, batches):
    def measured(null_loss: bool):
        return edge_effect(model, PREVIOUS_HEAD, INDUCTION_HEAD, batches, slice_fn=SLICE, input="k", method="mean",
                           n_draws=100, n_boot=200, null_loss=null_loss, data="planted circuit")

    both, score = measured(True), measured(False)
    assert torch.equal(score.value, both.value) and torch.equal(score.low, both.low)
    assert torch.equal(score.high, both.high) and float(score.value[LOSS]) > 2.0  # the planted edge's loss change
    assert math.isnan(float(score.null_q99[LOSS])) and math.isnan(float(score.p_value[LOSS]))
    assert torch.equal(score.null[:, SCORE], both.null[:, SCORE]) and score.null_stop == both.null_stop
    assert score.provenance.settings["null_loss"] is False and both.provenance.settings["null_loss"] is True
    assert score.finding("score_drop", both) == both.finding("score_drop", both)
    assert score.finding("score_drop").verdict == "holds"
    with pytest.raises(ConfigError, match="null_loss=True"):
        score.finding("loss_change", both)
    frame = score.to_dataframe().set_index("effect")
    assert math.isnan(frame.loc["loss_change", "null_q99"]) and frame.loc["score_drop", "n_draws"] == 100


def test_the_draws_stop_on_the_score_alone(model, batches):
    """A non-edge: its score drop is reached by random edges within the first group, so the score-only null stops
    there; the loss change, with nothing to decide, is not waited for."""
    plan = EdgePlan.build(ModelInfo.of(model), (0, 1), INDUCTION_HEAD, input="k", method="mean", n_draws=100,
                          seed=0, null_loss=False)
    means = head_output_means(model, plan.sender_layers, batches)
    _, null = edge_with_null(model, plan, batches, SLICE, means=means)
    assert null is not None and null.n_drawn < 100 and bool(null.stopped[SCORE]) and not bool(null.stopped[LOSS])
    assert null.why().startswith(f"stopped after {null.n_drawn} of 100 draws")


def test_nan_draws_count_neither_way():
    """An entry none of whose draws is a number gets a NaN p-value, not 1 (the fixed count) nor a pass."""
    draws = torch.stack([torch.full((20,), float("nan")), torch.zeros(20)], 1).double()
    assert torch.isnan(permutation_p_value(torch.tensor([1.0, 1.0]), draws)[0])
    result = sequential_null(torch.tensor([float("nan"), 1.0]), lambda a, b: draws[a:b], SequentialRule(20, 0.05))
    assert torch.isnan(result.p_value[0]) and float(result.p_value[1]) == pytest.approx(1 / 21)


def test_the_score_only_null_costs_a_fraction_of_the_flops(tmp_path):
    """On a random 12-layer Llama (SmolLM2's architecture, blocks below a pass's first layer skipped) the
    both-effects null runs every draw's receiver layer to the loss (about 6 blocks on average at distance 1); the
    score-only one runs the sender's and the receiver's attention only."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=12, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    config.architectures = ["LlamaForCausalLM"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(tmp_path)
    smollm2_tokenizer().save_pretrained(tmp_path)
    model = load_model(str(tmp_path))
    info = ModelInfo.of(model)
    generator = torch.Generator().manual_seed(0)
    few = [repeated_random_tokens(info, seq_len=SEQ_LEN, n_sequences=4, generator=generator) for _ in range(2)]

    def flops(null_loss: bool) -> int:
        plan = EdgePlan.build(info, (3, 1), (4, 2), input="k", method="zero", n_draws=30, seed=0,
                              null_loss=null_loss)
        counter = FlopCounterMode(display=False)
        with counter:
            edge_with_null(model, plan, few, SLICE, stop_at=None)
        return counter.get_total_flops()

    both, score = flops(True), flops(False)
    assert score < 0.5 * both, (score, both)
