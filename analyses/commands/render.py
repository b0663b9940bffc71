"""``mechprobe render``: rebuild a report's files from its saved results, without a model
(the work: :func:`analyses.report.build.render_report`)."""

from __future__ import annotations

import argparse

from analyses.cli_command import Command


def add_arguments(render: argparse.ArgumentParser) -> None:
    render.add_argument("folder", metavar="OUT", help="a folder written by mechprobe report")


def run(args: argparse.Namespace) -> int:
    from analyses.report.build import render_report

    print(f"report rendered: {render_report(args.folder)}")
    return 0


RENDER = Command(
    "render", help="rebuild a report's report.md/.html and summary.json from its saved results (no model)",
    description="Rebuild report.md, report.html, summary.json and the figures of a folder written by mechprobe "
    "report from the probe results saved in its results/ folder, without loading any model.",
    add_arguments=add_arguments, run=run,
)
