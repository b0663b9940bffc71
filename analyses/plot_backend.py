"""The matplotlib backend of the figures analyses writes to files.

Agg (no window, no display needed), except inside a Jupyter kernel: its inline backend draws with Agg too, and
switching away from it would stop every later figure of the notebook (``result.plot()``) from showing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

from mechprobe.atomic import atomic_file


def use_file_backend() -> None:
    """Select Agg for figures written to files, keeping a notebook's inline backend."""
    if "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")


def save_figure(figure: Any, path: Path, *, dpi: int) -> Path:
    """Write ``figure`` to ``path`` in one rename, then close it: a run stopped while it draws (``render`` redrawing
    a user's report, a resumed ``dynamics``) leaves the earlier file or none there, never half a figure."""
    import matplotlib.pyplot as plt

    with atomic_file(path) as tmp:
        figure.savefig(tmp, dpi=dpi)
    plt.close(figure)
    return path
