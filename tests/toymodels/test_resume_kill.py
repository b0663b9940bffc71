"""A `mechprobe toy induction` run killed mid-training (SIGKILL, SIGTERM) resumes to the same end.

Each test starts the real CLI as a subprocess with checkpoints every 20 of 400 steps (~2 s of
training), polls ``OUT.partial/checkpoint/checkpoint.json`` (the unfinished run works in OUT.partial;
OUT appears only when it is done) until a checkpoint exists, kills the process, checks that the
checkpoint left behind is an intermediate one (step < 400: the kill landed during training; otherwise
the attempt is repeated) and that no OUT folder was left, runs the same command again (SIGKILL: in a
new process; SIGTERM: through ``analyses.cli.main`` in this one), checks that the resumed run read the
checkpoint and trained only the steps after it (``tests/toymodels/step_spy.py``: a run that ignored
its checkpoint would retrain from step 1 and still end with the same weights), and compares with an
uninterrupted run: every weight tensor (torch.equal), the history, and summary.json byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from analyses.cli import main
from tests.toymodels.step_spy import spy

N_STEPS = 400
SETTINGS = ["checkpoint_every=20", "n_train=256", "train.batch_size=64", "train.stage_steps=100,100,200",
            "n_val=64", "probe_sequences=16", "eval_seq_lens=50", "eval_alphas=1.0"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}


def command(out: Path) -> list[str]:
    argv = [sys.executable, "-m", "analyses.cli", "toy", "induction", "--preset", "fast", "--out", str(out),
            "--no-progress"]
    return argv + [arg for setting in SETTINGS for arg in ("--set", setting)]


def partial(out: Path) -> Path:
    return out.with_name(out.name + ".partial")


def run_to_end_spied(out: Path, record: Path) -> dict[str, list[int]]:
    """The same command in a new process through the step spy; return what its training did."""
    argv = [sys.executable, "-m", "tests.toymodels.step_spy", str(record), *command(out)[3:]]
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(record.read_text())


def checkpoint_step(out: Path) -> int | None:
    try:
        return json.loads((partial(out) / "checkpoint" / "checkpoint.json").read_text())["step"]
    except FileNotFoundError:
        return None


def start_and_kill(out: Path, signum: int) -> tuple[int, subprocess.CompletedProcess]:
    """Start the run, send ``signum`` once a checkpoint exists; return (step seen then, the ended process)."""
    for _ in range(3):
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(partial(out), ignore_errors=True)
        process = subprocess.Popen(command(out), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        seen = None
        while process.poll() is None and time.monotonic() < deadline:
            seen = checkpoint_step(out)
            if seen is not None:
                process.send_signal(signum)
                break
            time.sleep(0.01)
        else:
            process.kill()
        stdout, stderr = process.communicate(timeout=120)
        ended = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        if seen is None and process.returncode != 0:
            pytest.fail(f"no checkpoint appeared (exit {process.returncode}): {stderr[-2000:]}")
        if seen is not None and seen < N_STEPS and checkpoint_step(out) < N_STEPS:
            return seen, ended
    pytest.fail("the signal landed after training had finished three times; make the run slower")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The same command run to the end, in this process (one interpreter start less)."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    with pytest.MonkeyPatch.context() as patch:
        seen = spy(patch.setattr)
        assert main(command(out)[3:]) == 0
    assert seen["trained"] == list(range(1, N_STEPS + 1))  # the spy sees every step of a whole run
    return out


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    meta = json.loads((out / "checkpoint" / "checkpoint.json").read_text())
    assert meta["step"] == N_STEPS
    return load_file(str(out / "checkpoint" / meta["weights"]))


def assert_same_end(resumed: Path, whole: Path) -> None:
    ours, theirs = final_weights(resumed), final_weights(whole)
    assert ours.keys() == theirs.keys()
    for name in theirs:
        assert torch.equal(ours[name], theirs[name]), name
    history = json.loads((resumed / "history.json").read_text())
    assert history == json.loads((whole / "history.json").read_text())
    assert history["steps"] == list(range(0, N_STEPS + 1))  # step 0: the initialisation
    assert (resumed / "summary.json").read_bytes() == (whole / "summary.json").read_bytes()
    leftovers = sorted(p.name for p in (resumed / "checkpoint").iterdir())
    assert len(leftovers) == 3 and leftovers[0] == "checkpoint.json", leftovers  # killed run's files cleaned up
    assert not partial(resumed).exists()  # the finished run was renamed into place


@pytest.mark.slow
def test_sigkill_mid_training_then_the_same_command_ends_like_an_uninterrupted_run(tmp_path, uninterrupted):
    out = tmp_path / "killed"
    seen, ended = start_and_kill(out, signal.SIGKILL)
    assert ended.returncode == -signal.SIGKILL
    assert not out.exists()  # no partial --out folder: the unfinished run is in OUT.partial
    step = checkpoint_step(out)
    assert 20 <= seen <= step < N_STEPS and step % 20 == 0
    trained = run_to_end_spied(out, tmp_path / "spy.json")
    assert trained == {"restored": [step], "trained": list(range(step + 1, N_STEPS + 1))}  # the checkpoint was read
    assert_same_end(out, uninterrupted)


@pytest.mark.slow
def test_sigterm_saves_the_current_step_exits_nonzero_and_resumes_exactly(tmp_path, uninterrupted, monkeypatch):
    out = tmp_path / "terminated"
    seen, ended = start_and_kill(out, signal.SIGTERM)
    assert ended.returncode == 128 + signal.SIGTERM and "Traceback" not in ended.stderr, ended.stderr
    message = ended.stderr.strip().splitlines()[-1]
    step = checkpoint_step(out)
    assert f"stopped by SIGTERM after step {step} of {N_STEPS}" in message and "resume" in message, ended.stderr
    assert 20 <= seen <= step < N_STEPS
    assert not list((partial(out) / "checkpoint").glob(".*.tmp"))  # the graceful stop finished its writes
    assert not out.exists()
    trained = spy(monkeypatch.setattr)
    assert main(command(out)[3:]) == 0  # resumed in this process (the SIGKILL test resumes in a new one)
    assert trained == {"restored": [step], "trained": list(range(step + 1, N_STEPS + 1))}  # the checkpoint was read
    assert_same_end(out, uninterrupted)
