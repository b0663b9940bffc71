"""A Ctrl-C at the Nth call of what every stage goes through (a file renamed or synced, a folder made or removed,
a forward pass: :mod:`tests.interrupt_points`), for every N of an uninterrupted run: one line and exit 130, nothing
of the user's changed, and the same command then finishes with the results of an uninterrupted run (issue 45:
every run can be rerun or resumed with the command it printed, whatever stopped it). The default suite tries a
sample of N (the first call of each kind, the middle and the last); the exhaustive test (``make test-exhaustive``,
which CI runs) every N."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from analyses.cli import main
from tests.interrupt_points import counted, interrupted_at, leftovers, run, sample
from tests.random_checkpoints import make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")

LM = ["--steps", "6", "--set", "vocab=10", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=8",
      "--set", "n_heads=2", "--set", "n_checkpoints=2", "--set", "span=4", "--set", "resume_every=3",
      "--no-progress"]
TOY_SERIES = ["data.seq_len=20", "standard_train.n_steps=12", "eval_every=6", "n_val=16", "probe_sequences=16",
              "standard.d_model=16", "eval_seq_lens=(10,)", "eval_alphas=(1.0,)", "n_train=32", "series_checkpoints=4",
              "checkpoint_every=4"]
TOY_SCANSNAP = ["train.n_steps=20", "eval_sequences=16", "standard.n_steps=5", "standard.d_model=8"]
RESUME = "mechprobe: interrupted; run the same command again to resume\n"
ONCE = "mechprobe: interrupted\n"
# what differs between a resumed run and an uninterrupted one by design: timings, which checkpoints were measured now
UNCOMPARED = {"seconds", "measured_now", "reused", "timings.json"}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("interrupt_inputs")
    model = make_random_checkpoint("gpt_neox", folder / "model", seed=0)
    for step in (0, 10):
        shutil.copytree(model, folder / "series" / f"step_{step}")
    (folder / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(200)))
    return folder


COMMANDS: dict[str, tuple[Callable[[Path, Path], list[str]], str]] = {
    "dynamics": (lambda inputs, out: ["dynamics", "--model", str(inputs / "series"), "--out", str(out),
                                      "--batches", "4", "--boot", "20", "--no-progress"], RESUME),
    "train-lm": (lambda inputs, out: ["train-lm", "--corpus", str(inputs / "text.txt"), "--out", str(out), *LM],
                 RESUME),
    "toy-series": (lambda inputs, out: ["toy", "induction", "--preset", "standard", "--out", str(out), "--no-progress",
                                        *(arg for item in TOY_SERIES for arg in ("--set", item))], RESUME),
    "toy-scansnap": (lambda inputs, out: ["toy", "scansnap", "--out", str(out), "--no-progress",
                                          *(arg for item in TOY_SCANSNAP for arg in ("--set", item))], RESUME),
    "ablate": (lambda inputs, out: ["ablate", "--model", str(inputs / "model"), "--top", "induction:2", "--out",
                                    str(out), "--batch-size", "2", "--no-progress"], ONCE),
}


def results(out: Path) -> dict[str, object]:
    """The output's JSON files (less UNCOMPARED) and weights, by path; checkpoint files (named by a random tag)
    and the resume state left out."""
    def kept(value):
        if isinstance(value, dict):
            return {k: kept(v) for k, v in value.items() if k not in UNCOMPARED}
        return [kept(v) for v in value] if isinstance(value, list) else value

    found: dict[str, object] = {}
    for path in sorted(out.rglob("*")):
        name = str(path.relative_to(out))
        if path.is_dir() or {"checkpoint", "states"} & set(name.split("/")) or path.name in UNCOMPARED:
            continue
        if path.suffix == ".json":
            found[name] = kept(json.loads(path.read_text()))
        elif path.suffix == ".safetensors":
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "file"
    return found


class References(dict):
    """Each command's uninterrupted run, made when first asked for: the kinds of its calls, in order, and its
    results."""

    def __init__(self, inputs: Path, folder: Path) -> None:
        super().__init__()
        self.inputs, self.folder = inputs, folder

    def __missing__(self, name: str) -> tuple[list[str], dict]:
        out = self.folder / name / "out"
        with pytest.MonkeyPatch.context() as patch:
            kinds = counted(patch)
            assert main(COMMANDS[name][0](self.inputs, out)) == 0
        self[name] = (list(kinds), results(out))
        return self[name]


@pytest.fixture(scope="module")
def references(inputs, tmp_path_factory) -> References:
    return References(inputs, tmp_path_factory.mktemp("references"))


def check_interrupt_at(name: str, n: int, inputs: Path, references, tmp_path: Path) -> None:
    argv, line = COMMANDS[name]
    kinds, reference = references[name]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "notes.txt").write_text("the user's")
    command = argv(inputs, tmp_path / "out")
    with pytest.MonkeyPatch.context() as patch:
        fired = interrupted_at(patch, n)
        code, stderr = run(main, command)
    if not fired and code == 0:  # this run made fewer calls than the one counted (a cache made once): it finished
        return
    assert (code, stderr) == (130, line), f"Ctrl-C at call {n} ({kinds[n - 1]}): {code!r} {stderr!r}"
    assert (tmp_path / "notes.txt").read_text() == "the user's"
    assert not leftovers(tmp_path)
    code, stderr = run(main, command)
    assert code == 0, f"the same command after a Ctrl-C at call {n} ({kinds[n - 1]}): {code!r} {stderr}"
    assert results(tmp_path / "out") == reference


def test_the_leftover_check_finds_each_kind_of_temporary(tmp_path):
    """The check after each Ctrl-C found only ``.NAME.XXXX.tmp``: a figure's ``.NAME.XXXX.tmp.png``
    (``mechprobe.atomic.atomic_file``) left by a stopped write passed it."""
    planted = [tmp_path / ".summary.json.k2j4.tmp", tmp_path / "out" / ".dynamics.png.x8q1.tmp.png",
               tmp_path / ".out.a1b2.tmp", tmp_path / ".out.old-4242"]
    kept = [tmp_path / "notes.txt", tmp_path / "out" / "summary.json", tmp_path / "out" / "dynamics.png"]
    for path in planted + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
    assert sorted(leftovers(tmp_path)) == sorted(planted)


def all_points(name: str, references) -> list[int]:
    return list(range(1, len(references[name][0]) + 1))


@pytest.mark.parametrize("name", ["dynamics", "train-lm", "toy-scansnap"])  # resumed; ablate's is renamed whole
def test_a_ctrl_c_at_a_sample_of_calls_is_one_line_and_the_same_command_finishes_the_run(name, inputs, references,
                                                                                          tmp_path):
    for n in sample(references[name][0]):
        check_interrupt_at(name, n, inputs, references, tmp_path / str(n))


def series_started(kinds: list[str]) -> list[int]:
    """The calls of a toy series run while its first step is saved, before series.json: the folders made for it,
    and the sync before each of the first three renames (the weights, model.json, series.json)."""
    renames = [index for index, kind in enumerate(kinds, 1) if kind == "rename"][:3]
    mkdirs = [index for index, kind in enumerate(kinds, 1) if kind == "mkdir" and index < renames[0]]
    return sorted({*mkdirs[-2:], *(index - 1 for index in renames)})


def test_a_ctrl_c_while_the_toy_series_first_step_is_saved_is_resumed_by_the_same_command(inputs, references,
                                                                                           tmp_path):
    """Stopped while step_0 of ``--set series_checkpoints`` was written, before series.json, OUT.partial held only
    series/step_0 (or an empty series/): the same command refused it as 'not an unfinished run of this command'."""
    for n in series_started(references["toy-series"][0]):
        check_interrupt_at("toy-series", n, inputs, references, tmp_path / str(n))


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_ctrl_c_at_every_call_is_one_line_and_the_same_command_finishes_the_run(name, inputs, references,
                                                                                   tmp_path):
    for n in all_points(name, references):
        check_interrupt_at(name, n, inputs, references, tmp_path / str(n))


def test_a_ctrl_c_while_the_dynamics_figure_is_saved_leaves_no_summary_and_no_half_figure(inputs, tmp_path,
                                                                                          monkeypatch):
    """dynamics writes in place in OUT (resumable): stopped while dynamics.png was written, it left summary.json
    (a finished run, to render and --compare) beside half a PNG; the figure is now renamed into place, then the
    summary written last."""
    from matplotlib.figure import Figure

    def half_then_interrupted(self, path, **kwargs):
        Path(path).write_bytes(b"\x89PNG\r\n\x1a\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", half_then_interrupted)
    command = COMMANDS["dynamics"][0](inputs, tmp_path / "out")
    assert run(main, command) == (130, RESUME)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["checkpoints"]
    monkeypatch.undo()
    assert run(main, command)[0] == 0
    assert (tmp_path / "out" / "summary.json").is_file()


def test_a_toy_killed_before_its_first_checkpoint_is_taken_again_by_the_same_command(inputs, tmp_path, monkeypatch):
    """A kill (the out-of-memory killer, SIGKILL) leaves OUT.partial as it was, here with a scansnap toy's model and
    figures but no checkpoint: the same command refused it as 'not an unfinished run of this command'; it is marked
    as this command's unfinished run and taken again."""
    import analyses.output_paths as output_paths

    command = COMMANDS["toy-scansnap"][0](inputs, tmp_path / "out")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(output_paths.shutil, "rmtree", lambda *args, **kwargs: None)  # nothing cleaned up: a kill
        patch.setattr(output_paths, "replace_directory", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
        assert run(main, command)[0] == 130
    assert (tmp_path / "out.partial" / "model.json").is_file() and not (tmp_path / "out").exists()
    assert run(main, command)[0] == 0
    assert not (tmp_path / "out.partial").exists() and (tmp_path / "out" / "summary.json").is_file()
    assert not (tmp_path / "out" / output_paths.UNFINISHED_MARK).exists()


@pytest.mark.parametrize("name", ["ablate"])
def test_a_sigterm_midway_is_one_line_and_exit_143_and_leaves_nothing_half_written(name, inputs, references,
                                                                                   tmp_path):
    """SIGTERM (kill, timeout, a scheduler) while a command measures: it ended the process at once, without a line,
    leaving report's, ablate's or circuit's half-written temporary folder (.OUT.XXXX.tmp); it is now taken as a
    Ctrl-C (mechprobe.errors.Terminated): cleaned up, or kept to resume, and one line, exit 143."""
    import signal

    def sigterm() -> None:
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # it would end this test process, as it did the command
            raise AssertionError("SIGTERM has its default action while the command runs: it ends at once")
        signal.raise_signal(signal.SIGTERM)

    kinds = references[name][0]
    forwards = [index for index, kind in enumerate(kinds, 1) if kind == "forward"]
    with pytest.MonkeyPatch.context() as patch:
        interrupted_at(patch, forwards[len(forwards) // 2], sigterm)
        code, stderr = run(main, COMMANDS[name][0](inputs, tmp_path / "out"))
    assert (code, stderr) == (143, COMMANDS[name][1].replace("interrupted", "terminated"))
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # put back
    assert not [path for path in tmp_path.rglob("*") if ".tmp" in path.name]
    assert run(main, COMMANDS[name][0](inputs, tmp_path / "out"))[0] == 0
    assert results(tmp_path / "out") == references[name][1]
