"""benchmarks/settle_estimate.py: each unit a settled report names is priced at the shape the rounds measure it, and
the script prices a hand-made settled summary end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from probes.core.errors import InputError
from tests.analyses.cli_fuzz import benchmark_module

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = {"seq_len": 128, "batch_size": 8, "protocol_seq_len": 50, "protocol_batch_size": 4,
            "causal": {"seq_len": 16, "text_len": 64}}


def _finding(unit, units=10, tokens=0, needs=5):
    return {"name": "f", "unit": unit, "verdict": "inconclusive", "units": units, "tokens": tokens,
            "needs_units": needs}


def test_each_unit_is_priced_at_the_shape_its_rounds_measure():
    script = benchmark_module(ROOT / "benchmarks" / "settle_estimate.py")
    shape = script.unit_shape
    assert shape(_finding("text batches"), SETTINGS, 256) == script.UnitShape("suite", 128, 8, 1.0, 1024.0)
    assert shape(_finding("[BOS] X X batches"), SETTINGS, 256) == script.UnitShape("suite", 101, 4, 1.0, 0.0)
    # a ranked query token took 2,048 tokens of text in the rounds: two batches of 8 x 128
    assert shape(_finding("ranked query tokens", units=10, tokens=20480), SETTINGS, 256) == script.UnitShape(
        "suite", 128, 8, 2.0, 2048.0)
    assert shape(_finding("[BOS] X X sequences"), SETTINGS, 256) == script.UnitShape("bare", 33, 256, 3 / 256, 0.0)
    assert shape(_finding("rows of text"), SETTINGS, 128) == script.UnitShape("bare", 64, 128, 3 / 128, 64.0)
    with pytest.raises(InputError, match="no price"):
        shape(_finding("paragraphs"), SETTINGS, 256)


@pytest.mark.slow
def test_a_settled_summary_is_priced_end_to_end(tmp_path):
    summary = {"settings": {"pretrained": SETTINGS}, "pretrained": {"m": {"settled": {
        "topic_attention_best_head": {**_finding("text batches", units=40, needs=100), "name": "b"},
        "induction_protocol": {**_finding("text batches", units=0, needs=None), "verdict": "holds"}}}}}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    done = subprocess.run([sys.executable, "benchmarks/settle_estimate.py", str(tmp_path), "--corpus-tokens",
                           "1000000"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| m |")]
    assert len(rows) == 1 and "| 40 |" in rows[0] and "| 100 | 102,400 |" in rows[0]  # decided findings: no row
    assert "102,400 tokens of fresh text: 10.24% of the 1,000,000 available" in done.stdout


@pytest.mark.parametrize("text", ["", "{", '{"settings": {}}', '{"settings": {"pretrained": {}}, "pretrained": '
                                  '{"m": {"settled": {"f": {"unit": "text batches"}}}}}'])
def test_a_damaged_summary_is_one_line_and_exit_2(text, tmp_path, monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "settle_estimate.py")
    (tmp_path / "summary.json").write_text(text, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["settle_estimate.py", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        script.main()
    error = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and "summary.json" in error and "\n" not in error and "Traceback" not in error


def test_a_report_that_is_a_looping_link_is_named_as_one(tmp_path, monkeypatch, capsys):
    """It said "REPORT/summary.json does not exist" (issue 45: the wrong cause)."""
    script = benchmark_module(ROOT / "benchmarks" / "settle_estimate.py")
    (tmp_path / "loop").symlink_to("loop")
    monkeypatch.setattr(sys, "argv", ["settle_estimate.py", str(tmp_path / "loop")])
    with pytest.raises(SystemExit) as exited:
        script.main()
    error = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and "\n" not in error, error
    assert f"argument report: {tmp_path / 'loop'}: a symbolic link on it loops" in error, error


@pytest.mark.parametrize("pretrained", [{}, {"m": {"n_layers": 2}}])
def test_a_report_made_without_settle_is_refused_not_priced_at_0_s(pretrained, tmp_path, monkeypatch, capsys):
    """A report made without --settle (or of no model) printed an empty table and 'Still needed: 0 s', exit 0."""
    script = benchmark_module(ROOT / "benchmarks" / "settle_estimate.py")
    (tmp_path / "summary.json").write_text(json.dumps({"settings": {"pretrained": SETTINGS},
                                                       "pretrained": pretrained}), encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["settle_estimate.py", str(tmp_path)])
    with pytest.raises(SystemExit) as exited:
        script.main()
    error = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(error.splitlines()) == 1, error
    assert "holds no settled findings (a report made without --settle" in error, error
