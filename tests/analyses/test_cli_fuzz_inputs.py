"""What each program READS, generated from the parsers: every flag (or positional) of every ``mechprobe`` command
and every benchmark script whose ``dest`` is one of cli_fuzz's INPUTS (a model, a series, a corpus, a config, a
report, a folder to compare or render...) is given each other command's saved output as that flag's value (the
OTHER_OUTPUTS folders of test_cli_fuzz.py: a report, a dynamics run, a train-lm series, a toy run, each with every
JSON file ``{}``, so damaged whatever the flag expects), a symbolic link that loops, an empty folder and a file of
the user's. Each must be refused before any work (test_cli_fuzz.py's :func:`stop_at_work`) in one
``PROG: error: ...`` line naming the flag or the path it was given, with no traceback, nothing written and nothing
of the user's changed. A new reading flag, program or kind of saved output is fuzzed without anyone writing a case.

The default suite runs SAMPLE cases drawn with a fixed seed; ``make test-exhaustive`` (which CI runs) all of them.
Rerun one: ``pytest tests/analyses/test_cli_fuzz_inputs.py -k 'render'``.
"""

from __future__ import annotations

import random

import pytest

from tests.analyses import test_cli_fuzz as fuzz
from tests.analyses.cli_fuzz import BASE_ARGS, INPUTS, FuzzCase, value_flags, without_flags
from tests.analyses.test_cli_fuzz import OTHER_OUTPUTS, PROGRAMS, check_parser_case

tiny_model, tiny_series = fuzz.tiny_model, fuzz.tiny_series  # the fixtures check_parser_case takes

pytestmark = [pytest.mark.usefixtures("one_thread")]

# Each kind of saved output another command wrote (damaged: see above), and what is never a saved output at all.
SAVED = tuple(f"{kind}_out" for kind in sorted(OTHER_OUTPUTS))
NOT_SAVED = ("loop", "empty", "file")
SAMPLE = 24
SAMPLE_SEED = 45


def _with_value(program_name: str, action, value: str) -> tuple[str, ...]:
    """The program's base command line with ``value`` as the reading flag's (or positional's) value."""
    program = PROGRAMS[program_name]
    base = program.prefix + BASE_ARGS.get(program.name, ())
    if action.option_strings:
        return (*without_flags(base, action.option_strings), action.option_strings[0], value)
    rest = base[len(program.prefix):]
    if rest and not rest[0].startswith("-"):
        rest = rest[1:]
    return (*program.prefix, value, *rest)


def input_cases() -> list[FuzzCase]:
    """Every program's every reading flag x every saved output of another kind and each of NOT_SAVED."""
    cases = []
    for program in PROGRAMS.values():
        for action in value_flags(program.parser):
            if action.dest not in INPUTS:
                continue
            flag = action.option_strings[0] if action.option_strings else action.dest
            for name in (*SAVED, *NOT_SAVED):
                names = (*action.option_strings, action.dest, name)  # the flag, or the path given
                cases.append(FuzzCase(f"{program.name}:{flag}=@{name}", program.name,
                                      _with_value(program.name, action, f"@{name}"), flag, name, "refuse", names))
    return cases


CASES = input_cases()
SAMPLED = sorted(random.Random(SAMPLE_SEED).sample(CASES, min(SAMPLE, len(CASES))), key=lambda case: case.id)
SLOW = [case for case in CASES if case not in SAMPLED]


def test_every_reading_flag_is_given_every_kind_of_saved_output():
    """The programs whose inputs are fuzzed here: a reading flag left out of INPUTS (cli_fuzz.py) is not."""
    flags = {(case.program, case.flag) for case in CASES}
    assert {("render", "folder"), ("dynamics", "--compare"), ("dynamics", "--model"), ("report", "--series"),
            ("report", "--corpus"), ("report", "--config"), ("heads", "--model"), ("probe-linear", "--model"),
            ("benchmarks/gpu_check.py", "--configs"), ("benchmarks/settle_estimate.py", "report"),
            ("benchmarks/ablation_null_cost.py", "--model"),
            ("benchmarks/linear_section_speed.py", "--report")} <= flags


@pytest.mark.parametrize("case", SAMPLED, ids=[c.id for c in SAMPLED])
def test_a_sample_of_the_reading_flags_refuses_another_saved_output(case, tiny_model, tiny_series, tmp_path,
                                                                    monkeypatch):
    check_parser_case(case, tiny_model, tiny_series, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("case", SLOW, ids=[c.id for c in SLOW])
def test_every_reading_flag_refuses_another_saved_output(case, tiny_model, tiny_series, tmp_path, monkeypatch):
    check_parser_case(case, tiny_model, tiny_series, tmp_path, monkeypatch)
