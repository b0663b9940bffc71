"""A toy's curves recorded during training, as a series :func:`analyses.dynamics.figures.plot_series_together`
draws beside the measured checkpoint series (:class:`~analyses.dynamics.summary.DynamicsSummary`): the topic toy's
weight displacements (:func:`analyses.topic.order.order_series`) and the Scan and Snap toy's composition
(:func:`analyses.scansnap.order.order_series`).

Each toy's run writes its series into its folder (:data:`SERIES_FILE`, :func:`save_curve_series`); the report
reads them back (:func:`load_curve_series`) to draw the toys beside each other and beside any checkpoint series.

Example: ``plot_series_together({"SmolLM2 run": summary, "topic toy": order_series(history, finding)}, path)``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mechprobe import records
from probes.core.atomic import atomic_write_text

SERIES_FILE = "order_series.json"


@dataclass(frozen=True)
class CurveSeries:
    """``curves[name][i]``: the curve at ``steps[i]``; ``events[name]``: where its events are drawn,
    ``(step, value there, whether the order they belong to holds)``. Toys count steps, not tokens."""

    series: str
    steps: tuple[int, ...]
    curves: dict[str, list[float]]
    events: dict[str, tuple[tuple[float, float, bool], ...]]

    def __post_init__(self) -> None:
        check_drawable(self.steps, self.curves)

    @property
    def tokens(self) -> tuple[None, ...]:
        return (None,) * len(self.steps)

    def marks(self, curve: str) -> list[tuple[float, float, bool]]:
        """The events drawn on ``curve`` (none for a curve without events)."""
        return list(self.events.get(curve, ()))


def check_drawable(steps: Sequence[int], curves: Mapping[str, Sequence[float]],
                   tokens: Sequence[int | None] = ()) -> None:
    """Refuse (``ValueError``, which :func:`mechprobe.records.load` names the file by) a series that cannot be drawn
    on steps: fewer than 2 steps (a curve over training), steps not increasing from 0 or more, a curve (or the tokens
    seen, when given) without one value per step, tokens seen that are negative or go down."""
    if len(steps) < 2 or steps[0] < 0 or any(b <= a for a, b in itertools.pairwise(steps)):
        raise ValueError(f"its steps must be two or more, increasing from 0 or more; got {list(steps)}.")
    for name, values in [*curves.items(), *([("tokens", tokens)] if tokens else [])]:
        if len(values) != len(steps):
            raise ValueError(f"{name} has {len(values)} values for its {len(steps)} steps.")
    known = [t for t in tokens if t is not None]
    if any(t < 0 for t in known) or any(b < a for a, b in itertools.pairwise(known)):
        raise ValueError(f"its tokens seen must be 0 or more and grow with the steps; got {list(tokens)}.")


def save_curve_series(series: CurveSeries, folder: str | Path) -> Path:
    """Write ``series`` into ``folder/``:data:`SERIES_FILE` (atomically)."""
    path = Path(folder) / SERIES_FILE
    atomic_write_text(path, records.to_json(series))
    return path


def load_curve_series(folder: str | Path, *, rerun: str) -> CurveSeries | None:
    """The series a toy's run saved in ``folder`` (None when it saved none: a toy without orders of events); a
    damaged file is one line saying to ``rerun``."""
    path = Path(folder) / SERIES_FILE
    return records.read_record(CurveSeries, path, rerun=rerun) if path.is_file() else None
