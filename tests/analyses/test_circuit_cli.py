"""mechprobe circuit: on the planted previous-token -> induction circuit, the top heads are chosen on the even
batches, the planted K-edge holds against random edges and the control's same edge while its Q-edge is absent, and
circuit.json and the graph are written; bad input exits 2 in one line before any model is loaded."""

from __future__ import annotations

import json

import pytest

from analyses.circuit import command
from analyses.cli import main
from tests.probes.causal.planted_circuit import planted_circuit_bridge

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_planted_k_edge_holds_and_its_q_edge_is_absent(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(command, "load_any_model", lambda spec, **kwargs: planted_circuit_bridge())
    out = tmp_path / "run"
    assert main(["circuit", "--model", "planted", "--out", str(out), "--inputs", "k,q", "--seq-len", "8",
                 "--batches", "3", "--batch-size", "4", "--draws", "100"]) == 0
    assert "screen rho" in capsys.readouterr().out
    document = json.loads((out / "circuit.json").read_text())
    assert document["chosen"]["sender"]["heads"] == [[0, 0]] and document["chosen"]["receiver"]["heads"] == [[1, 0]]
    verdicts = {name: row["verdict"] for name, row in document["findings"].items()}
    assert verdicts == {"L0H0 -> L1H0 (k) / loss_change": "holds", "L0H0 -> L1H0 (k) / score_drop": "holds",
                        "L0H0 -> L1H0 (q) / loss_change": "absent", "L0H0 -> L1H0 (q) / score_drop": "absent"}
    assert len(document["control_edges"]) == 2
    assert (out / "circuit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("flags, words", [
    (["--senders", "0-0"], "LAYER.HEAD pairs"),
    (["--receiver-top", "induction:0"], "KIND:K"),
    (["--sender-top", "nonsense:1"], "nonsense"),
    (["--sender-top", ""], "KIND:K"),  # an empty value is not the default (found by the full fuzz product)
    (["--receiver-top", ""], "KIND:K"),
    (["--inputs", "k,x"], "among k, q, v"),
    (["--method", "resample", "--batch-size", "1"], "--batch-size must be"),
    (["--seq-len", "-1"], "--seq-len must be"),  # the flag, not the setting, is named (the full fuzz product)
    (["--draws", "-1"], "--draws must be"),
])
def test_bad_input_is_one_line_and_exit_2(flags, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(command, "load_any_model", lambda spec, **kwargs: pytest.fail("loaded a model"))
    assert main(["circuit", "--model", "planted", "--out", str(tmp_path / "run"), *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("mechprobe: error:") and words in error and "\n" not in error, error
