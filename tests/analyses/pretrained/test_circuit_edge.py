"""The report's circuit finding (``previous_token_to_induction_k_composition``) on a planted previous-token ->
induction K-composition: the heads it picks, the planted edge holding beside its random-weight control (which holds
nothing on its own), the measurement equal to ``edge_effect``'s, its saved record, the section drawn from it, and
why a model is not measured."""

from __future__ import annotations

import types

import pytest
import torch

from analyses.pretrained.circuit_edge import (
    CircuitConfig,
    CircuitMeasurement,
    circuit_findings,
    circuit_heads,
    circuit_of,
    circuit_protocol,
    circuit_unavailable,
)
from analyses.pretrained.findings import CIRCUIT_FINDING
from analyses.report.circuit_section import circuit_section
from mechprobe import records
from probes import ModelInfo, random_weight_control
from probes.causal import edge_effect, repeated_half
from probes.core.errors import ConfigError
from tests.hooked_models import OracleModel
from tests.probes.causal.planted_circuit import INDUCTION_HEAD, PREVIOUS_HEAD, planted_circuit_bridge
from tests.probes.causal.planted_models import PlantedMaskedEncoder

pytestmark = pytest.mark.usefixtures("one_thread")

CONFIG = CircuitConfig(enabled=True, seq_len=7, sequences=8)
HEADS = (PREVIOUS_HEAD, INDUCTION_HEAD, (0.9, 0.8))


@pytest.fixture(scope="module")
def planted():
    return planted_circuit_bridge()


@pytest.fixture(scope="module")
def measured(planted):
    control_model = random_weight_control(planted, seed=0)
    own, _ = circuit_of(planted, CONFIG, HEADS, n_boot=200, seed=0)
    control, _ = circuit_of(control_model, CONFIG, own.heads(), n_boot=200, seed=0)
    return own, control


def test_the_sender_is_the_best_previous_token_head_below_the_best_induction_head():
    induction = [(3, 1, 0.9), (1, 0, 0.5)]
    assert circuit_heads([(4, 2, 0.95), (2, 0, 0.8), (1, 1, 0.7)], induction) == ((2, 0), (3, 1), (0.8, 0.9))
    assert circuit_heads([(3, 0, 0.9), (5, 0, 0.8)], induction) is None  # none below layer 3
    assert circuit_heads([(0, 0, float("nan")), (1, 1, 0.2)], induction) == ((1, 1), (3, 1), (0.2, 0.9))
    assert circuit_heads([(0, 0, 0.9)], [(3, 1, float("nan"))]) is None and circuit_heads([(0, 0, 0.9)], []) is None


def test_the_planted_edge_holds_beside_its_control_which_holds_nothing(measured):
    own, control = measured
    findings, control_findings = circuit_findings(own, control)
    finding, control_finding = findings[CIRCUIT_FINDING], control_findings[CIRCUIT_FINDING]
    assert finding.verdict == "holds", finding
    assert finding.value > 0.5 and finding.null_draws == 100 and finding.p_value < 0.01
    assert "score drop" in finding.statistic and finding.min_effect == 0.1
    assert float(own.edge.value[own.edge.effects.index("loss_change")]) > 1.0  # beside it, not judged
    assert finding.control_value == control_finding.value and finding.reported_p == finding.p_value
    assert "L0H0 -> L1H0" in finding.statistic and "keys" in finding.null_kind
    assert control_finding.control_value is None and control_finding.verdict == "absent", control_finding
    assert circuit_findings(None, None) == ({}, {})


def test_the_measurement_is_edge_effects_on_fresh_sequences(planted, measured):
    own, _ = measured
    batches = circuit_protocol(ModelInfo.of(planted), CONFIG, 0)
    assert len(batches) == 1 and batches[0].shape[0] == CONFIG.sequences
    direct = edge_effect(planted, PREVIOUS_HEAD, INDUCTION_HEAD, batches, slice_fn=repeated_half(CONFIG.seq_len),
                         input="k", n_draws=100, n_boot=200, seed=0, null_loss=False)
    expected = direct.finding("score_drop")
    got = own.finding()
    assert (got.value, got.ci, got.null_value, got.p_value) == (expected.value, expected.ci, expected.null_value,
                                                                 expected.p_value)
    assert own.edge.provenance.n_sequences == CONFIG.sequences and own.heads() == HEADS
    assert own.edge.provenance.settings["null_loss"] is False  # the null on the receiver's score alone


def test_the_record_round_trips_with_its_tensors(measured):
    own, _ = measured
    tensors: dict = {}
    back = records.load(CircuitMeasurement, records.strict_json(records.to_json(records.dump(own, tensors))), tensors)
    assert back.finding() == own.finding() and back.heads() == own.heads()
    torch.testing.assert_close(back.edge.null, own.edge.null, rtol=0, atol=0, equal_nan=True)  # the loss: NaN
    assert back.edge.null_edges.tolist() == own.edge.null_edges.tolist()


def test_the_section_draws_the_edge_beside_its_null_and_as_a_graph(planted, measured, tmp_path):
    own, control = measured
    findings, control_findings = circuit_findings(own, control)
    run = types.SimpleNamespace(
        measured=types.SimpleNamespace(circuit=own, circuit_note=""), findings=findings,
        control=types.SimpleNamespace(circuit=control, circuit_note=""), control_findings=control_findings,
        info=ModelInfo.of(planted))
    encoder = types.SimpleNamespace(measured=types.SimpleNamespace(circuit=None, circuit_note="not measured: encoder"),
                                    control=None, findings={}, control_findings={})
    (tmp_path / "figures").mkdir()
    section = circuit_section({"planted": run, "encoder": encoder}, tmp_path / "figures")
    rows = section.tables[0].rows
    assert [row[0] for row in rows] == ["planted", "planted (random weights)"]
    assert rows[0][-1] == "**holds**" and rows[1][-1] == "absent" and rows[0][1] == "L0H0 -> L1H0 (k)"
    assert "encoder: not measured: encoder." in section.paragraphs
    assert [figure.path for figure in section.figures] == ["figures/circuit_nulls.png", "figures/circuit_planted.png"]
    assert all((tmp_path / figure.path).stat().st_size > 5_000 for figure in section.figures)
    silent = types.SimpleNamespace(measured=types.SimpleNamespace(circuit=None, circuit_note=""), control=None,
                                   findings={}, control_findings={})
    assert circuit_section({"silent": silent}, tmp_path / "figures") is None


def test_why_a_model_is_not_measured(planted):
    info = ModelInfo.of(planted)
    assert circuit_unavailable(planted, info, CONFIG, HEADS) == ""
    off = CircuitConfig(enabled=False)
    assert "pretrained.circuit.enabled=true" in circuit_unavailable(planted, info, off, HEADS)
    assert "no previous-token head" in circuit_unavailable(planted, info, CONFIG, None)
    encoder = PlantedMaskedEncoder()
    assert "encoder" in circuit_unavailable(encoder, ModelInfo.of(encoder), CONFIG, HEADS)
    oracle = OracleModel()
    assert "HookPoint" in circuit_unavailable(oracle, ModelInfo.of(oracle), CONFIG, ((0, 0), (1, 0), (1.0, 1.0)))
    assert circuit_of(planted, CircuitConfig(enabled=False), HEADS, n_boot=10, seed=0)[0] is None
    assert CircuitConfig().enabled  # on by default: the null on the receiver's score costs a few forwards
    for bad in ({"draws": 99}, {"method": "noise"}, {"enabled": 1}, {"seq_len": 3}, {"sequences": 1}):
        with pytest.raises(ConfigError, match="circuit"):
            CircuitConfig(**bad)
