"""Checkpoints where the events are: which steps to add to a series so that each event's interval narrows to a
given share of its step, and the loop that adds them until it has.

A checkpoint series saved at log-spaced steps is densest where little happens; an event that falls between two
sparse checkpoints has that whole bracket as its interval (:mod:`probes.dynamics.change_point` widens every
interval to the two checkpoints that straddle the crossing). An event is *resolved* when its interval is at most
``width`` times its step (``width`` 0.2: the event located to +/- 10% of its step). For each unresolved event,
:func:`refinement_steps` puts new integer steps into every bracket (two consecutive checkpoints) that its interval
overlaps, evenly spaced at most ``width * step / per_width`` apart (so the bracket alone takes at most
``1 / per_width`` of the allowed width), at most ``max_new`` of them per event and round (a wider spacing when the
interval is long: a noisy curve whose bootstrap interval spans much of the run gets a coarse pass first).
:func:`refine_events` alternates measuring the events and adding the steps, for at most ``rounds`` rounds; it stops
early when every event is resolved or no bracket can take another integer step. Which events take part is the
caller's choice (``mechprobe dynamics --refine``: the events that hold, so a series without an event adds nothing).

How the new checkpoints are made is the caller's too: ``mechprobe dynamics --refine`` re-runs the training between
the two checkpoints from the earlier one's kept state (:mod:`analyses.dynamics.bracket_rerun`), a planted test
evaluates a planted curve at the new steps.

Example::

    refinement_steps((0, 10, 100, 1000), {"induction": (300.0, (100.0, 1000.0))}, width=0.2)["induction"]

returns 16 steps between 100 and 1000 (the allowed spacing, 15, would need 59; ``max_new`` caps them).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mechprobe.validation import is_integer
from probes.core.errors import ConfigError

EventInterval = tuple[float, tuple[float, float]]
"""An event's step and its interval ``(low, high)`` (NaN step: no event)."""


@dataclass(frozen=True)
class RefinementSettings:
    """``width``: the interval an event may keep, as a share of its step; ``per_width``: brackets are cut to at most
    ``width * step / per_width``; ``max_new``: new steps per event per round; ``rounds``: measure-and-add rounds."""

    width: float = 0.2
    per_width: int = 4
    max_new: int = 16
    rounds: int = 3

    def __post_init__(self) -> None:
        if isinstance(self.width, bool) or not isinstance(self.width, (int, float)) or not 0 < self.width <= 1:
            raise ConfigError(f"width (the interval an event may keep, as a share of its step) must lie in (0, 1]; "
                              f"got {self.width!r}. 0.2 locates an event to +/- 10% of its step.")
        for name in ("per_width", "max_new", "rounds"):
            value = getattr(self, name)
            if not is_integer(value) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1; got {value!r}.")


def interval_share(event: EventInterval) -> float:
    """The interval's width over the event's step (inf for an event at step 0 or without a finite interval)."""
    step, (low, high) = event
    if not (math.isfinite(step) and math.isfinite(low) and math.isfinite(high)) or step <= 0:
        return math.inf
    return (high - low) / step


def resolved(event: EventInterval, width: float) -> bool:
    """Whether the event's interval is at most ``width`` times its step."""
    return interval_share(event) <= width


def _bracket_steps(low: int, high: int, spacing: float) -> list[int]:
    """Integer steps strictly inside ``(low, high)``, evenly spaced, cutting it into pieces of at most ``spacing``."""
    pieces = math.ceil((high - low) / spacing)
    return sorted({round(low + j * (high - low) / pieces) for j in range(1, pieces)} - {low, high})


def refinement_steps(steps: Sequence[int], events: Mapping[str, EventInterval],
                     settings: RefinementSettings = RefinementSettings()) -> dict[str, tuple[int, ...]]:
    """For each unresolved event of ``events`` (name: step and interval), the new steps in the brackets of
    ``steps`` its interval overlaps (module docstring); resolved events and events without a step get none."""
    steps = sorted(steps)
    plan: dict[str, tuple[int, ...]] = {}
    for name, event in events.items():
        step, (low, high) = event
        if resolved(event, settings.width) or not (math.isfinite(step) and math.isfinite(low) and
                                                    math.isfinite(high)):
            plan[name] = ()
            continue
        brackets = [(a, b) for a, b in itertools.pairwise(steps) if b > low and a < high]
        span = sum(b - a for a, b in brackets)
        spacing = max(1.0, settings.width * step / settings.per_width, span / settings.max_new)
        plan[name] = tuple(sorted({s for a, b in brackets for s in _bracket_steps(a, b, spacing)}))
    return plan


@dataclass(frozen=True)
class RefinementRound:
    """One round: the series' steps, each event's step and interval measured on them, how many new steps each event
    asked for (:func:`refinement_steps`), and the steps added after."""

    steps: tuple[int, ...]
    events: dict[str, EventInterval]
    asked: dict[str, int]
    added: tuple[int, ...]


@dataclass(frozen=True)
class Refinement:
    """Every round of :func:`refine_events` (the last one adds nothing: it is the final measurement) and whether
    each event ended resolved."""

    settings: RefinementSettings
    rounds: tuple[RefinementRound, ...]

    @property
    def final(self) -> dict[str, EventInterval]:
        return self.rounds[-1].events

    @property
    def resolved(self) -> dict[str, bool]:
        return {name: resolved(event, self.settings.width) for name, event in self.final.items()}

    @property
    def noise_limited(self) -> dict[str, bool]:
        """Per event: unresolved, yet no bracket inside its interval is wider than the spacing asked for, so its width
        is the bootstrap's (more or larger measuring batches narrow it; more checkpoints would not)."""
        last = self.rounds[-1]
        return {name: not self.resolved[name] and last.asked[name] == 0 and math.isfinite(last.events[name][0])
                for name in last.events}


def refine_events(measure: Callable[[], tuple[Sequence[int], Mapping[str, EventInterval]]],
                  add_steps: Callable[[Sequence[int]], None],
                  settings: RefinementSettings = RefinementSettings()) -> Refinement:
    """Measure the events (``measure()``: the series' steps and its events), add the steps
    :func:`refinement_steps` asks for (``add_steps``), and measure again, for at most ``settings.rounds`` rounds
    of adding (module docstring).

    Example: ``refine_events(lambda: (steps, events_of(steps)), steps.extend).resolved``.
    """
    rounds: list[RefinementRound] = []
    for round_ in range(settings.rounds + 1):
        steps, events = measure()
        plan = refinement_steps(steps, events, settings)
        added = tuple(sorted({s for new in plan.values() for s in new} - set(steps)))
        if round_ == settings.rounds:
            added = ()
        rounds.append(RefinementRound(tuple(steps), dict(events), {name: len(new) for name, new in plan.items()},
                                      added))
        if not added:
            break
        add_steps(added)
    return Refinement(settings, tuple(rounds))
