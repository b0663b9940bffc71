"""The causal findings of pretrained models: the slice contrast and its null from hand-made sums, the topic slices
on a hand-made row, the fixed-sequence family, the stored record, and when a model is not ablated."""

from __future__ import annotations

import math

import pytest
import torch

from analyses.pretrained.causal import (
    CausalConfig,
    CausalMeasurement,
    causal_family,
    causal_unavailable,
    measure_ablation,
    single_rows,
    topic_rows_for_power,
)
from analyses.pretrained.findings import CAUSAL_FINDINGS
from mechprobe import records
from probes.causal import head_ablation, repeated_half
from probes.causal.ablation import AblationSums
from probes.causal.null import measured_interval, per_set, signed_contrast
from probes.causal.topic_slices import topic_seen_slice, topic_unseen_slice
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.stats.nulls import fixed_sequence_adjust
from tests.probes.causal.planted_models import PlantedInductionModel, repeated_batches


def _sums() -> AblationSums:
    # 4 sequences x 3 head sets (measured + 2 draws) x 2 slices; clean loss 1 nat on every token
    count = torch.tensor([[10.0, 5.0]] * 4, dtype=torch.float64)
    clean = count.clone()
    ablated = torch.stack([torch.stack([count * 3, count * 1.5, count * 1.0], 1)[i] for i in range(4)])
    return AblationSums(("seen", "unseen"), torch.ones(4, dtype=torch.float64), count, clean, ablated)


def test_contrast_of_hand_made_sums():
    sums = _sums()  # measured: +2 nats on both slices; draw 1: +0.5 on both; draw 2: 0
    first = signed_contrast((1.0, 0.0))
    low, high = measured_interval(sums, first, n_boot=50, seed=0)
    assert per_set(sums, first).tolist() == pytest.approx([2.0, 0.5, 0.0])
    assert float(low) == pytest.approx(2.0) and float(high) == pytest.approx(2.0)
    assert per_set(sums, signed_contrast((1.0, -1.0))).tolist() == pytest.approx([0.0, 0.0, 0.0])
    with pytest.raises(InputError, match="one sign per slice"):
        per_set(sums, signed_contrast((1.0,)))


def test_topic_slices_on_a_hand_made_row():
    labels = torch.tensor([-1, 0, 1, 0, -1])  # token 1 and 3: topic 0; token 2: topic 1; 0 and 4 unlabelled
    tokens = torch.tensor([[0, 1, 2, 3, 4, 2]])
    valid = torch.tensor([[False, True, True, True, True, True]])
    batch = TokenBatch(tokens, valid)
    seen = topic_seen_slice(labels)(batch)
    unseen = topic_unseen_slice(labels)(batch)
    # query 1 predicts 2 (topic 1, not yet shown): unseen; query 2 predicts 3 (topic 0, shown by 1): seen;
    # query 3 predicts 4 (no topic): neither; query 4 predicts 2 (topic 1, shown by 2): seen; the BOS query and
    # the last position count for nothing
    assert seen.tolist() == [[False, False, True, False, True, False]]
    assert unseen.tolist() == [[False, True, False, False, False, False]]


def test_topic_slices_refuse_bad_labels():
    batch = TokenBatch(torch.tensor([[0, 1, 7]]), torch.ones(1, 3, dtype=torch.bool))
    with pytest.raises(InputError, match="integer vector"):
        topic_seen_slice(torch.zeros(5, 2, dtype=torch.long))(batch)
    with pytest.raises(InputError, match="no topic label"):
        topic_unseen_slice(torch.zeros(5, dtype=torch.long))(batch)


def test_fixed_sequence_adjustment():
    assert fixed_sequence_adjust([0.005, 0.02, 0.001]) == [0.005, 0.02, 0.02]
    assert fixed_sequence_adjust([0.001, 0.002]) == [0.001, 0.002]
    adjusted = fixed_sequence_adjust([0.001, float("nan"), 0.001])
    assert adjusted[0] == 0.001 and math.isnan(adjusted[1]) and math.isnan(adjusted[2])


def _measurement(name: str, value: float, p: float) -> CausalMeasurement:
    return CausalMeasurement(name, ((1, 0),), "test", (0.9,), ("repeated_half",), (1.0,), value,
                             (value - 0.2, value + 0.2), (0.0, 0.1, float("nan")), 0.1, p, (1.5,), (40,), 8, "mean",
                             "hand-made")


def test_the_family_is_tested_in_order_and_beside_the_control():
    measured = {"induction_heads_causal": _measurement("induction_heads_causal", 0.5, 0.3),
                "previous_token_causal": _measurement("previous_token_causal", 2.0, 0.005)}
    control = {name: _measurement(name, 0.0, 0.5) for name in measured}
    findings, control_findings = causal_family(measured, control)
    # the first hypothesis fails, so the second cannot pass however small its own p
    assert not findings["induction_heads_causal"].holds and not findings["previous_token_causal"].holds
    assert findings["previous_token_causal"].reported_p == 0.3
    assert findings["previous_token_causal"].control_value == 0.0
    assert not any(f.holds for f in control_findings.values())
    ordered = {"induction_heads_causal": _measurement("induction_heads_causal", 2.0, 0.005), **{
        "previous_token_causal": measured["previous_token_causal"]}}
    assert all(f.holds for f in causal_family(ordered, control)[0].values())


def test_a_measurement_survives_its_document():
    m = _measurement("topic_heads_causal", 0.3, 0.01)
    back = records.load(CausalMeasurement, records.strict_json(records.to_json(m)))
    assert back.heads == m.heads and back.value == m.value and back.ci == m.ci
    assert back.null[:2] == m.null[:2] and math.isnan(back.null[2])


def test_the_report_measures_an_ablation_as_head_ablation_does():
    """One sequence (plan, means, null, interval: :func:`probes.causal.measured.measured_ablation`) under both: with
    one slice signed +1 the report's measurement is ``head_ablation``'s change, interval, null and p-value."""
    model, batches = PlantedInductionModel(), repeated_batches()
    slices = {"repeated_half": repeated_half(8)}
    result = head_ablation(model, [(1, 0)], batches, slices=slices, n_draws=100, seed=3, n_boot=200)
    measured = measure_ablation(model, "induction_heads_causal", [(1, 0)], batches, slices, (1.0,), CausalConfig(),
                                chosen_by="planted", selection_scores=(1.0,), n_boot=200, seed=3, data="planted")
    assert (measured.value, measured.ci) == (float(result.change[0]), (float(result.low[0]), float(result.high[0])))
    assert list(measured.null) == result.null[:, 0].tolist() and measured.null_stop == result.null_stop
    assert (measured.null_q99, measured.p_value) == (float(result.null_q99[0]), float(result.p_value[0]))
    assert measured.units == len(batches) and measured.n_tokens == (int(result.n_tokens[0]),)


def test_why_a_model_is_not_ablated():
    planted = PlantedInductionModel()
    info = ModelInfo.of(planted)
    assert causal_unavailable(planted, info, CausalConfig()) == ""
    assert "enabled" in causal_unavailable(planted, info, CausalConfig(enabled=False))
    no_z = PlantedInductionModel(with_z=False)
    assert "hook_z" in causal_unavailable(no_z, ModelInfo.of(no_z), CausalConfig())


def test_single_rows_and_bad_settings():
    batch = TokenBatch(torch.arange(12).reshape(3, 4), torch.ones(3, 4, dtype=torch.bool))
    rows = single_rows([batch, batch], 4, 3)
    assert len(rows) == 4 and rows[3].tokens.tolist() == [[0, 1, 2]]
    # the richest rows by a slice, in their order: row 1 (tokens 4..6) and the repeat of row 1 mark 2 positions
    fours = lambda b: (b.tokens >= 4) & (b.tokens <= 5)  # noqa: E731
    assert [r.tokens[0, 0].item() for r in single_rows([batch, batch], 2, 3, richest=fours)] == [4, 4]
    with pytest.raises(ConfigError, match="draws"):
        CausalConfig(draws=20)
    with pytest.raises(ConfigError, match="method"):
        CausalConfig(method="noise")
    assert set(CAUSAL_FINDINGS) == {"induction_heads_causal", "previous_token_causal", "topic_heads_causal"}


@pytest.fixture(scope="module")
def neox(tmp_path_factory):
    from probes import load_model
    from tests.random_checkpoints import make_random_checkpoint

    return load_model(make_random_checkpoint("gpt_neox", tmp_path_factory.mktemp("neox"), seed=0))


def _topic_rows(model, n_rows: int = 12):
    generator = torch.Generator().manual_seed(0)
    vocab = ModelInfo.of(model).d_vocab
    labels = torch.full((vocab,), -1)
    labels[:40] = torch.arange(40) % 4  # four topics over the first 40 ids
    tokens = torch.randint(0, 60, (n_rows, 16), generator=generator)
    batches = [TokenBatch(tokens[i : i + 4], torch.ones(4, 16, dtype=torch.bool)) for i in range(0, n_rows, 4)]
    slices = {"topic_seen": topic_seen_slice(labels), "topic_unseen": topic_unseen_slice(labels)}
    return single_rows(batches, n_rows, 16, richest=topic_seen_slice(labels)), slices


def test_the_topic_ablation_takes_the_rows_its_power_needs(neox):
    ranked, slices = _topic_rows(neox)
    config = CausalConfig(text_rows=3, text_rows_max=10)
    kwargs = dict(n_boot=200, seed=0)
    # a threshold far beyond the pilot's spread: the pilot's rows already have the power
    easy = topic_rows_for_power(neox, [(0, 0), (1, 1)], ranked, slices, (1.0, -1.0), config, min_effect=100.0,
                                **kwargs)
    assert (easy.pilot, easy.chosen) == (3, 3) and easy.needed is not None and easy.needed <= 3
    assert "underpowered" not in easy.describe()
    # a threshold far inside it: more rows than allowed would be needed, so they buy nothing and the pilot's stay;
    # the data line says the design is underpowered
    hard = topic_rows_for_power(neox, [(0, 0), (1, 1)], ranked, slices, (1.0, -1.0), config, min_effect=1e-6,
                                **kwargs)
    assert hard.needed is not None and hard.needed > 10 and (hard.chosen, hard.cap) == (3, 10)
    assert f"asked for {hard.needed}" in hard.describe() and "underpowered" in hard.describe()
    # between the two: exactly the rows the pilot's interval asks for (units grow as one over the distance squared)
    middle = topic_rows_for_power(neox, [(0, 0), (1, 1)], ranked, slices, (1.0, -1.0), config,
                                  min_effect=1e-6 * math.sqrt(hard.needed / 6.5), **kwargs)
    assert middle.needed == 7 and middle.chosen == 7, middle
    # the cap is also the rows there are
    short = topic_rows_for_power(neox, [(0, 0), (1, 1)], ranked[:5], slices, (1.0, -1.0), config,
                                 min_effect=1e-6 * math.sqrt(hard.needed / 6.5), **kwargs)
    assert short.needed == 7 and (short.cap, short.chosen) == (5, 3)
    with pytest.raises(ConfigError, match="text_rows_max"):
        CausalConfig(text_rows=6, text_rows_max=4)
