"""The matplotlib backend of the figures analyses writes to files.

Agg (no window, no display needed), except inside a Jupyter kernel: its inline backend draws with Agg too, and
switching away from it would stop every later figure of the notebook (``result.plot()``) from showing.
"""

from __future__ import annotations

import matplotlib


def use_file_backend() -> None:
    """Select Agg for figures written to files, keeping a notebook's inline backend."""
    if "inline" not in matplotlib.get_backend().lower():
        matplotlib.use("Agg")
