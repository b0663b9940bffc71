"""``summary.json`` of ``mechprobe dynamics``: the record it holds and its reader."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from analyses.curve_series import check_drawable
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.events import SeriesEvents
from mechprobe import records
from mechprobe.errors import RecordError
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
    summary = records.checked(DynamicsSummary, records.read_json(path, rerun=rerun), path, rerun=rerun)
    _check_lengths(summary, path, rerun)
    return summary


def _check_lengths(summary: DynamicsSummary, path: Path, rerun: str) -> None:
    """The steps of ``summary`` are 2 or more, increasing from 0 or more, with a token count and a value of each
    curve each (a summary with 1 step beside 6 values, or none, was a ValueError or IndexError traceback where it
    was drawn; a negative step was drawn as measured)."""
    steps = list(summary.steps)
    wrong = ("fewer than 2 steps" if len(steps) < 2 else "steps not increasing" if steps != sorted(set(steps)) else
             "a negative step" if steps[0] < 0 else
             "a token count per step missing" if len(summary.tokens) != len(steps) else
             next((f"{len(values)} values of {name} for {len(steps)} steps" for name, values in summary.curves.items()
                   if len(values) != len(steps)), None))
    if wrong is not None:
        raise RecordError(f"{path}: {wrong} ({steps[:8]}{' ...' if len(steps) > 8 else ''}), not a series as "
                          f"mechprobe dynamics writes it: it is damaged. {rerun}")
