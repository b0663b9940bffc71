"""Wall-clock timings of a run, kept out of summary.json.

summary.json holds only results, so the same command with the same seed writes a bit-identical
file (issue 8's determinism test compares them); how long each part took goes to timings.json
beside it, in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from probes.core.atomic import atomic_write_text


def write_timings(folder: Path, timings: Mapping[str, float]) -> Path:
    """Write ``{part: seconds}`` to ``folder/timings.json`` (atomically); return its path."""
    path = Path(folder) / "timings.json"
    atomic_write_text(path, json.dumps({name: round(float(s), 3) for name, s in timings.items()}, indent=2))
    return path
