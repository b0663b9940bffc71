"""A seeded generator of ``mechprobe`` command lines for the fuzz test (tests/analyses/test_cli_fuzz.py).

Each case is one command line: every flag of the subcommand is left out or given a value drawn from the values
its type takes and their edges (empty, huge, negative, NaN, unicode, paths that are files, folders or missing).
Every value carries a label: ``ok`` (the command must accept it), ``bad`` (the command must refuse it: exit 2,
one line naming ``names``, nothing written) or ``any`` (exit 0 or 2). Paths are placeholders (``@model``,
``@file``, ...) that :func:`resolve` turns into paths of a fresh sandbox folder, so the saved corpus
(``cli_fuzz_corpus.json``) reruns anywhere.

Regenerate the corpus after changing the generator: ``python -m tests.analyses.cli_fuzz > tests/analyses/
cli_fuzz_corpus.json`` (the test checks that the saved corpus is what the generator gives).
"""

from __future__ import annotations

import functools
import json
import random
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SEED = 38
CASES_PER_COMMAND = {"heads": 40, "ablate": 30, "probe-linear": 14, "toy": 24, "report": 16, "render": 8}
P_BAD = 0.15  # chance that a flag given gets a value drawn from all of its values, bad ones included
HUGE = "99999999999999999999999"
INT64_PAST = str(2**63)
SEED_PAST = str(2**32)
# Placeholders of the sandbox (see tests/analyses/test_cli_fuzz.py: make_sandbox).
OUT_OK = ["@fresh", "@empty"]
OUT_BAD = ["", ".", "@file", "@file/sub", "@full", "@unwritable"]
OUT_ANY = ["@missing/run"]  # a new folder in a missing one: created by some commands, refused by report


@dataclass(frozen=True)
class Value:
    """A value drawn for one flag: the arguments it adds, its label, and what a refusal must name."""

    args: tuple[str, ...]
    label: str  # ok | bad | any
    names: str = ""  # text the error line must hold when this value is the one refused


def _ok(*args: str) -> Value:
    return Value(args, "ok")


def _bad(names: str, *args: str) -> Value:
    return Value(args, "bad", names)


def _any(*args: str) -> Value:
    return Value(args, "any")


def integer_values(flag: str, ok: list[int], low: int) -> list[Value]:
    """Values of an integer flag whose accepted range starts at ``low``: small accepted ones and the edges."""
    values = [_ok(flag, str(v)) for v in ok]
    values += [_bad(flag, flag, str(low - 1)), _bad(flag, flag, HUGE), _bad(flag, flag, INT64_PAST),
               _bad(flag, flag, "-" + HUGE), _bad(flag, flag, ""), _bad(flag, flag, "nan"), _bad(flag, flag, "1e3"),
               _bad(flag, flag, "0x10"), _bad(flag, flag, "\u0663\u2167"), _any(flag, "\u0663")]
    return values


def seed_values(flag: str = "--seed") -> list[Value]:
    """Values of a seed flag: ``0 <= seed < 2**32`` everywhere."""
    return [_ok(flag, "0"), _ok(flag, "1"), _ok(flag, str(2**32 - 1)), _bad(flag, flag, "-1"),
            _bad(flag, flag, SEED_PAST), _bad(flag, flag, HUGE), _bad(flag, flag, "-" + HUGE), _bad(flag, flag, ""),
            _bad(flag, flag, "nan"), _bad(flag, flag, "s\u00e9ed")]


def out_values(flag: str = "--out") -> list[Value]:
    return ([_ok(flag, p) for p in OUT_OK] + [_bad(flag, flag, p) for p in OUT_BAD]
            + [_any(flag, p) for p in OUT_ANY])


def model_values() -> list[Value]:
    return [_ok("--model", "@model")] * 6 + [
        _bad("", "--model", ""), _bad("", "--model", "@file"), _bad("", "--model", "@empty"),
        _bad("", "--model", "@missing/model"), _bad("", "--model", "mod\u00e8le-\u2603"),
    ]


def pattern_values() -> list[Value]:
    return [_ok("--pattern", p) for p in ("induction", "previous_token", "duplicate_token", "offset:1", "induction:2",
                                          "self", "first_token", "offset:2")] + [
        _bad("offset:1000", "--pattern", "offset:1000"), _bad("offset:-1", "--pattern", "offset:-1"),
        _bad("--pattern", "--pattern", f"offset:{HUGE}"),
        _bad("--pattern", "--pattern", f"induction:{HUGE}"), _bad("--pattern", "--pattern", ""),
        _bad("--pattern", "--pattern", "offset:"), _bad("--pattern", "--pattern", "nan"),
        _bad("--pattern", "--pattern", "ind\u00fcction"), _bad("--pattern", "--pattern", "induction:0"),
    ]


def device_values() -> list[Value]:
    return [_ok("--device", "cpu")] * 3 + [_bad("", "--device", ""), _bad("", "--device", "gpu"),
                                          _bad("", "--device", "nan"), _bad("", "--device", "\u2603")]


# The tiny model (tests/random_checkpoints.py) has 2 layers x 4 heads and a context of 512.
N_HEADS_TOTAL = 8


def heads_list_values() -> list[Value]:
    return [_ok("--heads", h) for h in ("1.0", "0.1,1.2", "0.0,0.3")] + [
        _bad("--heads", "--heads", "1.0,,1.1"), _bad("--heads", "--heads", ""), _bad("--heads", "--heads", ","),
        _bad("--heads", "--heads", "9.9"), _bad("--heads", "--heads", "-1.0"), _bad("--heads", "--heads", f"{HUGE}.0"),
        _bad("--heads", "--heads", "1.\u0663"), _bad("--heads", "--heads", "nan"),
    ]


def top_values() -> list[Value]:
    return [_ok("--top", t) for t in ("induction:2", "previous_token:1", "offset:1:3", "induction:7")] + [
        _bad("--top", "--top", f"induction:{N_HEADS_TOTAL}"), _bad("--top", "--top", "induction:100"),
        _bad("offset:1000", "--top", "offset:1000:2"), _bad("--top", "--top", "induction:0"),
        _bad("--top", "--top", f"induction:{HUGE}"), _bad("--top", "--top", f"offset:{HUGE}:2"),
        _bad("--top", "--top", ""), _bad("--top", "--top", "induction:-1"), _bad("--top", "--top", "nan:2"),
    ]


def heads_flags() -> dict[str, list[Value]]:
    return {
        "--model": model_values(),
        "--seq-len": integer_values("--seq-len", [2, 5], 2),
        "--batches": integer_values("--batches", [1, 2], 1),
        "--batch-size": integer_values("--batch-size", [1, 3], 1),
        "--seed": seed_values(),
        "--top": integer_values("--top", [1, 3], 1),
        "--json": [_ok("--json", "@fresh.json"), _bad("--json", "--json", "@empty"), _bad("--json", "--json", ""),
                   _bad("--json", "--json", "@file/x.json"), _bad("--json", "--json", "@missing/x.json")],
        "--pattern": pattern_values(),
        "--device": device_values(),
    }


def ablate_flags() -> dict[str, list[Value]]:
    return {
        "--model": model_values(),
        "--heads|--top": heads_list_values() + top_values(),
        "--method": [_ok("--method", m) for m in ("zero", "mean", "resample")] + [_bad("", "--method", "")],
        "--out": out_values(),
        "--seq-len": integer_values("--seq-len", [2, 4], 2),
        "--batches": integer_values("--batches", [2, 3], 2),
        "--batch-size": integer_values("--batch-size", [2, 3], 1),
        "--draws": integer_values("--draws", [0, 5], 0),
        "--max-rows": integer_values("--max-rows", [64, 256], 1),
        "--seed": seed_values(),
        "--device": device_values(),
    }


def linear_set_values() -> list[Value]:
    return [_ok("--set", "seed=3")] * 3 + [
        _bad("seed", "--set", "seed=-1"), _bad("seed", "--set", f"seed={HUGE}"),
        _bad("seed", "--set", f"seed={SEED_PAST}"),
        _bad("batch_size", "--set", f"batch_size={HUGE}"), _bad("n_folds", "--set", "n_folds=nan"),
        _bad("distances", "--set", "distances=1,,2"), _bad("", "--set", "\u00fcnknown=1"), _bad("", "--set", "="),
        _bad("", "--set", ""),
    ]


def linear_flags() -> dict[str, list[Value]]:
    return {
        "--model": model_values(),
        "--target": [_ok("--target", "parent")] * 3 + [_bad("", "--target", ""), _bad("", "--target", "t\u00f6pic")],
        "--out": out_values(),
        "--set": linear_set_values(),
        "--device": device_values(),
    }


TOY_TINY = ("--set", "train.n_steps=2", "--set", "standard.enabled=false", "--set", "eval_sequences=8",
            "--set", "train.batch_size=8")


def toy_flags() -> dict[str, list[Value]]:
    return {
        "experiment": [_ok("scansnap")] * 4 + [_any("topic"), _any("induction"), _bad("", ""), _bad("", "sc\u00e4n")],
        "--preset": [_ok("--preset", "fast")] * 3 + [_bad("", "--preset", ""), _bad("", "--preset", "\u2603")],
        "--out": out_values(),
        "--seeds": integer_values("--seeds", [1], 1),
        "--set": [_ok("--set", "seed=2")] * 2 + [
            _bad("seed", "--set", "seed=-1"), _bad("seed", "--set", f"seed={HUGE}"),
            _bad("seed", "--set", f"seed={SEED_PAST}"), _bad("", "--set", "train.n_steps=nan"),
            _bad("", "--set", "x=\u2603"), _bad("", "--set", "")],
        "--device": device_values(),
    }


def report_flags() -> dict[str, list[Value]]:
    return {
        "--out": out_values(),
        "--seed": seed_values(),
        "--seq-len": integer_values("--seq-len", [8], 2),
        "--batch-size": integer_values("--batch-size", [2], 1),
        "--max-batches": integer_values("--max-batches", [4], 4),
        "--toy-seeds": integer_values("--toy-seeds", [1], 1),
        "--corpus": [_ok("--corpus", "wikipedia-excerpt")] + [_bad("", "--corpus", c) for c in (
            "", "@missing/c.txt", "@empty", "\u2603")],
        "--device": device_values(),
    }


def render_flags() -> dict[str, list[Value]]:
    return {"folder": [_bad("", p) for p in ("", ".", "@file", "@empty", "@full", "@missing/r", "@damaged_report")]}


COMMANDS = {"heads": heads_flags, "ablate": ablate_flags, "probe-linear": linear_flags, "toy": toy_flags,
            "report": report_flags, "render": render_flags}
# Required flags, and those whose default would make an accepted run long (ablate's 200 null draws).
REQUIRED = {"heads": {"--model"}, "ablate": {"--model", "--heads|--top", "--out", "--draws"},
            "probe-linear": {"--model", "--target", "--out"}, "toy": {"experiment", "--out"},
            "report": {"--out"}, "render": {"folder"}}
FIXED = {"heads": ("--no-progress",), "ablate": ("--no-progress", "--no-control"),
         "probe-linear": ("--no-progress", "--set", "max_batches=1", "--set", "max_examples=10",
                          "--set", "control=false", "--set", "n_boot=10", "--set", "distances=1"),
         "toy": ("--no-progress",), "report": ("--no-progress", "--no-toys", "--fast", "--model", "@model"),
         "render": ()}
# A command whose every value is accepted runs in full: report and the topic and induction toys (minutes) always
# get one refused value, and the tiny toy and probe-linear runs (seconds) at most this many accepted runs each.
MAX_OK_RUNS = {"report": 0, "toy": 3, "probe-linear": 3, "heads": 1000, "ablate": 1000, "render": 0}


def must_refuse(command: str, chosen: dict[str, Value], ok_runs: dict[str, int]) -> bool:
    """Whether the case needs a refused value to stay within the fuzz test's time."""
    slow_toy = command == "toy" and chosen["experiment"].args != ("scansnap",)
    return slow_toy or ok_runs[command] >= MAX_OK_RUNS[command]


def draw_case(rng: random.Random, command: str, ok_runs: dict[str, int]) -> dict[str, Any]:
    """One command line of ``command``: each flag absent (optional ones, half the time) or drawn."""
    flags = COMMANDS[command]()
    chosen: dict[str, Value] = {}
    for flag, values in flags.items():
        if flag in REQUIRED[command] or rng.random() < 0.5:
            good = [v for v in values if v.label != "bad"]
            chosen[flag] = rng.choice(good if good and rng.random() > P_BAD else values)
    if all(v.label != "bad" for v in chosen.values()) and must_refuse(command, chosen, ok_runs):
        flag = rng.choice(sorted(f for f in chosen if f != "experiment"))
        chosen[flag] = rng.choice([v for v in flags[flag] if v.label == "bad"])
    if all(v.label != "bad" for v in chosen.values()):
        ok_runs[command] += 1
    return case_of(command, chosen)


def case_of(command: str, chosen: dict[str, Value]) -> dict[str, Any]:
    positional = [a for flag, v in chosen.items() if not flag.startswith("-") for a in v.args]
    options = [a for flag, v in chosen.items() if flag.startswith("-") for a in v.args]
    fixed = list(FIXED[command])
    experiment = chosen.get("experiment")
    if command == "toy" and experiment is not None and experiment.args == ("scansnap",):
        fixed += TOY_TINY
    labels = [v.label for v in chosen.values()]
    expect = "refuse" if "bad" in labels else "any" if "any" in labels else "accept"
    out = next((v.args[1] for flag, v in chosen.items() if flag == "--out"), None)
    # The error must name a refused value's flag only when no value may be refused too (an ``any`` one).
    names = sorted({v.names for v in chosen.values() if v.label == "bad"}) if "any" not in labels else []
    return {"argv": [command, *positional, *options, *fixed], "expect": expect, "out": out,
            "names": [] if "" in names else names}


def generate(seed: int = SEED) -> list[dict[str, Any]]:
    """The corpus: ``CASES_PER_COMMAND`` cases of each command, drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    ok_runs = dict.fromkeys(COMMANDS, 0)
    cases = []
    for command, n in CASES_PER_COMMAND.items():
        for i in range(n):
            cases.append({"id": f"{command}-{i:02d}", **draw_case(rng, command, ok_runs)})
    return cases


def resolve(arg: str, sandbox: Path, model: Path) -> str:
    """``arg`` with its placeholder (``@model``, ``@file``...) replaced by the sandbox's path."""
    if arg.startswith("@model"):
        return str(model) + arg[len("@model"):]
    if arg.startswith("@unwritable"):
        return "/proc/mechprobe-fuzz" + arg[len("@unwritable"):]
    if arg.startswith("@"):
        return str(sandbox / arg[1:])
    return arg


# ---------------------------------------------------------------------------------------------------------------
# Generated from the parsers themselves: every command of ``mechprobe`` and every benchmark script (its argparse
# parser), every flag of each, every ``--set`` key of every config a command takes, each given every value of
# FUZZ_VALUES. A new flag, command, script or setting is fuzzed without anyone writing a case.
# ---------------------------------------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
# The values every flag and every setting is given (placeholders as above; ``@full`` is a folder of the user's).
FUZZ_VALUES = {"empty": "", "zero": "0", "negative": "-1", "huge": HUGE, "nan": "nan", "inf": "inf",
               "wrong_type": "x\u2603", "missing_path": "@missing/x", "file_for_folder": "@file",
               "folder_for_file": "@full", "current_folder": "."}
# Flags named by their ``dest``: folders or files a program writes, and paths or names of what it reads.
OUTPUT_FOLDERS = {"out", "work", "pack_configs"}
OUTPUT_FILES = {"json", "html"}
INPUTS = {"model", "models", "corpus", "config", "configs", "compare", "report", "folder", "baseline", "series"}
# Flags that are a program's internal protocol (hidden from --help: a parent process talks to its child).
# The full product (every program x flag or setting x value: about 4,600 cases, about 25 minutes on one core) runs
# when MECHPROBE_FUZZ=full; the default suite runs SAMPLE_SIZE of them drawn with SAMPLE_SEED (about 20 s), and the
# exhaustive suite (make test-exhaustive, which CI runs) one case per flag and per setting of every program, its value
# drawn with SAMPLE_SEED (:func:`cover`; about 3 minutes).
SAMPLE_SIZE = 120
SAMPLE_SEED = 45


@dataclass(frozen=True)
class Program:
    """One program a user runs: ``mechprobe COMMAND`` or a benchmark script, and its parser."""

    name: str  # "heads", "benchmarks/gpu_check.py"
    prefix: tuple[str, ...]  # argv before the flags: ("heads",) or ()
    parser: Any  # argparse.ArgumentParser


@dataclass(frozen=True)
class FuzzCase:
    """One command line: the program's base arguments and one flag (or setting) given one fuzz value."""

    id: str
    program: str
    argv: tuple[str, ...]  # placeholders unresolved
    flag: str  # the option string, a positional's name, or "--set KEY"
    value: str  # the name of the FUZZ_VALUES entry
    expect: str  # refuse | any
    names: tuple[str, ...] = ()  # the error line holds one of these when it refuses
    output: bool = False  # the flag names where the program writes


class _Captured(BaseException):
    def __init__(self, parser: Any) -> None:
        self.parser = parser


def benchmark_scripts() -> list[Path]:
    """The scripts of benchmarks/ (each with a ``__main__`` block), not the modules they import
    (``gpu_check_results.py``: nothing of its own to run)."""
    return sorted(path for path in BENCHMARKS.glob("*.py")
                  if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))


def benchmark_module(path: Path) -> Any:
    """The benchmark script ``path`` imported as a module (once)."""
    import importlib.util

    name = f"_fuzz_benchmark_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def benchmark_parser(path: Path) -> Any:
    """The argparse parser a benchmark script's ``main()`` builds (caught as it parses, before any work)."""
    import argparse
    from unittest import mock

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    module = benchmark_module(path)
    with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
            mock.patch.object(sys, "argv", [str(path)]):
        try:
            module.main()
        except _Captured as caught:
            return caught.parser
    raise AssertionError(f"{path} built no argparse parser in main()")


def programs() -> list[Program]:
    """Every ``mechprobe`` command and every benchmark script with its parser."""
    import argparse

    from analyses.cli import build_parser

    found = []
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        found.append(Program(command, (command,), parser))
    for path in benchmark_scripts():
        found.append(Program(f"benchmarks/{path.name}", (), benchmark_parser(path)))
    return found


FLAG_IN_TEXT = re.compile(r"(?<![\w/.-])--[a-z][a-z0-9-]*")


@functools.cache
def _options() -> dict[str, frozenset[str]]:
    """Every program's option strings, by program name (``heads``, ``benchmarks/gpu_check.py``)."""
    return {program.name: frozenset(o for action in program.parser._actions for o in action.option_strings)
            for program in programs()}


def flags_it_lacks(program: str, line: str, given: Sequence[str] = ()) -> list[str]:
    """The flags an error line of ``program`` names that neither it nor a program the line names (``mechprobe
    dynamics --model ...``, ``gpu_check.py --pack-configs``) takes, nor the user ``given`` (echoed back: an
    unrecognized argument): advice to give a flag that is not there."""
    options = _options()
    known = set(options.get(program, frozenset())) | {"--debug", "--help"} | set(given)
    for named in re.findall(r"mechprobe ([a-z][a-z-]*)", line):
        known |= options.get(named, frozenset())
    for script in re.findall(r"([a-z_]+\.py)", line):
        known |= options.get(f"benchmarks/{script}", frozenset())
    return [flag for flag in FLAG_IN_TEXT.findall(line) if flag not in known]


def _number_type(action: Any) -> type | None:
    """``int`` or ``float`` where the flag's argparse ``type`` makes numbers of its text, else None."""
    for text in ("1", "2", "0"):
        try:
            value = action.type(text) if action.type is not None else text
        except Exception:
            continue
        return type(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None


def value_flags(parser: Any) -> list[Any]:
    """The actions of ``parser`` that take a value (positionals included), except help, version, --set (fuzzed per
    setting) and the hidden flags of a parent-child protocol."""
    import argparse

    skip = (argparse._HelpAction, argparse._VersionAction, argparse._SubParsersAction)
    return [a for a in parser._actions if not isinstance(a, skip) and a.nargs != 0 and a.help != argparse.SUPPRESS
            and a.dest != "overrides"]


def writes_a_file(action: Any) -> bool:
    """Whether an output flag names a file (``--json``, or a default with a suffix: ``gpu_check.json``)."""
    return action.dest in OUTPUT_FILES or bool(action.default and Path(str(action.default)).suffix)


def expectation(action: Any, value: str) -> str:
    """``refuse`` where the value can only be refused, else ``any`` (exit 0 or 2: the invariants alone)."""
    raw = FUZZ_VALUES[value]
    if action.choices is not None:
        return "any" if raw in action.choices else "refuse"
    if _number_type(action) is not None:
        if value == "zero" or (value == "huge" and _number_type(action) is float):
            return "any"
        return "refuse"
    if action.dest in OUTPUT_FOLDERS and not writes_a_file(action):
        return "refuse" if value in ("empty", "current_folder", "file_for_folder", "folder_for_file") else "any"
    if action.dest in OUTPUT_FOLDERS | OUTPUT_FILES:
        return "refuse" if value in ("empty", "current_folder", "folder_for_file") else "any"
    if action.dest in INPUTS:
        return "refuse" if value in ("empty", "missing_path") else "any"
    if value == "empty" and action.default != "":
        return "refuse"  # an empty name is never a value (unless it is the flag's default)
    return "any"


# The base command line of each program: its required flags, and settings that keep an accepted run short (every
# accepted run stops at its first piece of work anyway: tests/analyses/test_cli_fuzz.py, stop_at_work).
BASE_ARGS: dict[str, tuple[str, ...]] = {
    "heads": ("--model", "@model", "--no-progress"),
    "report": ("--out", "@fresh", "--model", "@model", "--no-toys", "--fast", "--no-progress"),
    "render": ("@missing/report",),
    "probe-linear": ("--model", "@model", "--target", "parent", "--out", "@fresh", "--no-progress"),
    "ablate": ("--model", "@model", "--top", "induction:2", "--out", "@fresh", "--no-progress"),
    "circuit": ("--model", "@model", "--out", "@fresh", "--no-progress"),
    "dynamics": ("--model", "@series", "--out", "@fresh", "--no-progress"),
    "train-lm": ("--out", "@fresh", "--no-progress"),
    "toy": ("scansnap", "--out", "@fresh", "--no-progress"),
    "plan": ("--model", "smollm2-135m", "--tokens", "64"),
    "benchmarks/report_speed.py": ("--baseline", "HEAD", "--out", "@fresh"),
    "benchmarks/train_lm_sweep.py": ("--out", "@fresh"),
    "benchmarks/toy_phases_sweep.py": ("--out", "@fresh"),
    "benchmarks/gpu_check.py": ("--device", "cpu", "--work", "@fresh", "--out", "@fresh.json"),
    "benchmarks/settle_estimate.py": ("@missing/report",),
}


def set_configs(program: str) -> dict[str, tuple[tuple[str, ...], Any]]:
    """The configs whose settings ``program``'s ``--set`` takes: name -> (the base argv that selects it, the
    config). Every program with a ``--set`` flag must be here (test_cli_fuzz.py checks that)."""
    from analyses.dynamics.train_lm import TrainLmConfig
    from analyses.experiments import toy_experiment
    from analyses.linear.experiment import LinearProbeConfig
    from analyses.report.config import ReportConfig
    from analyses.toy_registry import toy_names

    if program == "toy":
        return {name: ((name, *BASE_ARGS["toy"][1:]), toy_experiment(name).PRESETS["fast"])
                for name in toy_names()}
    kinds = {"report": ReportConfig.fast(), "probe-linear": LinearProbeConfig(), "train-lm": TrainLmConfig()}
    return {program: (BASE_ARGS[program], kinds[program])} if program in kinds else {}


def settings(config: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every (dotted key, annotation) of the config ``config``, nested sections included."""
    import dataclasses
    import typing

    hints = typing.get_type_hints(type(config))
    found = []
    for field in dataclasses.fields(config):
        if not field.init:
            continue
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            found += settings(value, f"{prefix}{field.name}.")
        else:
            found.append((prefix + field.name, hints[field.name]))
    return found


def setting_expectation(annotation: Any, value: str) -> str:
    """``refuse`` where a setting of type ``annotation`` can only refuse the value, else ``any``."""
    import types
    import typing

    raw = FUZZ_VALUES[value]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if typing.get_origin(annotation) is typing.Literal:
        return "any" if raw in map(str, typing.get_args(annotation)) else "refuse"
    if annotation is bool:
        return "any" if value == "zero" else "refuse"
    if annotation is int:
        return "any" if value in ("zero", "negative") else "refuse"
    if annotation is float:
        return "any" if value in ("zero", "negative", "huge") else "refuse"
    if annotation is str and value == "empty":
        return "refuse"
    return "any"


def parser_cases() -> list[FuzzCase]:
    """The full product: every program x every value flag x every fuzz value, and every --set key x every value."""
    cases = []
    for program in programs():
        base = program.prefix + BASE_ARGS.get(program.name, ())
        for action in value_flags(program.parser):
            flag = action.option_strings[0] if action.option_strings else action.dest
            names = tuple(action.option_strings) or (action.dest, action.metavar or action.dest)
            for value in FUZZ_VALUES:
                if action.option_strings:
                    argv = (*without_flags(base, action.option_strings), flag, FUZZ_VALUES[value])
                else:  # a positional: the fuzz value in place of the base's
                    argv = _positional(program, base, action, FUZZ_VALUES[value])
                cases.append(FuzzCase(f"{program.name}:{flag}={value}", program.name, argv, flag, value,
                                      expectation(action, value), names,
                                      output=action.dest in OUTPUT_FOLDERS | OUTPUT_FILES))
        for config_name, (config_base, config) in set_configs(program.name).items():
            for key, annotation in settings(config):
                for value in FUZZ_VALUES:
                    argv = program.prefix + config_base + ("--set", f"{key}={FUZZ_VALUES[value]}")
                    cases.append(FuzzCase(f"{program.name}:{config_name}:--set {key}={value}", program.name, argv,
                                          f"--set {key}", value, setting_expectation(annotation, value), (key,)))
    return cases


def without_flags(argv: tuple[str, ...], flags: list[str]) -> tuple[str, ...]:
    """``argv`` without the base's own value of ``flags`` (the fuzzed value replaces it)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in flags:
            skip = True
            continue
        out.append(arg)
    return tuple(out)


def _positional(program: Program, base: tuple[str, ...], action: Any, raw: str) -> tuple[str, ...]:
    """``base`` with its first positional argument (after the program's prefix) replaced by ``raw``."""
    rest = base[len(program.prefix):]
    if rest and not rest[0].startswith("-"):
        rest = rest[1:]
    return (*program.prefix, raw, *rest)


# Values that would make a careless command delete or overwrite what it did not create: every output flag of every
# program is given each of them in the default suite (a planted "delete the output folder first" fails there).
LOSS_VALUES = ("empty", "current_folder", "folder_for_file", "file_for_folder")


def sample(cases: list[FuzzCase], n: int = SAMPLE_SIZE, seed: int = SAMPLE_SEED) -> list[FuzzCase]:
    """The default suite: every output flag given each of LOSS_VALUES, every program at least once, and the rest up
    to ``n`` drawn uniformly with ``seed``."""
    rng = random.Random(seed)
    by_program: dict[str, list[FuzzCase]] = {}
    for case in cases:
        by_program.setdefault(case.program, []).append(case)
    chosen = {c.id for c in cases if c.output and c.value in LOSS_VALUES}
    chosen |= {rng.choice(group).id for group in by_program.values()}
    rest = [c for c in cases if c.id not in chosen]
    chosen |= {c.id for c in rng.sample(rest, max(0, min(n - len(chosen), len(rest))))}
    return [c for c in cases if c.id in chosen]


def cover(cases: list[FuzzCase], seed: int = SAMPLE_SEED) -> list[FuzzCase]:
    """One case of every (program, flag or setting): its value drawn with ``seed`` (the exhaustive suite)."""
    rng = random.Random(seed)
    by_flag: dict[tuple[str, str, str], list[FuzzCase]] = {}
    for case in cases:
        by_flag.setdefault((case.program, case.id.rsplit(":", 1)[0], case.flag), []).append(case)
    return [rng.choice(group) for group in by_flag.values()]


if __name__ == "__main__":
    sys.stdout.write(json.dumps(generate(), indent=1, ensure_ascii=False) + "\n")
