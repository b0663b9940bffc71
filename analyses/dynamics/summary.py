"""``summary.json`` of ``mechprobe dynamics``: the record it holds and its reader."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from analyses.curve_series import check_drawable
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.events import SeriesEvents
from mechprobe import records
from probes.core.checkpoint_series import MANIFEST
from probes.core.errors import InputError

SUMMARY = "summary.json"
STORE = "checkpoints"
"""``OUT/checkpoints/``: each checkpoint's measures as it is done (what the same command resumes from)."""


@dataclass(frozen=True)
class DynamicsSummary:
    """``summary.json``: the series, its settings, each curve per checkpoint, the events and orders."""

    series: str
    kind: str
    steps: tuple[int, ...]
    tokens: tuple[int | None, ...]
    settings: DynamicsConfig
    curves: dict[str, list[float]]
    events: SeriesEvents
    measured_now: tuple[int, ...]
    reused: tuple[int, ...]

    def __post_init__(self) -> None:
        check_drawable(self.steps, self.curves, self.tokens)

    def marks(self, curve: str) -> list[tuple[float, float, bool]]:
        """Where ``curve``'s event is drawn: ``(step, level it crosses, holds)``, none without an event."""
        event = self.events.events.get(curve)
        if event is None or math.isnan(event.change.step):
            return []
        change = event.change
        return [(change.step, change.start + self.settings.fraction * change.rise, event.holds)]


def load_summary(folder: str | Path, *, rerun: str | None = None) -> DynamicsSummary:
    """The :class:`DynamicsSummary` a finished ``mechprobe dynamics`` run wrote into ``folder``; a damaged one is
    one line ending with ``rerun`` (by default: run that dynamics command again)."""
    path = Path(folder) / SUMMARY
    if not path.is_file() and rerun is None:
        raise InputError(f"{folder} holds no {SUMMARY} of a finished mechprobe dynamics run; give the --out folder "
                         f"of one (run it to the end first).")
    if rerun is None and not (Path(folder) / STORE).is_dir():  # another command's summary.json (train-lm, report)
        series = (Path(folder) / MANIFEST).is_file()
        raise InputError(f"{folder} is not the --out folder of a mechprobe dynamics run (it has no {STORE}/ folder)"
                         + (f"; it is a checkpoint series: measure it with mechprobe dynamics --model {folder} --out "
                            f"DIR, then give DIR." if series else "; give the --out folder of one."))
    rerun = rerun or (f"Run the mechprobe dynamics command that wrote {folder} again (it reuses the checkpoints "
                      f"measured there and writes {SUMMARY} anew).")
    return records.checked(DynamicsSummary, records.read_json(path, rerun=rerun), path, rerun=rerun)

