"""Damaged series folders, generated: every file of a ``train-lm`` folder and of a ``dynamics`` folder made here is
damaged in turn in every way its kind allows (JSON: truncated, not UTF-8, deleted, a list for the object, a key
removed, and in ``series.json`` two steps swapped; binary: truncated, deleted, garbage), so a new file is fuzzed
without anyone writing a case. Each damaged folder is then given to every command that takes it:
- ``train-lm`` run again on its damaged folder must resume it whole (exit 0, every saved step loading back) or
  refuse in one line naming the damaged file (exit 2, every file as it was);
- ``dynamics --model`` and ``report --series`` of a damaged train-lm folder must refuse before any measuring, in one
  line naming the file and train-lm's fix (not a toy's), or measure it when they read no such file;
- ``dynamics --compare`` of a damaged dynamics folder must refuse naming the file or accept it (a file it does not
  read);
- the same ``dynamics`` command given its damaged folder back as ``--out`` must resume (measuring again what was
  lost) or refuse naming the file, every file as it was (slow suite only: each resume measures).
Never a traceback. The default suite runs a fixed-seed sample of the cases; ``make test-exhaustive`` (which CI runs)
all of them.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from analyses.cli import main
from analyses.dynamics.summary import load_summary
from analyses.lm_data import VOCAB_FILE
from analyses.toy_model_loader import load_any_model
from probes.core.checkpoint_series import MANIFEST, checkpoint_series
from tests.analyses.test_cli_fuzz import run, snapshot
from tests.analyses.test_saved_folder_damage import BINARY_DAMAGES, JSON_DAMAGES, Damage, _edit

pytestmark = pytest.mark.usefixtures("one_thread")

# seq_len 80: report --series measures |X| = 40, which a shorter context is refused for before any work.
TINY = ["--steps", "12", "--set", "vocab=10", "--set", "seq_len=80", "--set", "batch_size=2", "--set", "d_model=8",
        "--set", "n_heads=2", "--set", "n_checkpoints=3", "--set", "span=4", "--no-progress"]
DYNAMICS = ["--seq-len", "4", "--batches", "4", "--batch-size", "2", "--boot", "20", "--no-progress"]
SAMPLE = 8  # cases of each folder in the default suite


def _swap_steps(document: object) -> object:
    """The first two checkpoints' steps exchanged (each keeps its path)."""
    assert isinstance(document, dict)
    first, second, *rest = document["checkpoints"]
    return {**document, "checkpoints": [{**first, "step": second["step"]}, {**second, "step": first["step"]}, *rest]}


def damages_of(path: Path) -> dict[str, Damage]:
    """The ways to damage the file ``path``, by its kind."""
    if path.suffix == ".json":
        return {**JSON_DAMAGES, **({"steps_swapped": _edit(_swap_steps)} if path.name == "series.json" else {})}
    if path.suffix == ".safetensors":
        return BINARY_DAMAGES
    if path.suffix == ".pt":  # a torch file: its tensors are not rewritten in other shapes here
        return {name: damage for name, damage in BINARY_DAMAGES.items() if name != "tensors_of_other_shapes"}
    return {"deleted": BINARY_DAMAGES["deleted"], "truncated": BINARY_DAMAGES["truncated"]}


def cases_of(folder: Path) -> list[tuple[str, str]]:
    """Every (file, damage) of ``folder``, the files named relative to it."""
    return [(str(path.relative_to(folder)), name) for path in sorted(folder.rglob("*")) if path.is_file()
            for name in damages_of(path)]


def sampled(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted(random.Random(45).sample(cases, min(SAMPLE, len(cases))))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A tiny train-lm folder, its dynamics folder and a copy of the train-lm folder (another series)."""
    root = tmp_path_factory.mktemp("series")
    corpus = root / "text.txt"
    corpus.write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(200)))
    assert main(["train-lm", "--corpus", str(corpus), "--out", str(root / "lm"), *TINY]) == 0
    assert main(["dynamics", "--model", str(root / "lm"), "--out", str(root / "dyn"), *DYNAMICS]) == 0
    shutil.copytree(root / "lm", root / "lm2")  # another series, which dyn (of lm) is drawn beside
    return {"corpus": corpus, "lm": root / "lm", "lm2": root / "lm2", "dyn": root / "dyn"}


def damaged_copy(source: Path, where: Path, file: str, damage: str) -> tuple[Path, Path]:
    folder = where / source.name
    shutil.copytree(source, folder)
    damages_of(folder / file)[damage](folder / file)
    return folder, folder / file


def assert_one_line_naming(code: int | str, stderr: str, damaged: Path) -> None:
    assert not isinstance(code, str), code  # a traceback
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mechprobe: error:"), stderr
    assert str(damaged) in lines[0] or str(damaged.parent) in lines[0], lines[0]


class Measured(Exception):
    """The input passed its checks: the measuring would start here."""


def _measure(*args: object, **kwargs: object) -> None:
    raise Measured


def check_train_lm_rerun(made: dict[str, Path], where: Path, file: str, damage: str) -> None:
    folder, damaged = damaged_copy(made["lm"], where, file, damage)
    before = snapshot(folder)
    code, _, stderr = run(["train-lm", "--corpus", str(made["corpus"]), "--out", str(folder), *TINY])
    if code == 0:  # resumed: the series is whole again
        series = checkpoint_series(folder)
        assert series.steps == (0, 10, 12)
        for checkpoint in series.checkpoints:
            load_any_model(checkpoint.spec)
        return
    assert_one_line_naming(code, stderr, damaged)
    assert snapshot(folder) == before


def check_compare(made: dict[str, Path], where: Path, file: str, damage: str) -> None:
    folder, damaged = damaged_copy(made["dyn"], where, file, damage)
    before = snapshot(folder)
    out = where / "new"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("analyses.dynamics.run.run_dynamics", _measure)
        code, _, stderr = run(["dynamics", "--model", str(made["lm2"]), "--out", str(out), "--compare", str(folder),
                               *DYNAMICS])
    assert snapshot(folder) == before
    if isinstance(code, str) and "Measured" in code:
        assert file != "summary.json", "a damaged summary.json was drawn as a compared series"
        return
    assert_one_line_naming(code, stderr, damaged)
    assert not out.exists()


READ_BY_DYNAMICS = ("series.json", VOCAB_FILE, "model.json", "model.safetensors")
"""The files of a train-lm folder that measuring it reads (the others: its training state and summary); without a
corpus a series needs no vocabulary, and without ``series.json`` its steps are found by their folders' names."""


def check_measured(made: dict[str, Path], where: Path, file: str, damage: str, command: list[str]) -> None:
    """``command`` (``dynamics --model`` or ``report --series``) of a damaged train-lm folder: refused before any
    measuring in one line naming the file and train-lm's fix (never toy's), or measured when it reads no such file."""
    folder, damaged = damaged_copy(made["lm"], where, file, damage)
    before = snapshot(folder)
    out = where / "new"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("analyses.dynamics.run.measure_series", _measure)
        patch.setattr("analyses.report.build.run_report", _measure)
        code, _, stderr = run([str(folder) if a == "@lm" else str(out) if a == "@out" else a for a in command])
    assert snapshot(folder) == before
    assert not out.exists()
    if isinstance(code, str) and "Measured" in code:
        unread = Path(file).name not in READ_BY_DYNAMICS or (damage == "deleted" and file in (MANIFEST, VOCAB_FILE))
        assert unread, f"a damaged {file} was measured"
        return
    assert_one_line_naming(code, stderr, damaged)
    assert "mechprobe toy" not in stderr, stderr


def check_own_out(made: dict[str, Path], where: Path, file: str, damage: str) -> None:
    """``dynamics`` given its damaged folder back as ``--out`` (the same command, to resume): it measures again what
    was lost and writes a summary that reads back, or refuses in one line naming the damaged file, every file as
    it was."""
    folder, damaged = damaged_copy(made["dyn"], where, file, damage)
    before = snapshot(folder)
    code, _, stderr = run(["dynamics", "--model", str(made["lm"]), "--out", str(folder), *DYNAMICS])
    if code == 0:
        assert load_summary(folder).steps == (0, 10, 12)
        return
    assert_one_line_naming(code, stderr, damaged)
    assert snapshot(folder) == before


def failures(check: Check, source: Path, cases: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    """Each case checked in a folder of its own; what went wrong, one line per case."""
    found = []
    for i, (file, damage) in enumerate(cases):
        try:
            check(tmp_path / f"case{i}", file, damage)
        except Exception as error:  # an assertion, or the check's own reading of the folder
            text = str(error).strip().splitlines()
            found.append(f"{tmp_path.name}: {source.name}/{file} {damage}: {type(error).__name__}: "
                         f"{text[0] if text else ''}")
    return found


Check = Callable[[Path, str, str], None]


def run_checks(made: dict[str, Path], tmp_path: Path, *, every: bool) -> None:
    lm_cases, dyn_cases = cases_of(made["lm"]), cases_of(made["dyn"])
    assert {file for file, _ in lm_cases} >= {"train-lm.json", "series.json", "step_0/model.safetensors",
                                              "checkpoint/checkpoint.json"}
    assert {file for file, _ in dyn_cases} >= {"summary.json", "dynamics.png"}
    if not every:
        lm_cases, dyn_cases = sampled(lm_cases), sampled(dyn_cases)
    found = failures(lambda where, file, damage: check_train_lm_rerun(made, where, file, damage), made["lm"],
                     lm_cases, tmp_path / "rerun")
    found += failures(lambda where, file, damage: check_compare(made, where, file, damage), made["dyn"], dyn_cases,
                      tmp_path / "compare")
    for name, command in (("dynamics", ["dynamics", "--model", "@lm", "--out", "@out", *DYNAMICS]),
                          ("report", ["report", "--no-toys", "--out", "@out", "--series", "@lm"])):
        found += failures(lambda where, file, damage, command=command: check_measured(made, where, file, damage,
                                                                                      command),
                          made["lm"], lm_cases, tmp_path / name)
    if every:  # each case that resumes measures again (seconds each)
        found += failures(lambda where, file, damage: check_own_out(made, where, file, damage), made["dyn"],
                          dyn_cases, tmp_path / "own-out")
    assert not found, "\n".join(found)


def test_a_sample_of_damaged_series_folders_is_resumed_or_refused_naming_the_file(made, tmp_path):
    run_checks(made, tmp_path, every=False)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_every_damaged_series_file_is_resumed_or_refused_naming_the_file(made, tmp_path):
    run_checks(made, tmp_path, every=True)


def test_a_compared_folder_of_another_command_is_refused_saying_what_to_give(made, tmp_path):
    """``dynamics --compare LM`` (a train-lm folder) or ``--compare REPORT`` (a report folder), each with a
    summary.json of its own, once said "Run the mechprobe dynamics command that wrote LM again", a command that never
    ran. The train-lm folder's advice (measure it, then give that folder) works."""
    report = tmp_path / "report"
    report.mkdir()
    (report / "summary.json").write_text('{"toy": {}}', encoding="utf-8")
    for folder, words in ((made["lm"], f"{made['lm']} is not the --out folder of a mechprobe dynamics run (it has no "
                           f"checkpoints/ folder); it is a checkpoint series: measure it with mechprobe dynamics "
                           f"--model {made['lm']} --out DIR, then give DIR."),
                          (report, f"{report} is not the --out folder of a mechprobe dynamics run (it has no "
                           f"checkpoints/ folder); give the --out folder of one.")):
        code, _, stderr = run(["dynamics", "--model", str(made["lm2"]), "--out", str(tmp_path / "new"), "--compare",
                               str(folder), *DYNAMICS])
        assert code == 2 and stderr.strip().splitlines() == [f"mechprobe: error: --compare: {words}"], stderr
        assert not (tmp_path / "new").exists()
    code, _, stderr = run(["dynamics", "--model", str(made["lm2"]), "--out", str(tmp_path / "new"), "--compare",
                           str(made["dyn"]), *DYNAMICS])  # made["dyn"]: mechprobe dynamics --model LM --out DIR
    assert code == 0, stderr


def _shortened(key: str) -> Callable[[object], object]:
    """``summary.json`` / ``order_series.json`` with its steps, its tokens or every curve one value short."""
    def edit(document: object) -> object:
        assert isinstance(document, dict)
        if key == "curves":
            return {**document, "curves": {name: values[:-1] for name, values in document["curves"].items()}}
        return {**document, key: document[key][:-1]}
    return edit


@pytest.mark.parametrize("key", ["steps", "tokens", "curves"])
def test_a_compared_run_whose_curves_and_steps_disagree_is_refused_before_measuring(made, tmp_path, key):
    """``dynamics --compare DIR`` whose summary.json (or a toy's order_series.json) holds a curve, the tokens seen or
    the steps one value short passed the reader: the series was measured, its summary and figure written, then
    drawing the comparison failed with a ValueError traceback (steps emptied: an IndexError). Refused now in one
    line naming the file, before any checkpoint is measured."""
    from analyses.curve_series import SERIES_FILE, CurveSeries, save_curve_series

    dyn = shutil.copytree(made["dyn"], tmp_path / "dyn")
    _edit(_shortened(key))(dyn / "summary.json")
    toy = tmp_path / "toy"
    toy.mkdir()
    save_curve_series(CurveSeries("topic toy", (0, 10, 20), {"value_displacement": [0.0, 5.0, 6.0]}, {}), toy)
    folders = [dyn / "summary.json"]
    if key != "tokens":  # a toy's series has no tokens
        _edit(_shortened(key))(toy / SERIES_FILE)
        folders.append(toy / SERIES_FILE)
    for damaged in folders:
        code, _, stderr = run(["dynamics", "--model", str(made["lm2"]), "--out", str(tmp_path / "new"),
                               "--compare", str(damaged.parent), *DYNAMICS])
        assert_one_line_naming(code, stderr, damaged)
        assert "values for its" in stderr and not (tmp_path / "new").exists()


TOY = ["toy", "induction", "--preset", "standard", "--set", "data.seq_len=20", "--set", "standard_train.n_steps=12",
       "--set", "eval_every=6", "--set", "n_val=16", "--set", "probe_sequences=16", "--set", "standard.d_model=16",
       "--set", "eval_seq_lens=(10,)", "--set", "eval_alphas=(1.0,)", "--set", "n_train=32", "--set",
       "series_checkpoints=3", "--no-progress"]


@pytest.fixture(scope="module")
def toy_series(tmp_path_factory) -> Path:
    """The induction toy's OUT/series of a tiny standard-model run (steps 0, 10, 12, with their training states)."""
    out = tmp_path_factory.mktemp("toy") / "run"
    assert main([*TOY, "--out", str(out)]) == 0
    return out / "series"


def check_toy_series(series: Path, where: Path, file: str, damage: str, command: list[str]) -> None:
    """``command`` of a damaged toy series: refused before any measuring in one line naming the file and the toy's
    fix (never train-lm's), or measured when it reads no such file (a deleted ``states/threads.json``: a re-run then
    takes this process's thread count)."""
    folder, damaged = damaged_copy(series, where, file, damage)
    before = snapshot(where)
    out = where / "new"
    with pytest.MonkeyPatch.context() as patch:
        for target in ("analyses.dynamics.run.measure_series", "analyses.report.build.run_report",
                       "analyses.dynamics.refine.refine_dynamics"):
            patch.setattr(target, _measure)
        code, _, stderr = run([str(folder) if a == "@series" else str(out) if a == "@out" else a for a in command])
    assert snapshot(where) == before and not out.exists()
    if isinstance(code, str) and "Measured" in code:
        read = (*READ_BY_DYNAMICS, *(("checkpoint.json", "threads.json") if "--refine" in command else ()))
        unread = Path(file).name not in read or (damage == "deleted" and file == MANIFEST and "--refine" not in command
                                                 ) or (damage == "deleted" and Path(file).name == "threads.json")
        assert unread, f"a damaged {file} was measured"
        return
    assert_one_line_naming(code, stderr, damaged)
    assert "train-lm --" not in stderr, stderr  # never train-lm's fix for a toy's series


def toy_series_checks(series: Path, tmp_path: Path, *, every: bool) -> None:
    cases = cases_of(series)
    assert {file for file, _ in cases} >= {"series.json", "step_0/model.safetensors", "step_10/model.json"}
    cases = cases if every else sampled(cases)
    found = []
    for name, command in (("dynamics", ["dynamics", "--model", "@series", "--out", "@out", *DYNAMICS]),
                          ("refine", ["dynamics", "--model", "@series", "--out", "@out", "--refine", *DYNAMICS]),
                          ("report", ["report", "--no-toys", "--out", "@out", "--series", "@series"])):
        found += failures(lambda where, file, damage, command=command: check_toy_series(series, where, file, damage,
                                                                                        command),
                          series, cases, tmp_path / name)
    assert not found, "\n".join(found)


def test_a_sample_of_damaged_toy_series_is_refused_naming_the_file(toy_series, tmp_path):
    toy_series_checks(toy_series, tmp_path, every=False)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_every_damaged_toy_series_file_is_refused_naming_the_file(toy_series, tmp_path):
    toy_series_checks(toy_series, tmp_path, every=True)


@pytest.mark.parametrize("command", [["dynamics", "--model", "@lm", *DYNAMICS], ["report", "--no-toys", "--series",
                                                                                  "@lm"]])
@pytest.mark.parametrize("inside", ["dyn", "a/b", "."])
def test_an_out_inside_the_series_it_reads_is_refused(made, command, inside):
    """The measurement is kept apart from the train-lm run it reads (which train-lm resumes and --refine rewrites):
    an ``--out`` in the series folder, or the folder itself, is refused before any work, nothing written."""
    before = snapshot(made["lm"])
    out = made["lm"] / inside
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("analyses.dynamics.run.measure_series", _measure)
        patch.setattr("analyses.report.build.run_report", _measure)
        code, _, stderr = run([str(made["lm"]) if a == "@lm" else a for a in command] + ["--out", str(out)])
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert "lies inside" in stderr or "holds other files" in stderr, stderr
    assert snapshot(made["lm"]) == before


@pytest.mark.parametrize("dtype", [["--dtype", "float16"], ["--set", "dtype=bfloat16"]])
@pytest.mark.parametrize("series", [True, False])
def test_a_dtype_with_no_pretrained_model_to_load_in_it_is_refused(made, tmp_path, dtype, series):
    """``report --set models=[] --series LM --dtype float16`` wrote a report recording float16, though the train-lm
    series (and the toys) ran in float32: a dtype nothing uses is refused before any work, naming its flag."""
    command = ["report", "--fast", "--out", str(tmp_path / "r"), *dtype,
               *(["--no-toys", "--series", str(made["lm"])] if series else [])]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("analyses.report.build.run_report", _measure)
        code, _, stderr = run([*command, "--set", "models=[]"])
        assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
        named = "--dtype float16" if "--dtype" in dtype else "the setting dtype"
        assert stderr.startswith(f"mechprobe: error: {named}"), stderr
        assert ("series " + str(made["lm"]) if series else "the toys run in float32") in stderr, stderr
        assert not (tmp_path / "r").exists()
        code, _, stderr = run([*command, "--model", "minilm-l6"])  # a model to load in it: the dtype is used
        assert isinstance(code, str) and "Measured" in code, stderr


# -- a step of the series damaged as a whole (emptied, a file in its place, a link that loops) or its weights (NaN,
#    other shapes): found before the first step is measured, not when its turn came after the steps before it ------


def _replaced(make: Callable[[Path], None]) -> Damage:
    def damage(path: Path) -> None:
        shutil.rmtree(path)
        make(path)
    return damage


def _nan_weights(path: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    save_file({name: torch.full_like(w, float("nan")) for name, w in load_file(str(path)).items()}, str(path))


STEP_DAMAGES: dict[str, Damage] = {
    "emptied": _replaced(lambda path: path.mkdir()), "a_file": _replaced(lambda path: path.write_text("x")),
    "a_link_that_loops": _replaced(lambda path: path.symlink_to(path.name)),
}
WEIGHT_DAMAGES: dict[str, Damage] = {"nan": _nan_weights}


def step_cases(series: Path) -> list[tuple[str, str, Damage]]:
    """Every step of ``series`` x STEP_DAMAGES, and every step's weights x WEIGHT_DAMAGES and other shapes."""
    from tests.analyses.test_checkpoint_damage import _other_shapes

    steps = [Path(c.spec).relative_to(series) for c in checkpoint_series(series).checkpoints]
    cases = [(str(step), name, damage) for step in steps for name, damage in STEP_DAMAGES.items()]
    return cases + [(str(step / "model.safetensors"), name, damage) for step in steps
                    for name, damage in {**WEIGHT_DAMAGES, "other_shapes": _other_shapes}.items()]


MEASURING = {"dynamics": ["dynamics", "--model", "@lm", "--out", "@out", *DYNAMICS],
             "report": ["report", "--no-toys", "--out", "@out", "--series", "@lm"]}


def check_step_refused(made: dict[str, Path], where: Path, file: str, damage: Damage, command: str) -> None:
    folder = where / "lm"
    shutil.copytree(made["lm"], folder)
    damage(folder / file)
    before, out = snapshot(folder), where / "new"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("analyses.dynamics.run.measure_series", _measure)
        patch.setattr("analyses.report.build.run_report", _measure)
        code, _, stderr = run([str(folder) if a == "@lm" else str(out) if a == "@out" else a
                               for a in MEASURING[command]])
    assert snapshot(folder) == before and not out.exists()
    assert_one_line_naming(code, stderr, folder / file)
    assert "mechprobe toy" not in stderr, stderr


def _step_failures(made: dict[str, Path], tmp_path: Path, cases: list[tuple[str, str, Damage]]) -> list[str]:
    found = []
    for command in MEASURING:
        for i, (file, name, damage) in enumerate(cases):
            try:
                check_step_refused(made, tmp_path / f"{command}{i}", file, damage, command)
            except Exception as error:  # an assertion, or the check's own reading of the folder
                found.append(f"{command} {file} {name}: {str(error).strip().splitlines()[0][:300]}")
    return found


def test_a_damaged_later_step_is_refused_before_the_first_is_measured(made, tmp_path):
    """The last step emptied, a file or a link that loops in its place, or its weights NaN (dynamics and report
    --series measured the steps before it first; a loop was a RuntimeError traceback)."""
    found = _step_failures(made, tmp_path, [case for case in step_cases(made["lm"]) if case[0].startswith("step_12")])
    assert not found, "\n".join(found)


@pytest.mark.slow
@pytest.mark.exhaustive
def test_every_damaged_step_is_refused_before_any_is_measured(made, tmp_path):
    found = _step_failures(made, tmp_path, step_cases(made["lm"]))
    assert not found, "\n".join(found)


@pytest.mark.parametrize("damage", ["deleted", "a_folder", "a_link_that_loops"])
def test_a_toy_folder_without_its_order_curves_is_named_as_one(made, tmp_path, damage):
    """dynamics --compare TOY whose order_series.json was gone (or a folder, or a loop) was told it is 'not the
    --out folder of a mechprobe dynamics run', as if a toy's folder were not taken."""
    toy = tmp_path / "toy"
    shutil.copytree(made["lm"] / "step_0", toy)  # model.json and weights: a toy's folder
    {"deleted": lambda p: None, "a_folder": lambda p: p.mkdir(), "a_link_that_loops": lambda p: p.symlink_to(p.name)
     }[damage](toy / "order_series.json")
    code, _, stderr = run(["dynamics", "--model", str(made["lm2"]), "--out", str(tmp_path / "new"), "--compare",
                           str(toy), *DYNAMICS])
    assert code == 2 and len(stderr.strip().splitlines()) == 1, stderr
    assert f"--compare: {toy} is a toy's --out folder without a readable order_series.json" in stderr, stderr
    assert not (tmp_path / "new").exists()
