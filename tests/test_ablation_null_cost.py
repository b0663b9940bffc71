"""benchmarks/ablation_null_cost.py: heads named twice are refused before its measuring processes start, named heads
are checked by the ablation's process before the suite's runs, and a measuring process that refuses is one line and
exit 2 (the script's own error, as every benchmark script's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.analyses.cli_fuzz import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


def run_script(argv: list[str], monkeypatch, capsys, child) -> tuple[object, str]:
    script = benchmark_module(ROOT / "benchmarks" / "ablation_null_cost.py")
    monkeypatch.setattr(script.subprocess, "run", child)
    monkeypatch.setattr(sys, "argv", ["ablation_null_cost.py", "--model", "smollm2-135m", *argv])
    with pytest.raises(SystemExit) as exited:
        script.main()
    return exited.value.code, capsys.readouterr().err.strip()


def test_heads_named_twice_are_refused_before_any_process_starts(monkeypatch, capsys):
    code, err = run_script(["--heads", "1.0,1.1,1.0"], monkeypatch, capsys,
                           lambda *a, **k: pytest.fail("a measuring process started"))
    assert code == 2 and err == "ablation_null_cost.py: error: --heads 1.0,1.1,1.0 names 1.0 twice; name each head " \
                                "once.", err


def test_a_measuring_process_that_refuses_is_one_line_and_exit_2(monkeypatch, capsys):
    """It was ``sys.exit("the ablation process failed:\\n...")``: exit 1, the child's stderr below a second line.
    Named heads go to the ablation's process first, which checks them against the model: the suite's process (a
    minute on SmolLM2) does not run for heads that cannot be ablated."""
    said = "ablation_null_cost.py: error: The heads [(1, 0), (1, 1)] are every head of layer(s) 1: ... (0 draws)."
    started = []

    def child(command, **kwargs):
        started.append(command[command.index("--role") + 1])
        return subprocess.CompletedProcess(command, 2, stdout="", stderr=f"{said}\n")

    code, err = run_script(["--heads", "1.0,1.1"], monkeypatch, capsys, child)
    assert code == 2 and err == ("ablation_null_cost.py: error: the ablation process failed: The heads [(1, 0), "
                                 "(1, 1)] are every head of layer(s) 1: ... (0 draws)."), err
    assert started == ["ablation"]
