"""A command never measures or draws one checkpoint series twice: ``dynamics --compare A --compare A``, a
``--compare`` that is the run's own ``--out`` or the series ``--model`` measures, and ``report --series X --series
X`` are refused before any work, in one line naming both flags, whatever the spelling of the same folder (a trailing
slash, relative and absolute, a symlink) or hub series (the revisions in another order)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from analyses.dynamics.cli_commands import compared_series as _REAL_COMPARED
from tests.analyses.test_cli_fuzz import run, snapshot
from tests.random_checkpoints import make_random_checkpoint


class Worked(Exception):
    """The command got past its checks: the work would start here."""


def _work(*args: object, **kwargs: object) -> None:
    raise Worked


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny random-weight checkpoint folder, copied as each step (every step is checked before any is measured)."""
    return make_random_checkpoint("llama", tmp_path_factory.mktemp("checkpoint") / "llama")


@pytest.fixture
def place(tmp_path, monkeypatch, checkpoint) -> Path:
    """A working folder holding two series folders (``lm``, ``lm2``: two step folders each), two dynamics folders
    and a symlink to the first; the compared folders are not read, and the measuring and the report stop before any
    work."""
    for series in ("lm", "lm2"):
        for step in (0, 10):
            shutil.copytree(checkpoint, tmp_path / series / f"step_{step}")
    for name in ("dyn", "other"):
        (tmp_path / name / "checkpoints").mkdir(parents=True)
    (tmp_path / "link").symlink_to(tmp_path / "dyn")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("analyses.dynamics.cli_commands.compared_series", lambda folder, model: None)
    monkeypatch.setattr("analyses.dynamics.run.run_dynamics", _work)
    monkeypatch.setattr("analyses.report.build.run_report", _work)
    return tmp_path


def _refused(place: Path, argv: list[str], *named: str) -> None:
    before = snapshot(place)
    code, _, stderr = run(argv)
    assert not isinstance(code, str), code
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("mechprobe: error:"), stderr
    assert all(name in lines[0] for name in named), lines[0]
    assert snapshot(place) == before


def _same(place: Path, folder: str) -> list[str]:
    """``folder`` spelled four ways."""
    return [f"{folder}/", str(place / folder), f"./{folder}", str(place / "link") if folder == "dyn" else folder]


@pytest.mark.parametrize("spelling", range(4))
def test_a_folder_compared_twice_is_refused(place, spelling):
    again = _same(place, "dyn")[spelling]
    _refused(place, ["dynamics", "--model", "lm", "--out", "new", "--compare", "dyn", "--compare", again],
             f"--compare {again}", "--compare dyn", "once")


@pytest.mark.parametrize("spelling", range(3))
def test_the_runs_own_out_given_as_compare_is_refused(place, spelling):
    _refused(place, ["dynamics", "--model", "lm", "--out", "dyn", "--compare", _same(place, "dyn")[spelling]],
             "--compare", "--out")


def test_the_measured_series_given_as_compare_is_refused(place):
    _refused(place, ["dynamics", "--model", "lm", "--out", "new", "--compare", f"{place}/lm/"], "--compare", "--model")


@pytest.mark.parametrize("measured", ["lm", "./lm/", "{place}/lm"])
def test_a_compared_run_of_the_measured_series_is_refused(place, monkeypatch, measured):
    # dyn's summary says it measured lm (spelt another way): lm would be drawn beside itself
    from analyses.dynamics import cli_commands

    monkeypatch.setattr(cli_commands, "compared_series", _REAL_COMPARED)
    monkeypatch.setattr("analyses.dynamics.summary.load_summary",
                        lambda folder: SimpleNamespace(series=measured.format(place=place)))
    _refused(place, ["dynamics", "--model", "lm", "--out", "new", "--compare", "dyn"], "--compare dyn",
             "--model lm", "beside itself")
    monkeypatch.setattr("analyses.dynamics.summary.load_summary", lambda folder: SimpleNamespace(series="lm2"))
    code, _, _ = run(["dynamics", "--model", "lm", "--out", "new", "--compare", "dyn"])
    assert isinstance(code, str) and "Worked" in code


def test_two_other_compared_folders_pass_the_check(place):
    code, _, _ = run(["dynamics", "--model", "lm", "--out", "new", "--compare", "dyn", "--compare", "other"])
    assert isinstance(code, str) and "Worked" in code


@pytest.mark.parametrize("spelling", range(3))
def test_a_series_folder_reported_twice_is_refused(place, spelling):
    again = _same(place, "lm")[spelling]
    _refused(place, ["report", "--no-toys", "--out", "report", "--series", "lm", "--series", again],
             f"--series {again}", "--series lm")


def test_a_hub_series_reported_twice_in_another_order_is_refused(place):
    _refused(place, ["report", "--no-toys", "--out", "report", "--series", "org/m@revisions=step1,step20",
                     "--series", "org/m@revisions=step20,step1"], "--series org/m@revisions=step1,step20")


def test_two_series_pass_the_check(place):
    code, _, _ = run(["report", "--no-toys", "--out", "report", "--series", "lm", "--series", "lm2"])
    assert isinstance(code, str) and "Worked" in code
