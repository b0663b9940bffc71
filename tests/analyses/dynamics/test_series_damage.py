"""Damaged series folders, generated: every file of a ``train-lm`` folder and of a ``dynamics`` folder made here is
damaged in turn in every way its kind allows (JSON: truncated, not UTF-8, deleted, a list for the object, a key
removed, and in ``series.json`` two steps swapped; binary: truncated, deleted, garbage), so a new file is fuzzed
without anyone writing a case. ``train-lm`` run again on its damaged folder must resume it whole (exit 0, every
saved step loading back) or refuse in one line naming the damaged file (exit 2, every file as it was); ``dynamics
--compare`` of a damaged dynamics folder must refuse naming the file or accept it (a file it does not read). Never a
traceback. The default suite runs a fixed-seed sample of the cases; the slow suite (``make test``) all of them.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from analyses.cli import main
from analyses.toy_model_loader import load_any_model
from probes.core.checkpoint_series import checkpoint_series
from tests.analyses.test_cli_fuzz import run, snapshot
from tests.analyses.test_saved_folder_damage import BINARY_DAMAGES, JSON_DAMAGES, Damage, _edit

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--steps", "12", "--set", "vocab=10", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=8",
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
    if path.suffix in (".safetensors", ".pt"):
        return BINARY_DAMAGES
    return {"deleted": BINARY_DAMAGES["deleted"], "truncated": BINARY_DAMAGES["truncated"]}


def cases_of(folder: Path) -> list[tuple[str, str]]:
    """Every (file, damage) of ``folder``, the files named relative to it."""
    return [(str(path.relative_to(folder)), name) for path in sorted(folder.rglob("*")) if path.is_file()
            for name in damages_of(path)]


def sampled(cases: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return sorted(random.Random(45).sample(cases, min(SAMPLE, len(cases))))


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """A tiny train-lm folder and its dynamics folder."""
    root = tmp_path_factory.mktemp("series")
    corpus = root / "text.txt"
    corpus.write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(200)))
    assert main(["train-lm", "--corpus", str(corpus), "--out", str(root / "lm"), *TINY]) == 0
    assert main(["dynamics", "--model", str(root / "lm"), "--out", str(root / "dyn"), *DYNAMICS]) == 0
    return {"corpus": corpus, "lm": root / "lm", "dyn": root / "dyn"}


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


def check_compare(made: dict[str, Path], where: Path, file: str, damage: str,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    folder, damaged = damaged_copy(made["dyn"], where, file, damage)
    before = snapshot(folder)

    class Measured(Exception):
        """The compared folder passed its check: the measuring would start here."""

    def measure(*args: object, **kwargs: object) -> None:
        raise Measured

    monkeypatch.setattr("analyses.dynamics.run.run_dynamics", measure)
    out = where / "new"
    code, _, stderr = run(["dynamics", "--model", str(made["lm"]), "--out", str(out), "--compare", str(folder),
                           *DYNAMICS])
    assert snapshot(folder) == before
    if isinstance(code, str) and "Measured" in code:
        assert file != "summary.json", "a damaged summary.json was drawn as a compared series"
        return
    assert_one_line_naming(code, stderr, damaged)
    assert not out.exists()


def failures(check: Check, source: Path, cases: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    """Each case checked in a folder of its own; what went wrong, one line per case."""
    found = []
    for i, (file, damage) in enumerate(cases):
        try:
            check(tmp_path / f"case{i}", file, damage)
        except Exception as error:  # an assertion, or the check's own reading of the folder
            text = str(error).strip().splitlines()
            found.append(f"{source.name}/{file} {damage}: {type(error).__name__}: {text[0] if text else ''}")
    return found


Check = Callable[[Path, str, str], None]


def run_checks(made: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, every: bool) -> None:
    lm_cases, dyn_cases = cases_of(made["lm"]), cases_of(made["dyn"])
    assert {file for file, _ in lm_cases} >= {"train-lm.json", "series.json", "step_0/model.safetensors",
                                              "checkpoint/checkpoint.json"}
    assert {file for file, _ in dyn_cases} >= {"summary.json", "dynamics.png"}
    if not every:
        lm_cases, dyn_cases = sampled(lm_cases), sampled(dyn_cases)
    found = failures(lambda where, file, damage: check_train_lm_rerun(made, where, file, damage), made["lm"],
                     lm_cases, tmp_path)
    found += failures(lambda where, file, damage: check_compare(made, where, file, damage, monkeypatch), made["dyn"],
                      dyn_cases, tmp_path)
    assert not found, "\n".join(found)


def test_a_sample_of_damaged_series_folders_is_resumed_or_refused_naming_the_file(made, tmp_path, monkeypatch):
    run_checks(made, tmp_path, monkeypatch, every=False)


@pytest.mark.slow
def test_every_damaged_series_file_is_resumed_or_refused_naming_the_file(made, tmp_path, monkeypatch):
    run_checks(made, tmp_path, monkeypatch, every=True)
