"""The same head_scores call on a boot_native bridge, a custom HookedRootModule, MiniLM and SmolLM2."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.head_detector import detect_head

import probes
from probes import HEAD_SCORE_KINDS, ModelError
from probes.core.model_kind import as_hooked_model
from tests.hooked_models import OracleModel
from tests.probes.attention.test_head_scores import reference_scores
from toymodels.standard import StandardModelConfig, build_standard_model


def _check_shapes(result: probes.HeadScores, n_layers: int, n_heads: int) -> None:
    for kind in HEAD_SCORE_KINDS:
        table = result.scores[kind]
        assert table.shape == (n_layers, n_heads)
        assert bool(((table >= 0) & (table <= 1 + 1e-6)).all())


def test_boot_native_bridge_uniform_head_scores_chance_when_queries_and_keys_are_zeroed():
    model = build_standard_model(StandardModelConfig(n_layers=2, n_heads=4, d_vocab=40, positional="rotary"))
    result = probes.head_scores(model, seq_len=8, n_batches=1, batch_size=4)
    _check_shapes(result, 2, 4)
    # Zero W_Q: every score is the uniform-attention chance level, exactly.
    for name, parameter in model.named_parameters():
        if ".q." in name:
            torch.nn.init.zeros_(parameter)
    flat = probes.head_scores(model, seq_len=8, n_batches=1, batch_size=4)
    for kind in HEAD_SCORE_KINDS:
        torch.testing.assert_close(flat.scores[kind], torch.full((2, 4), flat.chance[kind]), rtol=0, atol=1e-5)


def test_custom_hooked_root_module():
    """OracleModel's heads attend by rule: each score equals the nested-loop reference on its patterns, and the
    head built for a kind scores exactly 1 on it (head 3, uniform, exactly the chance level)."""
    model = OracleModel()
    result = probes.head_scores(model, seq_len=8, n_batches=1, batch_size=2)
    _check_shapes(result, 2, 4)
    batch = probes.repeated_random_tokens(probes.ModelInfo.of(model), seq_len=8, n_sequences=2,
                                          generator=torch.Generator().manual_seed(0))  # head_scores' batch, seed 0
    patterns = [OracleModel.patterns(batch.tokens, 4)] * 2
    for kind in HEAD_SCORE_KINDS:
        expected = reference_scores(patterns, batch.tokens, batch.valid, kind)
        torch.testing.assert_close(result.scores[kind].double(), expected, rtol=0, atol=1e-6)
    for kind, head in (("previous_token", 0), ("induction", 1), ("duplicate_token", 2)):
        torch.testing.assert_close(result.scores[kind][:, head].double(), torch.ones(2, dtype=torch.float64),
                                   rtol=0, atol=1e-6)
        torch.testing.assert_close(result.scores[kind][:, 3].double(),
                                   torch.full((2,), float(result.chance[kind]), dtype=torch.float64),
                                   rtol=0, atol=1e-6)


def test_a_module_typed_as_nn_module_becomes_a_hooked_model_only_when_it_is_one():
    """``as_hooked_model`` hands a hooked module back as it is and refuses a plain module, naming what is accepted."""
    model = OracleModel()
    assert as_hooked_model(model) is model
    with pytest.raises(ModelError, match=r"Expected a hooked model: a TransformerBridge.*got Linear"):
        as_hooked_model(torch.nn.Linear(2, 2))


def test_minilm_encoder_bidirectional(minilm):
    info = probes.ModelInfo.of(minilm)
    assert (info.n_layers, info.n_heads, info.causal) == (6, 12, False)
    result = probes.head_scores(minilm, seq_len=20, n_batches=1, batch_size=4)
    _check_shapes(result, 6, 12)
    # bidirectional: chance divides by every position, BOS([CLS]) + 2 x 20
    assert result.chance["previous_token"] == pytest.approx(1 / 41)
    # MiniLM layer 0 has a strong previous-token head (measured: L0H2 ~0.99)
    _layer, _head, score = result.top_heads("previous_token", 1)[0]
    assert score > 0.8


@pytest.mark.slow
def test_smollm2_has_induction_and_previous_token_heads(smollm2):
    result = probes.head_scores(smollm2, seq_len=50, n_batches=2, batch_size=8, seed=0)
    _check_shapes(result, 30, 9)
    top_induction = result.top_heads("induction", 3)
    assert top_induction[0][2] > 0.7, top_induction
    assert result.chance["induction"] < 0.05
    assert result.top_heads("previous_token", 1)[0][2] > 0.7


@pytest.mark.slow
@pytest.mark.parametrize("kind, tl_name", [("induction", "induction_head"),
                                           ("duplicate_token", "duplicate_token_head")])
def test_smollm2_parity_with_detect_head_end_to_end(smollm2, kind, tl_name):
    text = "The cat sat on the mat because the cat was tired. The cat sat on the mat because the cat was tired."
    tokens = smollm2.to_tokens(text)
    ours = probes.head_scores(smollm2, tokens, kinds=(kind,))
    theirs = detect_head(smollm2, text, tl_name, error_measure="mul")
    rescaled = ours.scores[kind] * ours.rows_with_target[kind] / tokens.shape[1]
    torch.testing.assert_close(rescaled, theirs.float(), rtol=0, atol=1e-4)
