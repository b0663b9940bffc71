"""Adding a command or a toy touches few files (docs/ARCHITECTURE.md, "Adding things"): a template of each, built in
memory and put in the one table it needs, is picked up by the parser and dispatched, with nothing else edited.

- A command: one module holding its :class:`~analyses.cli_command.Command` record, and the record in the table
  :data:`analyses.cli.COMMANDS`: 2 files.
- A toy: its record in :data:`analyses.toy_registry.TOYS`; its experiment module (here the template below; a real
  one is ``analyses/<name>/experiment.py`` with its ``config.py`` and ``result.py``), its model in
  ``toymodels/<name>/`` and its unit in ``ANALYSES_LAYERS``: 6 files besides the packages' ``__init__.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from dataclasses import dataclass
from typing import ClassVar

import pytest

import analyses.cli
import analyses.toy_registry
from analyses.cli import build_parser, main
from analyses.cli_command import Command
from analyses.paper_reference import PaperReference
from analyses.paper_result import PaperResult
from analyses.report.config import ReportConfig
from analyses.toy_registry import ToySpec, toy_spec
from mechprobe import records

# ---------------------------------------------------------------------------------------------------------------
# The template command: what `analyses/commands/<name>.py` holds.
# ---------------------------------------------------------------------------------------------------------------


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--greeting", default="hello", help="what to print (default hello)")


def _run(args: argparse.Namespace) -> int:
    print(f"{args.greeting} on {args.device}")
    return 0


TEMPLATE_COMMAND = Command("template", help="print a greeting", description="Print a greeting (a template).",
                           add_arguments=_add_arguments, run=_run, shared=("device", "progress"))


def test_a_command_is_its_record_in_the_table(monkeypatch, capsys):
    monkeypatch.setattr(analyses.cli, "COMMANDS", (*analyses.cli.COMMANDS, TEMPLATE_COMMAND))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    template = sub.choices["template"]
    flags = {option for action in template._actions for option in action.option_strings}
    assert {"--greeting", "--device", "--no-progress", "--debug"} <= flags  # its own and the shared ones it takes
    assert "--dtype" not in flags
    assert main(["template", "--greeting", "hi", "--device", "cpu"]) == 0
    assert capsys.readouterr().out == "hi on cpu\n"
    assert main(["template", "--dtype", "float16"]) == 2  # a shared flag it does not take is refused in one line
    assert "unrecognized arguments: --dtype" in capsys.readouterr().err


def test_a_command_record_refuses_an_unknown_shared_flag():
    with pytest.raises(ValueError, match="unknown shared flags"):
        Command("bad", help="", description="", add_arguments=_add_arguments, run=_run, shared=("colour",))


# ---------------------------------------------------------------------------------------------------------------
# The template toy: what `analyses/<name>/experiment.py` (with its config and result) holds.
# ---------------------------------------------------------------------------------------------------------------

TEMPLATE_MODULE = "tests_template_toy_experiment"


@dataclass(frozen=True)
class TemplateConfig:
    seed: int = 0
    answer: float = 42.0


@dataclass(frozen=True)
class TemplateResult(PaperResult):
    experiment: ClassVar[str] = "template"
    reference: PaperReference
    answer: float


def _template_experiment() -> types.ModuleType:
    module = types.ModuleType(TEMPLATE_MODULE, "The template toy's experiment.")

    def run(config, out_dir, *, progress=True):
        result = TemplateResult(PaperReference("Nobody 2025, A Template", "Figure 1"), config.answer)
        result.save(out_dir)
        return result

    def result_from_summary(document, where="the summary", *, at="", rerun=None):
        return TemplateResult.from_document(document, where, at=at, rerun=rerun)

    module.PRESETS = {"fast": TemplateConfig()}  # type: ignore[attr-defined]
    module.TemplateConfig = TemplateConfig  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    module.result_from_summary = result_from_summary  # type: ignore[attr-defined]
    module.seed_findings = lambda config, seed: None  # type: ignore[attr-defined]  # no findings: never called
    return module


TEMPLATE_TOY = ToySpec("template", paper="Nobody 2025", experiment=TEMPLATE_MODULE,
                       config=f"{TEMPLATE_MODULE}:TemplateConfig", models=(), probe_target="parent", findings=())


def test_a_toy_is_its_record_in_the_registry(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, TEMPLATE_MODULE, _template_experiment())
    monkeypatch.setattr(analyses.toy_registry, "TOYS", (*analyses.toy_registry.TOYS, TEMPLATE_TOY))
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    experiment = next(a for a in sub.choices["toy"]._actions if a.dest == "experiment")
    assert "template" in experiment.choices and "template (Nobody 2025)" in experiment.help
    assert toy_spec("template").config_class() is TemplateConfig
    assert ReportConfig().toys[-1] == "template"  # the report trains it by default

    out = tmp_path / "run"
    assert main(["toy", "template", "--out", str(out), "--set", "answer=7", "--no-progress"]) == 0
    assert "answer: 7" in capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert records.checked(TemplateResult, summary, "summary.json", rerun="").answer == 7.0
    assert main(["toy", "template", "--list-presets"]) == 0
    assert capsys.readouterr().out.startswith("fast: ")
