"""Fuzz tests of the command line and the benchmark scripts (tests/analyses/cli_fuzz.py generates the cases).

1. Generated from the parsers (every command, every benchmark script, every flag, every ``--set`` key, each given
   empty, zero, negative, huge, NaN, inf, wrong-type values, a missing path, a file for a folder, a folder for a
   file and the current folder): a fixed-seed sample in the default suite, one case per flag and setting in an
   exhaustive test (``make test-exhaustive``; the full product with ``MECHPROBE_FUZZ=full``). Each case runs in
   this process in a fresh sandbox folder (the working folder) until the program exits or reaches
   its first piece of work (:func:`stop_at_work`: a forward pass or training step, a child process, a packaged
   model or an LDA fit), which every check must come before. It must exit 0 or 2 (or reach its work) with no
   traceback, refuse in one ``PROG: error: ...`` line naming the flag (or setting) what can only be refused,
   write nothing when it refuses, never change or remove a file or folder of the user's, and write nothing outside
   its output paths (given or default). Rerun one case: ``pytest tests/analyses/test_cli_fuzz.py -k 'gpu_check'``.
2. The saved, seeded corpus of hand-written value lists (slow), each case run on a tiny
random-weight model (tests/random_checkpoints.py) in a fresh sandbox folder.

Every run exits 0 or 2 and prints no traceback; a refusal is one ``mechprobe...error:`` line (naming the flag when
the refused value has one) and leaves every file as it was (no ``--out`` folder, nothing overwritten); a run that
succeeds writes only under its ``--out`` (or ``--json``). Values labelled ``bad`` must be refused and cases of only
``ok`` values must succeed. Rerun one case with ``pytest tests/analyses/test_cli_fuzz.py -k heads-03``.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import signal
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyses.cli import main
from tests.analyses.cli_fuzz import (
    BASE_ARGS,
    FUZZ_VALUES,
    OUTPUT_FILES,
    OUTPUT_FOLDERS,
    ROOT,
    FuzzCase,
    Program,
    benchmark_module,
    cover,
    flags_it_lacks,
    generate,
    parser_cases,
    programs,
    resolve,
    sample,
    set_configs,
    value_flags,
    without_flags,
)
from tests.random_checkpoints import make_random_checkpoint

# A hang is told from a slow case by the machine's present speed, not by a fixed time: a case is stopped once it ran
# HANG_MULTIPLE times the reference loop's present time (measured when the case reaches FIRST_CHECK_S, and again at
# each later check). The longest accepted case (a tiny toy or linear probe) takes about 10 s on the quiet 2-core
# machine, where the reference loop takes 0.27-0.30 s, so the limit there is about a minute; on a machine running at
# a third of that speed (slower cores, or busy) it is about three minutes.
FIRST_CHECK_S = 60.0
HANG_MULTIPLE = 200
REFERENCE_LOOP = 3_000_000
CORPUS = Path(__file__).with_name("cli_fuzz_corpus.json")
CASES = json.loads(CORPUS.read_text(encoding="utf-8"))
pytestmark = [pytest.mark.usefixtures("one_thread")]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    return make_random_checkpoint("gpt_neox", tmp_path_factory.mktemp("fuzz") / "neox", seed=0)


# Finished outputs of the commands that write folders, as their files name them (``@report_out`` ...): given as
# another program's output folder, each must be refused before any work, never replaced by that program's output.
OTHER_OUTPUTS = {
    "report": ("summary.json", "report.md", "report.html", "results/report.json", "figures/verdicts_forest.png"),
    "dynamics": ("summary.json", "dynamics.png", "checkpoints/step_0.json"),
    "series": ("series.json", "vocab.json", "train-lm.json", "summary.json", "step_0/model.json",
               "checkpoint/checkpoint.json"),
    "toy": ("summary.json", "model.json", "model.safetensors", "history.json", "trajectory.png"),
}
OWN_OUTPUT = {"report": "report", "dynamics": "dynamics", "train-lm": "series", "toy": "toy"}


def make_sandbox(folder: Path) -> None:
    """The paths the placeholders name: a file, a folder with a file of the user's, an empty folder, files of the
    user's in the working folder, a symbolic link that loops (``loop -> loop``), a report folder whose
    results/report.json is damaged, and the finished outputs of OTHER_OUTPUTS."""
    folder.mkdir()
    (folder / "loop").symlink_to("loop")
    (folder / "file").write_text("keep", encoding="utf-8")
    (folder / "full").mkdir()
    (folder / "full" / "notes.txt").write_text("keep", encoding="utf-8")
    (folder / "empty").mkdir()
    for name in ("summary.json", "ablation.json"):
        (folder / name).write_text("keep", encoding="utf-8")
    (folder / "damaged_report" / "results").mkdir(parents=True)
    (folder / "damaged_report" / "results" / "report.json").write_text("{broken", encoding="utf-8")
    for kind, files in OTHER_OUTPUTS.items():
        for name in files:
            path = folder / f"{kind}_out" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}" if name.endswith(".json") else "keep", encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under ``folder``, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


class RanOver(Exception):
    """A run that took more than HANG_MULTIPLE times the reference loop's present time (a hang: e.g. a loop over a
    huge count)."""


def reference_seconds() -> float:
    """The present time of a fixed pure-Python loop: how fast this machine runs now, under its present load."""
    start = time.perf_counter()
    total = 0
    for i in range(REFERENCE_LOOP):
        total += i * i
    return time.perf_counter() - start


def hang_alarm(started: float):
    """A SIGALRM handler that stops a run (:class:`RanOver`) once it ran HANG_MULTIPLE reference loops of the
    machine's present speed, and otherwise sets the alarm again for the rest of that time."""

    def check(signum, frame):
        elapsed, reference = time.perf_counter() - started, reference_seconds()
        allowed = HANG_MULTIPLE * reference
        if elapsed < allowed:
            signal.setitimer(signal.ITIMER_REAL, max(allowed - elapsed, 1.0))
            return
        raise RanOver(f"ran over {elapsed:.0f} s, {HANG_MULTIPLE} times the reference loop's present "
                      f"{reference:.2f} s")

    return check


def run(argv: list[str]) -> tuple[int | str, str, str]:
    """``mechprobe ARGV`` in this process: (exit code or the uncaught exception's traceback, stdout, stderr);
    stopped as a hang by :func:`hang_alarm`."""
    out, err = io.StringIO(), io.StringIO()
    before = signal.signal(signal.SIGALRM, hang_alarm(time.perf_counter()))
    signal.setitimer(signal.ITIMER_REAL, FIRST_CHECK_S)
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
        if lines and (unknown := flags_it_lacks(case["argv"][0], lines[-1], case["argv"])):
            found.append(f"the error names {', '.join(unknown)}, which {case['argv'][0]} does not take: {lines[-1]}")
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


def _sleeping_main(seconds: float):
    def fake_main(argv: list[str]) -> int:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            time.sleep(0.01)
        return 0

    return fake_main


def test_a_hang_is_stopped_once_it_ran_the_multiple_of_the_reference(monkeypatch):
    monkeypatch.setitem(globals(), "main", _sleeping_main(30.0))  # a hang, ended by the alarm long before
    monkeypatch.setitem(globals(), "reference_seconds", lambda: 0.05)
    monkeypatch.setitem(globals(), "FIRST_CHECK_S", 0.1)
    monkeypatch.setitem(globals(), "HANG_MULTIPLE", 4)  # stopped at the first check after 0.2 s
    handler, start = signal.getsignal(signal.SIGALRM), time.perf_counter()
    code, _, _ = run([])
    assert isinstance(code, str) and "RanOver: ran over" in code and time.perf_counter() - start < 5
    assert signal.getsignal(signal.SIGALRM) == handler and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_a_run_past_the_first_check_on_a_slow_machine_ends_on_its_own(monkeypatch):
    """What a fixed limit got wrong (issue 48: two toy cases ran over 60 s on a busy machine): the limit grows with
    the reference loop's present time."""
    monkeypatch.setitem(globals(), "main", _sleeping_main(0.6))
    monkeypatch.setitem(globals(), "reference_seconds", lambda: 0.2)  # a slow machine: 10 x 0.2 s allowed
    monkeypatch.setitem(globals(), "FIRST_CHECK_S", 0.1)
    monkeypatch.setitem(globals(), "HANG_MULTIPLE", 10)
    assert run([]) == (0, "", "")


@pytest.mark.slow
def test_the_saved_corpus_is_the_generators():
    assert generate() == CASES, "regenerate: python -m tests.analyses.cli_fuzz > tests/analyses/cli_fuzz_corpus.json"


@pytest.mark.slow
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


# ---------------------------------------------------------------------------------------------------------------
# 1. Generated from the parsers.
# ---------------------------------------------------------------------------------------------------------------

PARSER_CASES = parser_cases()
SAMPLED = sample(PARSER_CASES)
PROGRAMS = {program.name: program for program in programs()}


class WorkStarted(BaseException):
    """A program passed its checks and reached its first piece of work (where the fuzz test stops it)."""


@functools.cache
def import_every_module() -> None:
    """Import every module of the packages once, before any patch: a module first imported under
    :func:`stop_at_work` would bind its patched ``load_model`` for good and fail the tests after this file."""
    import importlib
    import pkgutil

    for package in ("mechprobe", "probes", "toymodels", "analyses"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, prefix=f"{package}."):
            importlib.import_module(module.name)


@contextlib.contextmanager
def stop_at_work() -> Iterator[None]:
    """Raise :class:`WorkStarted` at the first piece of work: any forward pass (measuring or training), any child
    process but a read-only ``git rev-parse``, loading a packaged model, or fitting LDA. Every check of a command's
    input comes before these, so an accepted case costs its checks only."""
    import subprocess
    from unittest import mock

    import gensim.models
    import torch

    import probes
    import probes.core.loading as loading

    import_every_module()
    real_load, real_popen = loading.load_model, subprocess.Popen.__init__

    def work(*args, **kwargs):
        raise WorkStarted

    def load_model(spec, *args, **kwargs):
        if isinstance(spec, str) and spec in loading.PACKAGED_MODELS:
            raise WorkStarted
        return real_load(spec, *args, **kwargs)

    def popen(self, command, *args, **kwargs):
        if list(command[:2]) != ["git", "rev-parse"]:
            raise WorkStarted
        real_popen(self, command, *args, **kwargs)

    with mock.patch.object(torch.nn.Module, "__call__", work), mock.patch.object(subprocess.Popen, "__init__", popen), \
            mock.patch.object(loading, "load_model", load_model), mock.patch.object(probes, "load_model", load_model), \
            mock.patch.object(gensim.models.LdaModel, "__init__", work):
        yield


def run_program(program: Program, argv: list[str]) -> tuple[int | str, str, str]:
    """``program ARGV`` in this process until it exits or reaches its work: (exit code, ``"work"``, or the uncaught
    exception's traceback; stdout; stderr). The process state a program may change (environment, torch threads,
    signal handlers, sys.argv) is restored."""
    import sys

    import torch

    out, err = io.StringIO(), io.StringIO()
    environ, threads = dict(os.environ), torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    saved_argv = sys.argv
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), stop_at_work():
        try:
            if program.prefix:
                code: int | str = main([*program.prefix, *argv[len(program.prefix):]])
            else:
                sys.argv = [program.name, *argv]
                returned = benchmark_module(ROOT / program.name).main()
                code = returned if isinstance(returned, int) else 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:  # SystemExit("message"): Python prints the message and exits 1
                print(exit_.code, file=sys.stderr)
                code = 1
        except WorkStarted:
            code = "work"
        except Exception:
            code = traceback.format_exc()
        finally:
            sys.argv = saved_argv
            os.environ.clear()
            os.environ.update(environ)
            torch.set_num_threads(threads)
            for number, handler in handlers.items():
                signal.signal(number, handler)
    return code, out.getvalue(), err.getvalue()


def output_paths(program: Program, argv: list[str], sandbox: Path) -> list[Path]:
    """Where ``program`` may write: the values (given, else default) of its output flags."""
    paths = []
    for action in value_flags(program.parser):
        if action.dest not in OUTPUT_FOLDERS | OUTPUT_FILES or not action.option_strings:
            continue
        given = [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg in action.option_strings]
        for value in given or ([str(action.default)] if action.default not in (None, "") else []):
            if value.strip():
                paths.append(Path(os.path.realpath(sandbox / value)))  # a link that loops too (no RuntimeError)
    return paths


def parser_case_problems(case: FuzzCase, code: int | str, stderr: str, before: dict, after: dict,
                         outputs: list[Path], sandbox: Path) -> list[str]:
    """What the run did wrong (empty when it behaved)."""
    if isinstance(code, str) and code != "work":
        return [f"traceback: {code.strip().splitlines()[-1]}\n{code}"]
    found = []
    if code not in (0, 2, "work"):
        found.append(f"exit code {code}: {stderr.strip()[-500:]}")
    if "Traceback" in stderr:
        found.append("printed a traceback")
    if case.expect == "refuse" and code != 2:
        found.append(f"accepted {case.flag} {case.value} ({FUZZ_VALUES[case.value]!r}): "
                     + ("reached its work" if code == "work" else f"exit {code}"))
    if code == 2:
        lines = [line for line in stderr.strip().splitlines() if line.strip()]
        if not lines or ": error: " not in lines[-1] or any(line.startswith("usage:") for line in lines):
            found.append(f"not one 'PROG: error: ...' line: {stderr.strip()[-600:]!r}")
        elif case.expect == "refuse" and not any(name in lines[-1] for name in case.names):
            found.append(f"the error does not name {' or '.join(case.names)}: {lines[-1]}")
        if lines and (unknown := flags_it_lacks(case.program, lines[-1], case.argv)):
            found.append(f"the error names {', '.join(unknown)}, which {case.program} does not take: {lines[-1]}")
        if after != before:
            found.append(f"a refusal changed files: {sorted(set(after) ^ set(before))[:5]}")
    changed = [name for name, content in before.items() if after.get(name, b"gone") != content]
    if changed:
        found.append(f"changed or removed files of the user's: {sorted(changed)[:5]}")
    outside = [name for name in set(after) - set(before)
               if not any((sandbox / name).resolve().is_relative_to(p) or p.is_relative_to((sandbox / name).resolve())
                          for p in outputs)]
    if outside:
        found.append(f"wrote outside its output paths: {sorted(outside)[:5]}")
    return found


@pytest.fixture(scope="module")
def tiny_series(tiny_model, tmp_path_factory) -> Path:
    """A series of two checkpoints of one run (the tiny model at steps 0 and 10)."""
    import shutil

    folder = tmp_path_factory.mktemp("fuzz_series") / "series"
    for step in (0, 10):
        shutil.copytree(tiny_model, folder / f"step_{step}")
    return folder


def check_parser_case(case: FuzzCase, tiny_model: Path, tiny_series: Path, tmp_path: Path, monkeypatch) -> None:
    sandbox = tmp_path / "sandbox"
    make_sandbox(sandbox)
    monkeypatch.chdir(sandbox)
    argv = [str(tiny_series) if arg == "@series" else resolve(arg, sandbox, tiny_model) for arg in case.argv]
    program = PROGRAMS[case.program]
    outputs = output_paths(program, argv, sandbox)
    before = snapshot(sandbox)
    code, _, stderr = run_program(program, argv)
    found = parser_case_problems(case, code, stderr, before, snapshot(sandbox), outputs, sandbox)
    assert not found, " | ".join(" ".join(f.split()) for f in found)[:400] + \
        f"\n{case.id}: {case.program} {' '.join(map(repr, argv))}\n" + "\n".join(found)


def test_every_program_with_a_set_flag_names_its_configs():
    """A new command with ``--set`` has its settings fuzzed: set_configs must know its configs."""
    for program in PROGRAMS.values():
        if any(action.dest == "overrides" for action in program.parser._actions):
            assert set_configs(program.name), f"{program.name} has --set: add its configs to cli_fuzz.set_configs"


@pytest.mark.parametrize("case", SAMPLED, ids=[c.id for c in SAMPLED])
def test_a_sample_of_every_flag_and_setting_exits_0_or_2_and_loses_nothing(case, tiny_model, tiny_series, tmp_path,
                                                                        monkeypatch):
    check_parser_case(case, tiny_model, tiny_series, tmp_path, monkeypatch)


_SAMPLED_IDS = {c.id for c in SAMPLED}
SLOW = [c for c in (PARSER_CASES if os.environ.get("MECHPROBE_FUZZ") == "full" else cover(PARSER_CASES))
        if c.id not in _SAMPLED_IDS]


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("case", SLOW, ids=[c.id for c in SLOW])
def test_every_flag_and_setting_exits_0_or_2_and_loses_nothing(case, tiny_model, tiny_series, tmp_path, monkeypatch):
    check_parser_case(case, tiny_model, tiny_series, tmp_path, monkeypatch)


# ---------------------------------------------------------------------------------------------------------------
# 2. Existing folders given as output folders, generated from the parsers: every program's every output flag given
#    a symbolic link that loops, and every output-folder flag an empty folder (which a program may accept and write
#    into), a folder of the user's (which it must refuse or leave as it is) and each other command's finished output
#    (a report, a dynamics run, a train-lm series, a toy run: refused before any work; ``toy --out REPORT`` once
#    trained, then replaced the report whole). A program that deletes or empties its output folder before its work
#    (a planted ``shutil.rmtree(out)`` after the entry check, or before it) fails here.
# ---------------------------------------------------------------------------------------------------------------


def existing_folder_cases() -> list[FuzzCase]:
    cases = []
    for program in PROGRAMS.values():
        base = program.prefix + BASE_ARGS.get(program.name, ())
        for action in value_flags(program.parser):
            if action.dest not in OUTPUT_FOLDERS | OUTPUT_FILES or not action.option_strings:
                continue
            flag = action.option_strings[0]
            argv = [*without_flags(base, action.option_strings)]
            # a symbolic link that loops: refused in one line naming the flag (Path.resolve raised RuntimeError)
            cases.append(FuzzCase(f"{program.name}:{flag}=@loop", program.name, (*argv, flag, "@loop"), flag,
                                  "missing_path", "refuse", tuple(action.option_strings), output=True))
            if action.dest not in OUTPUT_FOLDERS:
                continue
            for where in ("empty", "full"):
                cases.append(FuzzCase(f"{program.name}:{flag}=@{where}", program.name, (*argv, flag, f"@{where}"),
                                      flag, "folder_for_file" if where == "full" else "empty", "any",
                                      tuple(action.option_strings), output=True))
            for kind in sorted(OTHER_OUTPUTS.keys() - {OWN_OUTPUT.get(program.name)}):
                cases.append(FuzzCase(f"{program.name}:{flag}=@{kind}_out", program.name,
                                      (*argv, flag, f"@{kind}_out"), flag, "folder_for_file", "refuse",
                                      tuple(action.option_strings), output=True))
    return cases


EXISTING_FOLDER_CASES = existing_folder_cases()


def test_every_program_with_an_output_folder_is_given_existing_folders():
    programs_with_out = {case.program for case in EXISTING_FOLDER_CASES}
    assert {"report", "toy", "dynamics", "train-lm", "circuit", "benchmarks/gpu_check.py"} <= programs_with_out


@pytest.mark.parametrize("case", EXISTING_FOLDER_CASES, ids=[c.id for c in EXISTING_FOLDER_CASES])
def test_an_existing_output_folder_is_kept_as_it_was(case, tiny_model, tiny_series, tmp_path, monkeypatch):
    check_parser_case(case, tiny_model, tiny_series, tmp_path, monkeypatch)
