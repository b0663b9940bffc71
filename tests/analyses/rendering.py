"""What a saved report folder must give back: ``mechprobe render`` of its results alone (the pages, summary and
figures removed) rebuilds the report byte for byte, without a model."""

from __future__ import annotations

import shutil
from pathlib import Path

from analyses.cli import main


def assert_render_rebuilds(out: Path, scratch: Path) -> None:
    """Copy the report folder ``out`` to ``scratch``, drop what ``render`` writes, render it, compare."""
    shutil.copytree(out, scratch)
    for name in ("report.md", "report.html", "summary.json"):
        (scratch / name).unlink()
    shutil.rmtree(scratch / "figures")
    assert main(["render", str(scratch)]) == 0
    for name in ("summary.json", "report.md", "report.html"):
        assert (scratch / name).read_bytes() == (out / name).read_bytes(), name
