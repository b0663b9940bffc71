"""``mechprobe dynamics --refine``: measure a series trained here, re-run its training where an event's interval is
too wide to save checkpoints there, and measure again, until each event is located to ``width`` of its step.

The loop is :func:`probes.dynamics.refinement.refine_events`; the events that take part are those that hold (a
series with no event, such as one of random weights, adds nothing); the new checkpoints come from
:func:`analyses.dynamics.bracket_rerun.rerun_series` (the training re-run from the kept state at the bracket's start,
checked to reproduce the weights at its end exactly). Each measurement is :func:`analyses.dynamics.run.run_dynamics`
on the same ``--out``, so only the new checkpoints are measured. ``OUT/refinement.json`` records every round (the
steps, each event's step and interval, the steps added), every re-run and whether each event ended resolved.

Example: ``refine_dynamics("runs/lm", "runs/lm-dynamics")[1].resolved``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from analyses.dynamics.bracket_rerun import BracketRun, check_refinable, rerun_series
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.run import run_dynamics
from analyses.dynamics.summary import DynamicsSummary
from mechprobe import records
from probes.core.atomic import atomic_write_text
from probes.dynamics.refinement import EventInterval, RefinementRound, RefinementSettings, refine_events

REFINEMENT = "refinement.json"


@dataclass(frozen=True)
class RefinementRecord:
    """``OUT/refinement.json`` (module docstring)."""

    series: str
    settings: RefinementSettings
    rounds: tuple[RefinementRound, ...]
    reruns: tuple[BracketRun, ...]
    resolved: dict[str, bool]
    noise_limited: dict[str, bool]


def holding_events(summary: DynamicsSummary) -> dict[str, EventInterval]:
    """The step and interval of every event of ``summary`` that holds."""
    return {curve: (event.change.step, event.change.step_ci) for curve, event in summary.events.events.items()
            if event.holds}


def refine_dynamics(series_folder: str | Path, out: str | Path, config: DynamicsConfig | None = None,
                    settings: RefinementSettings | None = None, *, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32, progress: bool = True
                    ) -> tuple[DynamicsSummary, RefinementRecord]:
    """Refine the series in ``series_folder`` and measure it into ``out`` (module docstring); returns the last
    measurement's summary and the record written to ``out/refinement.json``."""
    series_folder, out = Path(series_folder), Path(out)
    settings = RefinementSettings() if settings is None else settings
    check_refinable(series_folder)  # before anything is measured
    summaries: list[DynamicsSummary] = []
    reruns: list[BracketRun] = []

    def measure() -> tuple[tuple[int, ...], dict[str, EventInterval]]:
        summaries.append(run_dynamics(series_folder, out, config, device=device, dtype=dtype, progress=progress))
        return summaries[-1].steps, holding_events(summaries[-1])

    def add_steps(steps: Sequence[int]) -> None:
        reruns.extend(rerun_series(series_folder, list(steps), device=device, progress=progress))

    refinement = refine_events(measure, add_steps, settings)
    record = RefinementRecord(str(series_folder), settings, refinement.rounds, tuple(reruns), refinement.resolved,
                              refinement.noise_limited)
    atomic_write_text(out / REFINEMENT, records.to_json(record))
    return summaries[-1], record


def refinement_lines(record: RefinementRecord) -> list[str]:
    """What ``mechprobe dynamics --refine`` prints: each round's events with their interval widths, and the re-runs."""
    lines = []
    for index, round_ in enumerate(record.rounds):
        events = "; ".join(f"{curve} {step:.0f} [{ci[0]:.0f}, {ci[1]:.0f}] ({(ci[1] - ci[0]) / step:.0%} of its step)"
                           for curve, (step, ci) in round_.events.items()) or "no event holds"
        lines.append(f"refine round {index} ({len(round_.steps)} checkpoints): {events}")
    seconds = sum(run.seconds for run in record.reruns)
    lines.append(f"re-ran {len(record.reruns)} stretch(es) of training in {seconds:.0f} s, each reproducing its end "
                 f"checkpoint's weights exactly; resolved to {record.settings.width:.0%} of the step: "
                 + (", ".join(f"{curve} {'yes' if ok else 'no'}" for curve, ok in record.resolved.items()) or "none"))
    noisy = [curve for curve, limited in record.noise_limited.items() if limited]
    if noisy:
        lines.append(f"{', '.join(noisy)}: checkpoints are already dense across the interval, whose width is the "
                     f"batches' bootstrap noise; more --batches or a larger --batch-size would narrow it")
    return lines
