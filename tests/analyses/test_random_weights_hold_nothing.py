"""Random weights: on random-weight checkpoints of three architectures (two causal, one encoder, made here
from configs) the whole report finds nothing: no finding holds, co-occurrence ordering and the head ablations
(measured on the two causal ones) included."""

from __future__ import annotations

import json

import pytest

from analyses.cli import main
from analyses.pretrained.findings import CAUSAL_FINDINGS, CIRCUIT_FINDING, PRETRAINED_FINDINGS
from tests.analyses.rendering import assert_render_rebuilds
from tests.random_checkpoints import RANDOM_CHECKPOINT_KINDS, make_random_checkpoint


@pytest.mark.slow
def test_no_finding_holds_on_random_weight_checkpoints(tmp_path, capsys):
    folders = [make_random_checkpoint(kind, tmp_path / kind, seed=3) for kind in RANDOM_CHECKPOINT_KINDS]
    out = tmp_path / "report"
    # (the circuit edge is on, as by default: measured on the two decoders, its null on the receiver's score)
    argv = ["report", "--fast", "--no-toys", "--no-progress", "--out", str(out)]
    for folder in folders:
        argv += ["--model", str(folder)]
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert len(summary["pretrained"]) == 3
    for name, entry in summary["pretrained"].items():
        ablated = set(CAUSAL_FINDINGS) if entry["causal"] else set()  # the decoders
        circuit = {CIRCUIT_FINDING} if entry["circuit"] is not None else set()
        assert set(entry["findings"]) == set(PRETRAINED_FINDINGS) | ablated | circuit
        assert bool(entry["circuit_note"]) != bool(circuit) and (entry["causal"] or not circuit)
        assert set(entry["ablations"]) == ablated and bool(entry["ablation_note"]) != bool(ablated)
        held = [f for f, finding in entry["findings"].items() if finding["holds"]]
        held += [f"control {f}" for f, finding in entry["control"]["findings"].items() if finding["holds"]]
        assert not held, (name, {f: entry["findings"][f] for f in entry["findings"]})
        # the confound of the old statistic is gone: distance-matched ordering is near 0 on random weights
        assert abs(entry["cooccurrence"]["spearman_distance_matched_mean"]) < 0.1
    # the saved results rebuild the report without a model, byte for byte
    assert_render_rebuilds(out, tmp_path / "rendered")
