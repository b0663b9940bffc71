"""A toy's curves recorded during training, as a series :func:`analyses.dynamics.figures.plot_series_together`
draws beside the measured checkpoint series (:class:`~analyses.dynamics.summary.DynamicsSummary`): the topic toy's
weight displacements (:func:`analyses.topic.order.order_series`) and the Scan and Snap toy's composition
(:func:`analyses.scansnap.order.order_series`).

Example: ``plot_series_together({"SmolLM2 run": summary, "topic toy": order_series(history, finding)}, path)``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CurveSeries:
    """``curves[name][i]``: the curve at ``steps[i]``; ``events[name]``: where its events are drawn,
    ``(step, value there, whether the order they belong to holds)``. Toys count steps, not tokens."""

    series: str
    steps: tuple[int, ...]
    curves: dict[str, list[float]]
    events: dict[str, tuple[tuple[float, float, bool], ...]]

    @property
    def tokens(self) -> tuple[None, ...]:
        return (None,) * len(self.steps)

    def marks(self, curve: str) -> list[tuple[float, float, bool]]:
        """The events drawn on ``curve`` (none for a curve without events)."""
        return list(self.events.get(curve, ()))
