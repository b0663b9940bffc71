"""benchmarks/train_lm_sweep.py and benchmarks/toy_phases_sweep.py: what their steps (``mechprobe train-lm``,
``toy``, ``dynamics`` in child processes) would refuse or repeat is refused by the script itself before any work, in
one line naming its own flag."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.analyses.cli_fuzz import benchmark_module

ROOT = Path(__file__).resolve().parents[1]


def run_script(name: str, argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """``benchmarks/NAME ARGV`` in this process, its steps (``mechprobe``) recorded instead of run: (exit, stderr)."""
    script = benchmark_module(ROOT / "benchmarks" / name)
    steps: list[tuple[str, ...]] = []
    monkeypatch.setattr(script, "mechprobe", lambda *args, threads: steps.append(args) or 0.0)
    monkeypatch.setattr(sys, "argv", [name, *argv])
    with pytest.raises(SystemExit) as exited:
        script.main()
    assert not steps, f"a step started: {steps[0]}"
    return exited.value.code, capsys.readouterr().err.strip()


@pytest.mark.parametrize(("name", "argv", "words"), [
    ("train_lm_sweep.py", ["--repeat", "0.5,0.50"], "--repeat: '0.5,0.50' gives 0.50 twice"),
    ("train_lm_sweep.py", ["--repeat", "0,-0"], "gives -0 twice"),
    ("train_lm_sweep.py", ["--seeds", "1,2,1"], "--seeds: '1,2,1' gives 1 twice"),
    ("toy_phases_sweep.py", ["--seeds", "0,0"], "--seeds: '0,0' gives 0 twice"),
])
def test_what_a_step_would_refuse_is_refused_before_any_work(name, argv, words, tmp_path, monkeypatch, capsys):
    code, err = run_script(name, [*argv, "--out", str(tmp_path / "sweep")], monkeypatch, capsys)
    assert code == 2 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "sweep").exists()

