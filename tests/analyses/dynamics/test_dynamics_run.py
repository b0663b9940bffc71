"""``mechprobe dynamics`` over a stand-in hub of three Pythia-style revisions (random weights): read in step order
through the real transformers revision path, resumed after a kill without measuring the stored checkpoints
again, no event on random-weight checkpoints, and a missing revision in one line before anything is measured."""

from __future__ import annotations

import json

import pytest

from analyses.cli import main
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.run import STORE, StoredMeasure, _read_stored, run_dynamics
from analyses.dynamics.summary import SUMMARY, load_summary
from analyses.toy_model_loader import load_any_model
from mechprobe import records
from probes import ConfigError
from probes.core.checkpoint_series import Checkpoint
from probes.core.errors import InputError
from tests.stand_in_hub import REPO, make_stand_in_hub, use_stand_in_hub

pytestmark = pytest.mark.usefixtures("one_thread")
SERIES = f"{REPO}@revisions=step1000,step0,step512"
CONFIG = DynamicsConfig(seq_len=12, n_batches=8, batch_size=4, n_boot=200)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    return make_stand_in_hub(tmp_path_factory.mktemp("hub"), {"step0": 0, "step512": 1, "step1000": 2})


class Killed(BaseException):
    """What the loader raises to stop the run part-way, as a SIGKILL would (not an Exception: nothing catches it)."""


def test_a_killed_run_resumes_without_measuring_stored_checkpoints_again(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    loaded: list[str] = []

    def dies_at_third(spec: str):
        loaded.append(spec)
        if len(loaded) == 3:
            raise Killed
        return load_any_model(spec)

    with pytest.raises(Killed):
        run_dynamics(SERIES, tmp_path / "out", CONFIG, progress=False, load=dies_at_third)
    assert loaded == [f"{REPO}@revision=step{s}" for s in (0, 512, 1000)]  # step order, not the order given
    stored = sorted((tmp_path / "out" / STORE).iterdir())
    assert [p.name for p in stored] == ["0000-step0.json", "0001-step512.json"]
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in stored}
    assert not (tmp_path / "out" / SUMMARY).exists()

    loaded.clear()
    summary = run_dynamics(SERIES, tmp_path / "out", CONFIG, progress=False,
                           load=lambda spec: loaded.append(spec) or load_any_model(spec))
    assert loaded == [f"{REPO}@revision=step1000"]
    assert summary.reused == (0, 1) and summary.measured_now == (2,)
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in stored} == before
    assert summary.steps == (0, 512, 1000)

    # random-weight checkpoints: curves at their random-weight level, and no event holds
    events = summary.events
    assert set(events.events) == {"previous_token", "induction", "duplicate_token", "repeat_loss_gain"}
    assert not any(event.holds for event in events.events.values())
    assert not events.orders["previous_token_before_induction"].holds
    document = json.loads((tmp_path / "out" / SUMMARY).read_text())
    assert document["events"]["events"]["induction"]["finding"]["holds"] is False
    assert (tmp_path / "out" / "dynamics.png").stat().st_size > 10_000


def test_stored_checkpoints_measured_with_other_settings_are_refused(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    run_dynamics(f"{REPO}@revisions=step0,step512", tmp_path / "out", CONFIG, progress=False)
    (tmp_path / "out" / STORE / "0000-step0.json").unlink()  # step 0 to measure again, step 512 stored
    loaded: list[str] = []
    with pytest.raises(Exception, match="measured with other settings"):
        run_dynamics(f"{REPO}@revisions=step0,step512", tmp_path / "out",
                     DynamicsConfig(seq_len=10, n_batches=8, batch_size=4, n_boot=200), progress=False,
                     load=lambda spec: loaded.append(spec) or load_any_model(spec))
    assert loaded == []  # refused before step 0 was loaded and measured, not after


def test_a_stored_checkpoint_is_found_however_its_folder_is_spelt(hub, tmp_path, monkeypatch):
    # a run started as --model lm resumes as --model /abs/lm (or ./lm/), and another folder is still refused
    use_stand_in_hub(monkeypatch, hub)
    run_dynamics(f"{REPO}@revisions=step0,step512", tmp_path / "out", CONFIG, progress=False)
    path = tmp_path / "out" / STORE / "0000-step0.json"
    measure = records.read_record(StoredMeasure, path, rerun="").measure
    for name in ("lm", "lm2"):
        (tmp_path / name / "step_0").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    path.write_text(records.to_json(StoredMeasure(CONFIG, Checkpoint(0, "lm/step_0"), measure)))
    for spelling in (str(tmp_path / "lm" / "step_0"), "./lm/step_0/", "lm/step_0"):
        assert records.to_json(_read_stored(path, Checkpoint(0, spelling), CONFIG)) == records.to_json(measure)
    for other in (Checkpoint(0, "lm2/step_0"), Checkpoint(0, "lm/step_0", tokens=5)):
        with pytest.raises(InputError, match="another checkpoint"):
            _read_stored(path, other, CONFIG)


def test_cli_reads_the_series_and_a_missing_revision_is_one_line(hub, tmp_path, monkeypatch, capsys):
    use_stand_in_hub(monkeypatch, hub)
    code = main(["dynamics", "--model", f"{REPO}@revisions=step0,step404,step512", "--out", str(tmp_path / "bad"),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "has no revision 'step404'" in err
    assert not (tmp_path / "bad").exists()

    code = main(["dynamics", "--model", SERIES, "--out", str(tmp_path / "ok"), "--seq-len", "12", "--batches", "8",
                 "--batch-size", "4", "--boot", "200", "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0 and "steps: 0, 512, 1000" in out and "event induction" in out and "does not hold" in out
    first = load_summary(tmp_path / "ok")  # summary.json reads back as the record it was written from
    assert first.steps == (0, 512, 1000) and first.events.events["induction"].holds is False

    code = main(["dynamics", "--model", f"{REPO}@revisions=step0,step1000", "--out", str(tmp_path / "two"),
                 "--seq-len", "12", "--batches", "8", "--batch-size", "4", "--boot", "200", "--no-progress",
                 "--compare", str(tmp_path / "ok")])
    assert code == 0 and (tmp_path / "two" / "dynamics_compare.png").stat().st_size > 10_000
    code = main(["dynamics", "--model", SERIES, "--out", str(tmp_path / "three"), "--compare", str(tmp_path / "bad")])
    assert code == 2 and "holds no summary.json" in capsys.readouterr().err and not (tmp_path / "three").exists()


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="n_batches must be even"):
        DynamicsConfig(n_batches=7)
    with pytest.raises(ConfigError, match="early"):
        DynamicsConfig(early=(50, 60), late=(40, 127))


@pytest.mark.slow  # about 45 s: a fresh process and six revisions
def test_a_sigkilled_process_resumes_without_measuring_stored_checkpoints_again(tmp_path, monkeypatch):
    """The real kill: ``mechprobe dynamics`` in its own process, SIGKILLed once its first checkpoint is stored."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    revisions = {f"step{s}": i for i, s in enumerate((0, 1, 2, 4, 8, 16))}
    hub = make_stand_in_hub(tmp_path / "hub", revisions)
    series = f"{REPO}@revisions={','.join(revisions)}"
    out = tmp_path / "out"
    root = Path(__file__).resolve().parents[3]
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(root)}
    process = subprocess.Popen(
        [sys.executable, "-m", "analyses.cli", "dynamics", "--model", series, "--out", str(out), "--seq-len", "12",
         "--batches", "8", "--batch-size", "4", "--boot", "200", "--no-progress"], cwd=tmp_path, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not (out / STORE / "0000-step0.json").exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    stored = sorted((out / STORE).glob("*.json"))
    assert 1 <= len(stored) < len(revisions) and not (out / SUMMARY).exists()
    before = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in stored}

    use_stand_in_hub(monkeypatch, hub)
    loaded: list[str] = []
    summary = run_dynamics(series, out, CONFIG, progress=False,
                           load=lambda spec: loaded.append(spec) or load_any_model(spec))
    assert summary.reused == tuple(range(len(stored)))
    assert loaded == [f"{REPO}@revision={r}" for r in list(revisions)[len(stored):]]
    assert {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in stored} == before


def test_with_a_corpus_the_early_minus_late_text_loss_is_a_curve_too(hub, tmp_path, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    words = [f"w{i}" for i in range(2, 200)]
    (tmp_path / "text.txt").write_text("\n\n".join(" ".join(words[(7 * d + k) % len(words)] for k in range(180))
                                                   for d in range(40)))
    config = DynamicsConfig(seq_len=12, n_batches=8, batch_size=4, n_boot=200, corpus=str(tmp_path / "text.txt"),
                            text_batches=2)
    summary = run_dynamics(f"{REPO}@revisions=step0,step512", tmp_path / "out", config, progress=False)
    assert len(summary.curves["context_loss_gain"]) == 2
    event = summary.events.events["context_loss_gain"]
    assert abs(event.change.end) < 0.5 and not event.holds  # random weights: early and late text alike


def test_a_block_longer_than_a_hub_series_context_is_refused_before_any_checkpoint_loads(hub, tmp_path, monkeypatch,
                                                                                        capsys):
    """The stand-in revisions have a context of 128 positions: [BOS] X X with |X| = 64 needs 129. It is refused
    from the revisions' configs, which resolving them reads, before a checkpoint loads (it was refused at the first
    checkpoint's load, advising 'Use seq_len <= 63', not the flag)."""
    use_stand_in_hub(monkeypatch, hub)

    def load(*args, **kwargs):
        raise AssertionError("a checkpoint was loaded")

    monkeypatch.setattr("analyses.dynamics.run.load_any_model", load)
    code = main(["dynamics", "--model", SERIES, "--seq-len", "64", "--out", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--seq-len 64" in err and "context of 128" in err and "give --seq-len 63 or less" in err, err
    assert not (tmp_path / "out").exists()


def test_rows_the_machine_cannot_hold_are_refused_before_any_work(tmp_path, capsys):
    """dynamics --batch-size 100000000 --batches 4 drew its [BOS] X X rows (over 100 GiB of them, kept for every
    checkpoint) and the kernel killed the process: no line, no exit 2. Refused now from a lower bound of those rows
    against the machine's memory, naming the three flags, before the series is read."""
    from analyses.dynamics.cli_commands import check_rows_fit

    big = DynamicsConfig(seq_len=16, n_batches=4, batch_size=100_000_000)
    with pytest.raises(ConfigError, match=r"--batches 4 x --batch-size 100000000 x --seq-len 16: the \[BOS\] X X "
                                          r"rows alone hold at least 107 GiB .* lower --batch-size or --batches\."):
        check_rows_fit(big, 24 * 2**30)
    check_rows_fit(big, None)  # memory not known: not checked
    check_rows_fit(DynamicsConfig(n_batches=64, batch_size=256, seq_len=512), 2**30)  # 0.6 GiB: measured
    assert main(["dynamics", "--model", str(tmp_path / "lm"), "--out", str(tmp_path / "dyn"), "--batch-size",
                 str(2**63 - 1), "--no-progress"]) == 2
    assert "rows alone hold at least" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_an_event_without_a_step_is_printed_as_such_not_as_step_nan():
    """A curve that never crosses its level printed ``event duplicate_token: step nan [2, 2]`` and its order
    ``order ...: nan steps [-123, 1993]``: an interval around no step."""
    import math
    from types import SimpleNamespace

    from analyses.dynamics.run import summary_lines

    change = SimpleNamespace(step=math.nan, step_ci=(2.0, 2.0), start=0.1, end=0.1, peak_step=0.0,
                             draws_with_event=0.25)
    event = SimpleNamespace(change=change, finding=SimpleNamespace(reported_p=1.0), holds=False)
    order = SimpleNamespace(value=math.nan, ci=(-123.0, 1993.0), reported_p=1.0, holds=False)
    summary = SimpleNamespace(steps=(0, 10, 12), curves={"duplicate_token": [0.1, 0.1, 0.1]},
                              events=SimpleNamespace(events={"duplicate_token": event},
                                                     orders={"duplicate_token_before_induction": order},
                                                     loss_drop_within_induction=None,
                                                     text_loss_drop_within_induction=None))
    lines = summary_lines(summary)
    assert lines[2] == ("event duplicate_token: no step (the measured curve does not cross its event level; 25% of "
                        "the bootstrap draws do), 0.100 -> 0.100 (peak at step 0), p=1: does not hold")
    assert lines[3] == ("order duplicate_token_before_induction: no gap (an event of the two has no step), p=1: "
                        "does not hold")
    assert not any("nan" in line for line in lines)
