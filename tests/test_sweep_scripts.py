"""benchmarks/train_lm_sweep.py and benchmarks/toy_phases_sweep.py: what their steps (``mechprobe train-lm``,
``toy``, ``dynamics`` in child processes) would refuse or repeat is refused by the script itself before any work,
in one line naming its own flag; the steps write under ``--out`` whatever the working folder; a step that fails
anyway is one line naming it, not a traceback."""

from __future__ import annotations

import subprocess
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
    ("train_lm_sweep.py", ["--steps", "5"], "--steps 5: train-lm saves 16 checkpoints"),
    ("train_lm_sweep.py", ["--steps", "28"], "give --steps 29 or more"),
    ("toy_phases_sweep.py", ["--seeds", "0,0"], "--seeds: '0,0' gives 0 twice"),
    ("toy_phases_sweep.py", ["--checkpoints", "1000000"], "give --checkpoints 60 or fewer"),
    ("toy_phases_sweep.py", ["--checkpoints", "61"], "at most 60 distinct log-spaced checkpoints"),
])
def test_what_a_step_would_refuse_is_refused_before_any_work(name, argv, words, tmp_path, monkeypatch, capsys):
    code, err = run_script(name, [*argv, "--out", str(tmp_path / "sweep")], monkeypatch, capsys)
    assert code == 2 and words in err and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "sweep").exists()


def test_the_steps_write_under_a_relative_out_not_under_the_repository(tmp_path, monkeypatch, capsys):
    """The steps run in the repository's folder: a relative --out was once handed to them as it was, so the runs
    went to ROOT/OUT, outside the --out the user named."""
    script = benchmark_module(ROOT / "benchmarks" / "train_lm_sweep.py")
    outs: list[str] = []

    def step(*args: str, threads: int) -> float:
        outs.append(args[args.index("--out") + 1])
        raise SystemExit(0)  # stop at the first step

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(script, "mechprobe", step)
    monkeypatch.setattr(sys, "argv", ["train_lm_sweep.py", "--repeat", "1", "--out", "sweep"])
    with pytest.raises(SystemExit):
        script.main()
    assert outs and Path(outs[0]).is_absolute() and Path(outs[0]).is_relative_to(tmp_path / "sweep"), outs


def test_a_step_that_fails_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    script = benchmark_module(ROOT / "benchmarks" / "train_lm_sweep.py")

    def step(*args: str, threads: int) -> float:
        raise subprocess.CalledProcessError(2, [sys.executable, "-c", "from analyses.cli import main", *args])

    monkeypatch.setattr(script, "mechprobe", step)
    monkeypatch.setattr(sys, "argv", ["train_lm_sweep.py", "--repeat", "1", "--out", str(tmp_path / "sweep")])
    with pytest.raises(SystemExit) as exited:
        script.main()
    err = capsys.readouterr().err.strip()
    assert exited.value.code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "a step failed (exit 2): mechprobe train-lm --out" in err and "run the same command again" in err
