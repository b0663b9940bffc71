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

import json
import random
import sys
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
                                          "self", "first_token", "offset:-1")] + [
        _bad("offset:1000", "--pattern", "offset:1000"), _bad("--pattern", "--pattern", f"offset:{HUGE}"),
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


if __name__ == "__main__":
    sys.stdout.write(json.dumps(generate(), indent=1, ensure_ascii=False) + "\n")
