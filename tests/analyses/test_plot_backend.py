"""Writing figures selects Agg, but never replaces a notebook's inline backend (results' .plot() must still show)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROGRAM = "import analyses.report.figures, matplotlib; print(matplotlib.get_backend())"


@pytest.mark.parametrize(("backend", "expected"), [("module://matplotlib_inline.backend_inline",
                                                    "module://matplotlib_inline.backend_inline"),
                                                   ("svg", "agg")])
def test_file_figures_keep_the_inline_backend(backend, expected):
    pytest.importorskip("matplotlib_inline")
    env = {**os.environ, "MPLBACKEND": backend}
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().lower() == expected
