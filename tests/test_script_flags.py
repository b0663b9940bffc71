"""The benchmark scripts' shared entry (``analyses.cli_checks``: ScriptParser, the typed flags, script_main):
a Ctrl-C part way is one line and exit 130, not a traceback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.analyses.cli_fuzz import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


def test_a_ctrl_c_while_a_step_runs_is_one_line_and_exit_130(tmp_path, monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "toy_phases_sweep.py")

    def interrupted(*args: str, threads: int) -> float:
        raise KeyboardInterrupt

    monkeypatch.setattr(script, "mechprobe", interrupted)
    monkeypatch.setattr(sys, "argv", ["toy_phases_sweep.py", "--seeds", "0", "--out", str(tmp_path / "sweep")])
    try:
        script.main()
    except KeyboardInterrupt:
        pytest.fail("the interrupt left script_main: Python prints its traceback")
    except SystemExit as exited:
        err = capsys.readouterr().err.strip()
        assert exited.code == 130 and err == "toy_phases_sweep.py: interrupted", err
    else:
        pytest.fail("the interrupted sweep returned")


def test_a_real_sigint_part_way_prints_no_traceback(tmp_path):
    """SIGINT once the sweep's first step runs (it made the sweep's folder): one line, exit 130."""
    out = tmp_path / "sweep"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "toy_phases_sweep.py"), "--seeds", "0",
                                "--checkpoints", "2", "--out", str(out)], env=env, cwd=tmp_path,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not out.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130 and err.strip() == "toy_phases_sweep.py: interrupted", err
