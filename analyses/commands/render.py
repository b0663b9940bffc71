"""``mechprobe render``: rebuild a report's files from its saved results, without a model
(the work: :func:`analyses.report.build.render_report`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from analyses.cli_checks import text_arg
from analyses.cli_command import Command
from analyses.output_paths import check_files_written
from mechprobe.validation import real_path
from probes.core.errors import InputError

REWRITTEN = ("summary.json", "report.md", "report.html")
"""The files of a report folder that ``render`` writes anew (:meth:`analyses.report.document.Report.write`)."""


def add_arguments(render: argparse.ArgumentParser) -> None:
    render.add_argument("folder", metavar="OUT", type=text_arg, help="a folder written by mechprobe report")


def _what_else(folder: Path, given: str) -> str | None:
    """What ``folder``, which holds no ``results/``, is instead of a report (another command's output, which the
    plain 'has no results/ folder ... reports from before saved results must be re-run' misnamed as an old report),
    and how it enters one; None where it is none of them."""
    if (folder / "results").exists():
        return None
    if (folder / "series.json").is_file():  # mechprobe train-lm --out, the induction toy's OUT/series
        return f"a checkpoint series (mechprobe report --series {given} --out DIR draws it in a report)"
    if (folder / "checkpoints").is_dir() and (folder / "summary.json").is_file():
        return "the --out folder of mechprobe dynamics, which drew its own dynamics.png"
    if (folder / "summary.json").is_file() and any(folder.glob("*.png")):
        return "the --out folder of mechprobe toy, which drew its own figures"
    return None


def run(args: argparse.Namespace) -> int:
    from analyses.report.build import render_report

    folder = Path(args.folder)
    real_path("render", folder)  # a link that loops is named as one, not as a folder that is not there
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else ": no such folder"
        raise InputError(f"{args.folder}{' ' if folder.exists() else ''}{what}; give the folder mechprobe report "
                         f"--out wrote.")
    instead = _what_else(folder, args.folder)
    if instead is not None:
        raise InputError(f"{args.folder} is {instead}, not a folder mechprobe report wrote (what render rebuilds); "
                         f"give the folder mechprobe report --out wrote.")
    where, fix = f"render {args.folder}", "move it away, then render again"
    check_files_written(where, folder, REWRITTEN, fix=fix)
    figures = folder / "figures"
    if figures.exists() and not figures.is_dir():
        raise InputError(f"{where}: {figures} is not a folder, and this command draws the report's figures there; "
                         f"{fix}.")
    if figures.is_dir():  # each figure is drawn anew
        check_files_written(where, figures, [p.name for p in figures.glob("*.png")], fix=fix)
    print(f"report rendered: {render_report(args.folder)}")
    return 0


RENDER = Command(
    "render", help="rebuild a report's report.md/.html and summary.json from its saved results (no model)",
    description="Rebuild report.md, report.html, summary.json and the figures of a folder written by mechprobe "
    "report from the probe results saved in its results/ folder, without loading any model.",
    add_arguments=add_arguments, run=run,
)
