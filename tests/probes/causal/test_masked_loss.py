"""The masked-token loss of encoders: the masked slice on hand-made rows, closed-form losses of a planted encoder
(the twin head predicts a masked token from the other copy, the self head sees only the mask), a random RoBERTa
near the uniform loss on both routes, and typed errors."""

from __future__ import annotations

import math

import pytest
import torch

import probes
from probes.causal import AblationPlan, ablation_sums, head_output_means, masked_positions, repeated_half
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_info import ModelInfo
from tests.probes.causal.planted_models import SCALE, SELF_HEAD, TWIN_HEAD, PlantedMaskedEncoder, repeated_batches
from tests.probes.tl_support import needs_bridge_adapter
from tests.random_checkpoints import make_random_checkpoint

SEQ_LEN = 8
V = 24

pytestmark = pytest.mark.usefixtures("one_thread")


def test_masked_positions_are_a_fixed_share_of_the_valid_positions():
    tokens = torch.arange(1, 43).reshape(2, 21)
    valid = torch.ones(2, 21, dtype=torch.bool)
    valid[1, 10:] = False  # a shorter row: 10 valid positions
    batch = TokenBatch(tokens, valid)
    mask = masked_positions(0.15, seed=0)(batch)
    assert mask.sum(-1).tolist() == [3, 2]  # round(0.15 * 21) = 3, round(0.15 * 10) = 2
    assert not bool((mask & ~valid).any())
    assert torch.equal(mask, masked_positions(0.15, seed=0)(batch))
    assert not torch.equal(mask, masked_positions(0.15, seed=1)(batch))
    two = TokenBatch(torch.tensor([[0, 5, 6]]), torch.tensor([[False, True, True]]))
    assert masked_positions(0.15)(two).tolist() == [[False, True, False]] or \
        masked_positions(0.15)(two).tolist() == [[False, False, True]]  # at least one per row
    with pytest.raises(InputError, match=r"\(0, 1\]"):
        masked_positions(1.5)


def _second_copy(fraction: float, seed: int):
    """Masked positions of the second copy only, so every masked token's twin in the first copy is unmasked."""
    def mask(batch: TokenBatch) -> torch.Tensor:
        out = masked_positions(fraction, seed=seed)(batch)
        out[:, : SEQ_LEN + 1] = False
        return out
    return mask


@pytest.fixture(scope="module")
def batches():
    return repeated_batches(seq_len=SEQ_LEN, d_vocab=V, n_tokens=V - 2)  # X from 1..22: never BOS 0 or MASK 23


def test_the_planted_encoders_masked_token_loss_has_its_closed_form(batches):
    model = PlantedMaskedEncoder(d_vocab=V)
    slices = {"masked": _second_copy(0.5, seed=3)}
    twin = probes.head_ablation(model, [TWIN_HEAD], batches, slices=slices, method="zero", n_draws=20, stop_at=None)
    no_self = probes.head_ablation(model, [SELF_HEAD], batches, slices=slices, method="zero")
    assert twin.provenance.settings["loss"] == "masked" and int(twin.n_tokens[0]) > 20
    # the twin head copies the original token from the first copy; the self head sees the mask token
    clean = math.log(2 + (V - 2) * math.exp(-SCALE))
    assert float(twin.clean_loss[0]) == pytest.approx(clean, rel=1e-5)
    assert float(twin.clean_loss[0] + twin.change[0]) == pytest.approx(math.log(math.exp(SCALE) + V - 1), rel=1e-5)
    assert float(no_self.clean_loss[0] + no_self.change[0]) == pytest.approx(math.log(1 + (V - 1) * math.exp(-SCALE)),
                                                                             rel=1e-4)
    # the null draws one of the two heads of layer 1: half the draws are the twin head, half the self head
    assert sorted({round(float(v), 4) for v in twin.null[:, 0]}) == sorted(
        {round(float(twin.change[0]), 4), round(float(no_self.change[0]), 4)})


def test_unmasked_next_token_loss_is_still_available_on_an_encoder(batches):
    model = PlantedMaskedEncoder(d_vocab=V)
    plan = AblationPlan.build(ModelInfo.of(model), [SELF_HEAD], method="zero", loss="next")
    sums = ablation_sums(model, plan, batches, {"repeated_half": repeated_half(SEQ_LEN)})
    # unmasked, the self and twin heads both predict the current token, not the next: the loss is far above log V
    assert float(sums.clean.sum() / sums.count.sum()) > 2 * SCALE - 1


@pytest.fixture(scope="module")
def roberta(tmp_path_factory):
    return probes.load_model(make_random_checkpoint("roberta", tmp_path_factory.mktemp("roberta") / "roberta", seed=0))


@needs_bridge_adapter("RobertaForMaskedLM")
def test_a_random_roberta_predicts_masked_tokens_at_the_uniform_loss_on_both_routes(roberta):
    info = ModelInfo.of(roberta)
    assert info.causal is False and roberta.tokenizer.mask_token_id == 49152
    g = torch.Generator().manual_seed(0)
    batches = [probes.repeated_random_tokens(info, seq_len=10, n_sequences=4, generator=g) for _ in range(2)]
    slices = {"masked": masked_positions(0.15, seed=0)}
    plan = AblationPlan.build(info, [(1, 0), (1, 2)], method="resample", n_draws=4, seed=0)
    assert plan.loss == "masked"
    fast = ablation_sums(roberta, plan, batches, slices)
    whole = ablation_sums(roberta, plan, batches, slices, shortcuts=False)
    torch.testing.assert_close(fast.ablated, whole.ablated, rtol=1e-5, atol=1e-6)
    # random weights: about uniform over the 49153 tokens, and ablating heads changes little
    assert float(fast.clean.sum() / fast.count.sum()) == pytest.approx(math.log(49153), abs=0.3)
    assert float(fast.loss_change().abs().max()) < 0.05


def test_bad_masked_input_is_a_typed_error(batches):
    no_mask = PlantedMaskedEncoder(d_vocab=V, with_mask_token=False)
    with pytest.raises(ModelError, match="mask_token_id"):
        probes.head_ablation(no_mask, [TWIN_HEAD], batches, slices={"m": masked_positions()}, method="zero")
    with pytest.raises(ConfigError, match="'next'"):
        AblationPlan.build(ModelInfo.of(no_mask), [TWIN_HEAD], method="zero", loss="mlm")
    model = PlantedMaskedEncoder(d_vocab=V)
    with pytest.raises(InputError, match="maskable_positions"):
        probes.head_ablation(model, [TWIN_HEAD], batches, slices={"bos": lambda b: b.tokens == 0}, method="zero")


def test_an_encoder_no_better_than_uniform_on_masked_tokens_is_named_in_a_warning(batches, caplog):
    model = PlantedMaskedEncoder(d_vocab=V)
    with torch.no_grad():
        model.weight.zero_()  # logits 0 everywhere: the masked-token loss is exactly log V
    result = probes.head_ablation(model, [TWIN_HEAD], batches, slices={"masked": _second_copy(0.5, seed=3)},
                                  method="zero")
    assert float(result.clean_loss[0]) == pytest.approx(math.log(V))
    assert "no better than uniform" in caplog.text


def test_mean_ablation_of_an_encoder_reads_the_means_on_the_masked_batches(batches):
    model = PlantedMaskedEncoder(d_vocab=V)
    slices = {"masked": _second_copy(0.5, seed=3)}
    result = probes.head_ablation(model, [SELF_HEAD], batches, slices=slices, method="mean")
    plan = AblationPlan.build(ModelInfo.of(model), [SELF_HEAD], method="mean")

    def change(means_on):
        sums = ablation_sums(model, plan, batches, slices, means=head_output_means(model, (1,), means_on))
        return float(sums.loss_change()[0, 0])

    masked = [TokenBatch(b.tokens.masked_fill(slices["masked"](b), V - 1), b.valid) for b in batches]
    assert float(result.change[0]) == pytest.approx(change(masked), rel=1e-9)
    assert abs(change(masked) - change(batches)) > 0.01  # the self head outputs the mask token where it is masked
