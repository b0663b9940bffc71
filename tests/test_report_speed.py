"""benchmarks/report_speed.py: a report that fails is one line naming it and its own error, exit 2 (as every
benchmark script's late failure is), not exit 1 with the report's stderr below."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.analyses.cli_fuzz import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


def test_a_report_that_fails_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "report_speed.py")
    said = "mechprobe: error: --out x is a folder that holds other files; give a new or empty folder."

    def failing(command, **kwargs):
        return subprocess.CompletedProcess(command, 2, stdout="", stderr=f"some log line\n{said}\nCommand exited "
                                           f"with non-zero status 2\n0.51 81234\n")  # /usr/bin/time's lines last

    monkeypatch.setattr(script.subprocess, "run", failing)
    monkeypatch.setattr(sys, "argv", ["report_speed.py"])
    with pytest.raises(SystemExit) as exited:
        script.script_main(lambda: script.run_report(tmp_path / "code", tmp_path / "out"))()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and err == f"report_speed.py: error: the report of {tmp_path / 'code'} failed: " \
                                             f"{said}", err
