"""Fuzz test of the command line: the saved, seeded corpus of tests/analyses/cli_fuzz.py, each case run on a tiny
random-weight model (tests/random_checkpoints.py) in a fresh sandbox folder.

Every run exits 0 or 2 and prints no traceback; a refusal is one ``mechprobe...error:`` line (naming the flag when
the refused value has one) and leaves every file as it was (no ``--out`` folder, nothing overwritten); a run that
succeeds writes only under its ``--out`` (or ``--json``). Values labelled ``bad`` must be refused and cases of only
``ok`` values must succeed. Rerun one case with ``pytest tests/analyses/test_cli_fuzz.py -k heads-03``.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import traceback
from pathlib import Path

import pytest

from analyses.cli import main
from tests.analyses.cli_fuzz import generate, resolve
from tests.random_checkpoints import make_random_checkpoint

LIMIT_S = 60  # the longest accepted case (a tiny toy or linear probe) takes about 10 s
CORPUS = Path(__file__).with_name("cli_fuzz_corpus.json")
CASES = json.loads(CORPUS.read_text(encoding="utf-8"))
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_random_checkpoint("gpt_neox", tmp_path_factory.mktemp("fuzz") / "neox", seed=0)


def make_sandbox(folder: Path) -> None:
    """The paths the placeholders name: a file, a folder with a file of the user's, an empty folder, files of the
    user's in the working folder, and a report folder whose results/report.json is damaged."""
    folder.mkdir()
    (folder / "file").write_text("keep", encoding="utf-8")
    (folder / "full").mkdir()
    (folder / "full" / "notes.txt").write_text("keep", encoding="utf-8")
    (folder / "empty").mkdir()
    for name in ("summary.json", "ablation.json"):
        (folder / name).write_text("keep", encoding="utf-8")
    (folder / "damaged_report" / "results").mkdir(parents=True)
    (folder / "damaged_report" / "results" / "report.json").write_text("{broken", encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``folder``, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


class RanOver(Exception):
    """A run that took more than LIMIT_S (a hang: e.g. a loop over a huge count)."""


def _ran_over(signum, frame):
    raise RanOver(f"ran over {LIMIT_S} s")


def run(argv: list[str]) -> tuple[int | str, str, str]:
    """``mechprobe ARGV`` in this process: (exit code or the uncaught exception's traceback, stdout, stderr);
    stopped after LIMIT_S seconds."""
    out, err = io.StringIO(), io.StringIO()
    before = signal.signal(signal.SIGALRM, _ran_over)
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int | str = main(argv)
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else 1
        except Exception:  # what the fuzz test looks for: a traceback instead of one line (or a hang)
            code = traceback.format_exc()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, before)
    return code, out.getvalue(), err.getvalue()


def problems(case: dict, code: int | str, stdout: str, stderr: str, before: dict, after: dict,
             written: list[Path], sandbox: Path) -> list[str]:
    """What the run did wrong (empty when it behaved)."""
    found = []
    if isinstance(code, str):
        return [f"traceback: {code.strip().splitlines()[-1]}\n{code}"]
    if code not in (0, 2):
        found.append(f"exit code {code}")
    if "Traceback" in stdout + stderr:
        found.append("printed a traceback")
    if case["expect"] == "refuse" and code != 2:
        found.append(f"accepted a bad value (exit {code})")
    if case["expect"] == "accept" and code != 0:
        found.append(f"refused good values: {stderr.strip()}")
    if code == 2:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        if not lines or not lines[-1].startswith("mechprobe") or "error" not in lines[-1]:
            found.append(f"no one-line error: {stderr!r}")
        elif case["names"] and not any(name in lines[-1] for name in case["names"]):
            found.append(f"error does not name {case['names']}: {lines[-1]}")
        if after != before:
            found.append(f"a refusal changed files: {sorted(set(after.items()) ^ set(before.items()))[:5]}")
    changed = [name for name, content in before.items() if after.get(name, b"gone") != content]
    if changed:
        found.append(f"changed or removed files of the user's: {changed}")
    outside = [name for name in set(after) - set(before)  # the output, or a parent folder made for it
               if not any((sandbox / name).resolve().is_relative_to(w.resolve())
                          or w.resolve().is_relative_to((sandbox / name).resolve()) for w in written)]
    if code == 0 and outside:
        found.append(f"wrote outside --out: {sorted(outside)[:5]}")
    return found


def test_the_saved_corpus_is_the_generators():
    assert generate() == CASES, "regenerate: python -m tests.analyses.cli_fuzz > tests/analyses/cli_fuzz_corpus.json"


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_command_line_exits_0_or_2_in_one_line_and_leaves_no_partial_output(case, tiny_model, tmp_path,
                                                                                    monkeypatch):
    sandbox = tmp_path / "sandbox"
    make_sandbox(sandbox)
    monkeypatch.chdir(sandbox)
    argv = [resolve(arg, sandbox, tiny_model) for arg in case["argv"]]
    written = [Path(argv[i + 1]) for i, arg in enumerate(argv[:-1]) if arg in ("--out", "--json")]
    before = snapshot(sandbox)
    code, stdout, stderr = run(argv)
    found = problems(case, code, stdout, stderr, before, snapshot(sandbox), written, sandbox)
    assert not found, f"{case['id']}: mechprobe {' '.join(map(repr, argv))}\n" + "\n".join(found)
