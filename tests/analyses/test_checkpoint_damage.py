"""A damaged Hugging Face checkpoint folder given to every flag that reads one, generated from the parsers: each flag
of every ``mechprobe`` command and benchmark script whose ``dest`` is ``model`` or ``models`` (but ``dynamics``',
which reads a series: tests/analyses/dynamics/test_series_damage.py) is given the tiny random-weight checkpoint
(tests/random_checkpoints.py) with its ``config.json`` or ``model.safetensors`` damaged in each way
(test_saved_folder_damage.py's JSON and binary damages, numbers negative, huge or NaN, weights of other shapes).
Each run stops at its first piece of work (test_cli_fuzz.py's :func:`stop_at_work`): it must exit 2 in one line
that names the folder (or a flag: another flag may be refused first), or reach its work where it does not read the
damaged file (``plan`` reads only ``config.json``; a script's child process loads the weights), with no traceback,
nothing written or changed; and a refusal never tells the user to re-run a toy (the folder is a Hugging Face
checkpoint, not a toy's). A new flag that reads a model is covered without anyone writing a case.

The default suite runs SAMPLE cases drawn with a fixed seed; ``make test-exhaustive`` (which CI runs) all of them.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import pytest

from tests.analyses import test_cli_fuzz as fuzz
from tests.analyses.cli_fuzz import BASE_ARGS, FuzzCase, value_flags, without_flags
from tests.analyses.test_saved_folder_damage import BINARY_DAMAGES, JSON_DAMAGES, Damage, _edit

pytestmark = [pytest.mark.usefixtures("one_thread")]
tiny_model = fuzz.tiny_model  # the fixture: a tiny random-weight GPT-NeoX checkpoint folder
SAMPLE = 12
SAMPLE_SEED = 45


def _numbers(value: float) -> Damage:
    """Every number of the JSON file (not a bool) replaced by ``value``."""
    def replace(document: object) -> object:
        if isinstance(document, dict):
            return {key: replace(item) for key, item in document.items()}
        if isinstance(document, list):
            return [replace(item) for item in document]
        is_number = isinstance(document, (int, float)) and not isinstance(document, bool)
        return value if is_number else document
    return _edit(replace)


def _other_shapes(path: Path) -> None:
    """Each weight one longer along every axis."""
    import torch
    from safetensors.torch import load_file, save_file

    weights = load_file(str(path))
    save_file({name: torch.zeros(*(n + 1 for n in w.shape)) for name, w in weights.items()}, str(path))


DAMAGES: dict[str, dict[str, Damage]] = {
    "config.json": {**JSON_DAMAGES, "negative": _numbers(-1), "huge": _numbers(1e308), "nan": _numbers(float("nan"))},
    "model.safetensors": {**BINARY_DAMAGES, "other_shapes": _other_shapes},
}


def damage_cases() -> list[FuzzCase]:
    """Every program's every model-reading flag x every file x every damage (``value`` is ``FILE:DAMAGE``)."""
    cases = []
    for program in fuzz.PROGRAMS.values():
        base = program.prefix + BASE_ARGS.get(program.name, ())
        for action in value_flags(program.parser):
            if action.dest not in ("model", "models") or program.name == "dynamics":
                continue
            flag = action.option_strings[0]
            for file, damages in DAMAGES.items():
                for damage in damages:
                    cases.append(FuzzCase(f"{program.name}:{flag}={file}:{damage}", program.name,
                                          (*without_flags(base, action.option_strings), flag, "@damaged"), flag,
                                          f"{file}:{damage}", "any", tuple(action.option_strings)))
    return cases


CASES = damage_cases()
SAMPLED = sorted(random.Random(SAMPLE_SEED).sample(CASES, SAMPLE), key=lambda case: case.id)
SLOW = [case for case in CASES if case not in SAMPLED]


def test_every_flag_that_reads_a_model_is_given_a_damaged_checkpoint():
    flags = {(case.program, case.flag) for case in CASES}
    assert {("heads", "--model"), ("report", "--model"), ("plan", "--model"), ("probe-linear", "--model"),
            ("benchmarks/ablation_null_cost.py", "--model"),
            ("benchmarks/linear_section_speed.py", "--models")} <= flags


def check_damaged_checkpoint(case: FuzzCase, tiny_model: Path, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "checkpoint"
    shutil.copytree(tiny_model, folder)
    file, damage = case.value.split(":")
    DAMAGES[file][damage](folder / file)
    sandbox = tmp_path / "sandbox"
    fuzz.make_sandbox(sandbox)
    monkeypatch.chdir(sandbox)
    argv = [str(folder) if arg == "@damaged" else fuzz.resolve(arg, sandbox, tiny_model) for arg in case.argv]
    program = fuzz.PROGRAMS[case.program]
    outputs = fuzz.output_paths(program, argv, sandbox)
    before, kept = fuzz.snapshot(sandbox), fuzz.snapshot(folder)
    code, _, stderr = fuzz.run_program(program, argv)
    found = fuzz.parser_case_problems(case, code, stderr, before, fuzz.snapshot(sandbox), outputs, sandbox)
    line = (stderr.strip().splitlines() or [""])[-1]
    options = {option for action in program.parser._actions for option in action.option_strings}
    if code == 2 and not (str(folder) in line or any(option in line for option in options)):
        found.append(f"the error names neither the folder nor a flag (--report refused before --models): {line}")
    if code == 2 and "mechprobe toy" in line:
        found.append(f"a Hugging Face checkpoint told to re-run a toy: {line}")
    if fuzz.snapshot(folder) != kept:
        found.append("the checkpoint folder was changed")
    assert not found, f"{case.id}: {case.program} {' '.join(map(repr, argv))}\n" + "\n".join(found)


@pytest.mark.parametrize("case", SAMPLED, ids=[c.id for c in SAMPLED])
def test_a_sample_of_damaged_checkpoints_is_one_line_or_unread(case, tiny_model, tmp_path, monkeypatch):
    check_damaged_checkpoint(case, tiny_model, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.exhaustive
@pytest.mark.parametrize("case", SLOW, ids=[c.id for c in SLOW])
def test_every_damaged_checkpoint_is_one_line_or_unread(case, tiny_model, tmp_path, monkeypatch):
    check_damaged_checkpoint(case, tiny_model, tmp_path, monkeypatch)


def test_the_damages_change_the_files(tiny_model, tmp_path):
    """Each damage changes its file (a damage that left it whole would test nothing)."""
    for file, damages in DAMAGES.items():
        for name, damage in damages.items():
            folder = tmp_path / f"{file}-{name}"
            shutil.copytree(tiny_model, folder)
            before = (folder / file).read_bytes()
            damage(folder / file)
            assert not (folder / file).is_file() or (folder / file).read_bytes() != before, (file, name)
    assert json.loads((tiny_model / "config.json").read_text())  # the fixture's own folder is whole
