"""Change points of probe curves over training checkpoints, and the order of two of them, with bootstrap intervals.

A curve is one statistic measured at every checkpoint of a series on the same evaluation batches, kept as per-batch
sums (:class:`CurveUnits`) so that the curve can be recomputed on a resample of the batches: at checkpoint ``t``,

    value[t] = sum_b num[t, b] / sum_b den[t, b]  -  sum_b minus_num[t, b] / sum_b minus_den[t, b]

(the second term only for a difference of two means, e.g. the loss on the first copy of ``X`` minus the loss on
the repeated copy), or with ``divide`` the first mean over the second (a ratio of two means, e.g. same-topic
over different-topic attention). A bootstrap draw resamples the batches once, with the same counts at every
checkpoint and for every curve (the batches are the same data at every checkpoint), so two curves' events are
paired.

The change point of a curve is where it rises to its peak: with ``start`` the first checkpoint's value (the
control: the series before training, or as early as it goes) and ``end`` the value at the peak checkpoint (the
curve's largest value after the first checkpoint that it holds: the last checkpoint, or one whose next checkpoint
is still at least half-way up, so a bump seen at one checkpoint and gone at the next is not a peak; the last
checkpoint for a curve that keeps rising), the event
step is where the curve, up to the peak, crosses ``start + fraction * (end - start)`` (``fraction`` 0.5: half-way)
for the last time, i.e. from where on it stays at or above that level until the peak (a passing spike earlier is
not the event), interpolated linearly in ``log(1 + step)`` between the two checkpoints that straddle the crossing.
A curve that rises and falls again (a head that forms and is then replaced) has its event on the way up. There is
no event (NaN) when ``end <= start``. A curve can instead have a fixed event level (``crossing``; e.g. 0 for a
model's loss gain over a baseline predictor, so the event is where its loss falls below the baseline's for good):
the same rule with that level, and no event when the first checkpoint is already at it or the last below it: the
level is passed for good, so such a curve's peak is its last checkpoint (with the half-way peak rule a redrawn
initialisation that beat the baseline at one checkpoint was an event on 2 of 5 seeds).
The peak checkpoint is chosen once, on the observed curve, and kept for every
bootstrap draw (so the draws measure the rise to that checkpoint). Choosing it on the same batches favours a noisy
maximum: a flat curve's rise to its peak is positive. The p-value accounts for that search (below), and the event's
finding asks for a minimum effect besides (random-weight series: no event).
Its interval is the percentile interval of the event step over the draws (draws without an event are left out and
counted in ``draws_with_event``), widened to the two checkpoints that straddle the observed crossing (``bracket``):
the curve is only seen at the checkpoints, so the event lies somewhere between them whatever the batches say.
Whether the curve rose at all is judged on ``rise = end - start`` at the peak checkpoint: its interval over the
draws, and a one-sided p-value that allows for the peak having been searched for (a bootstrap max-T test): each
draw's rises to every checkpoint, centred on the observed ones, ``(draw[t] - draw[0]) - (value[t] - value[0])``,
give under "no rise anywhere" the distribution of the largest rise over the checkpoints; ``p`` is the share of
draws whose largest centred rise reaches the observed ``rise``.

The order of two events (A before B) is ``step_B - step_A`` per draw: its interval (widened to the differences of the
two brackets' ends) and the share of draws in which it is not positive, or either event is missing (the p-value).

A curve known exactly (a toy's weights, an attention composition computed from the weights) has no batches to
resample: :func:`curve_event` gives its event by the same rule, with the bracket as its only uncertainty.

Example::

    point = change_point(units, steps=(0, 100, 1000, 10000), n_boot=1000, seed=0)
    point.step, point.step_ci
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from mechprobe.validation import integer
from probes.core.errors import ConfigError, InputError
from probes.stats.bootstrap import percentile_interval, resample_counts


@dataclass(frozen=True)
class CurveUnits:
    """Per-batch sums of a curve at each checkpoint ``[checkpoint unit]`` (module docstring); ``minus_*`` are
    None for a plain mean, and the mean they make divides the first instead of being subtracted when ``divide``."""

    numerator: Float[Tensor, "checkpoint unit"]
    denominator: Float[Tensor, "checkpoint unit"]
    minus_numerator: Float[Tensor, "checkpoint unit"] | None = None
    minus_denominator: Float[Tensor, "checkpoint unit"] | None = None
    divide: bool = False

    def __post_init__(self) -> None:
        shapes = {tuple(t.shape) for t in self._parts()}
        if len(shapes) != 1 or len(next(iter(shapes))) != 2:
            raise InputError(f"Every part of a curve's units must have one [checkpoint unit] shape; got "
                             f"{sorted(shapes)}.")
        if (self.minus_numerator is None) != (self.minus_denominator is None):
            raise InputError("minus_numerator and minus_denominator go together (a difference of two means).")
        if self.divide and self.minus_numerator is None:
            raise InputError("divide needs minus_numerator and minus_denominator (the mean to divide by).")

    def _parts(self) -> list[Tensor]:
        return [t for t in (self.numerator, self.denominator, self.minus_numerator, self.minus_denominator)
                if t is not None]

    @property
    def n_checkpoints(self) -> int:
        return int(self.numerator.shape[0])

    @property
    def n_units(self) -> int:
        return int(self.numerator.shape[1])

    def values(self, counts: Float[Tensor, "draw unit"] | None = None) -> Float[Tensor, "draw checkpoint"]:
        """The curve with each unit weighted by ``counts`` (one row per draw; None: every unit once)."""
        if counts is None:
            counts = torch.ones(1, self.n_units, dtype=torch.float64)

        def mean(num: Tensor, den: Tensor) -> Tensor:
            return (counts @ num.double().T) / (counts @ den.double().T)

        value = mean(self.numerator, self.denominator)
        if self.minus_numerator is not None and self.minus_denominator is not None:
            second = mean(self.minus_numerator, self.minus_denominator)
            value = value / second if self.divide else value - second
        return value


def peak_index(values: Float[Tensor, " checkpoint"], fraction: float = 0.5, crossing: float | None = None) -> int:
    """The checkpoint (after the first) where the curve is largest among those it holds: the last checkpoint, or one
    whose next checkpoint is still at least ``fraction`` of the way up from the first value to it (a one-checkpoint
    bump that falls straight back is no peak); the earliest of equal maxima. With a ``crossing`` level the peak is
    the last checkpoint: the level is passed for good or not at all, so the value judged is the one the curve ends
    at (a curve at -0.5 that touches +0.1 once and falls back below 0 has no event)."""
    if values.shape[0] < 2:
        raise InputError(f"A curve needs at least 2 checkpoints; got {values.shape[0]}.")
    values = values.double()
    level = values[0] + fraction * (values[1:] - values[0])
    held = torch.cat([values[2:] >= level[:-1], torch.ones(1, dtype=torch.bool)])
    if crossing is not None:
        return values.shape[0] - 1
    rest = torch.nan_to_num(torch.where(held, values[1:], float("nan")), nan=float("-inf"))
    return 1 + int(rest.argmax())


def rise_steps(values: Float[Tensor, "draw checkpoint"], steps: Sequence[int], fraction: float = 0.5,
               peak: int | None = None, level: float | None = None) -> Float[Tensor, " draw"]:
    """Per row, the step where the curve up to checkpoint ``peak`` (default: the last) crosses
    ``start + fraction * (end - start)`` (or the fixed ``level``) for the last time (from there on it stays at or
    above it until ``peak``), interpolated in ``log(1 + step)``, with ``end`` the value at ``peak``; NaN where
    ``end <= start``, and for a ``level`` also where ``start >= level`` or ``end < level`` (module docstring)."""
    if not 0 < fraction < 1:
        raise ConfigError(f"fraction must lie in (0, 1) (0.5: half-way from the first to the last value); "
                          f"got {fraction!r}.")
    x = torch.log1p(torch.tensor([float(s) for s in steps], dtype=torch.float64))
    if values.shape[-1] != x.shape[0]:
        raise InputError(f"The curve has {values.shape[-1]} checkpoints but {x.shape[0]} steps were given.")
    if peak is not None:
        values, x = values[:, : peak + 1], x[: peak + 1]
    start, end = values[:, 0], values[:, -1]
    threshold = start + fraction * (end - start) if level is None else torch.full_like(start, level)
    reached = values >= threshold[:, None]
    reached[:, 0] = False  # the start is below the threshold whenever the curve rises
    # stays[t]: reached at t and at every later checkpoint; the event is the first such t (a passing spike is not)
    stays = reached.flip(1).long().cumprod(1).flip(1).bool()
    index = torch.where(stays.any(1), stays.double().argmax(1), torch.zeros_like(start, dtype=torch.long))
    index = index.clamp_min(1)
    rows = torch.arange(values.shape[0])
    y0, y1 = values[rows, index - 1], values[rows, index]
    share = ((threshold - y0) / (y1 - y0)).clamp(0, 1).nan_to_num(1.0)
    step = torch.expm1(x[index - 1] + share * (x[index] - x[index - 1]))
    crosses = (end > start) & stays.any(1) & (start < threshold) & (end >= threshold)
    return torch.where(crosses, step, torch.full_like(step, float("nan")))


def crossing_bracket(values: Float[Tensor, " checkpoint"], steps: Sequence[int], fraction: float = 0.5,
                     peak: int | None = None, level: float | None = None) -> tuple[float, float]:
    """The steps of the two checkpoints between which the curve (up to checkpoint ``peak``, default the last) last
    crosses its event level (``fraction`` of its rise, or the fixed ``level``; NaN: no event)."""
    if peak is not None:
        values, steps = values[: peak + 1], list(steps)[: peak + 1]
    start, end = float(values[0]), float(values[-1])
    threshold = start + fraction * (end - start) if level is None else level
    if not (end > start and start < threshold <= end):
        return (math.nan, math.nan)
    index = next(i for i in range(1, len(steps)) if all(float(v) >= threshold for v in values[i:]))
    return (float(steps[index - 1]), float(steps[index]))


@dataclass(frozen=True)
class CurveEvent:
    """The event of one exactly known curve (no batches to resample: a toy's weights or attention composition
    recorded during training): its ``step`` (NaN: the curve never rises above its first value), the two
    checkpoints that straddle it (``bracket``), the first and the peak values (``start``, ``end``) and the peak's
    step."""

    step: float
    bracket: tuple[float, float]
    start: float
    end: float
    peak_step: float
    fraction: float

    @property
    def level(self) -> float:
        """The value the curve crosses at its event: ``start + fraction * (end - start)``."""
        return self.start + self.fraction * (self.end - self.start)


def curve_event(values: Sequence[float] | Tensor, steps: Sequence[int], fraction: float = 0.5) -> CurveEvent:
    """The event of a plain curve by the rule of :func:`change_point` (module docstring): the held peak
    (:func:`peak_index`), the last crossing of the level on the way up to it (:func:`rise_steps`, interpolated in
    ``log(1 + step)``) and its bracket (:func:`crossing_bracket`).

    Example: ``curve_event([0.0, 0.1, 0.9, 1.0], (0, 10, 100, 1000)).step`` is about 32 (the level 0.5 lies
    half-way from 0.1 to 0.9, so half-way from 10 to 100 in ``log(1 + step)``).
    """
    curve = torch.as_tensor(values, dtype=torch.float64)
    if curve.ndim != 1 or len(steps) != curve.shape[0]:
        raise InputError(f"A curve needs one value per step; got shape {tuple(curve.shape)} for {len(steps)} steps.")
    if not bool(torch.isfinite(curve).all()):
        raise InputError("A curve's values must be finite (record the curve at every listed step).")
    peak = peak_index(curve, fraction)
    step = float(rise_steps(curve[None], steps, fraction, peak)[0])
    return CurveEvent(step, crossing_bracket(curve, steps, fraction, peak), float(curve[0]), float(curve[peak]),
                      float(steps[peak]), float(fraction))


@dataclass(frozen=True)
class ChangePoint:
    """Where one curve rises: ``step`` with ``step_ci`` and the straddling checkpoints ``bracket`` (module
    docstring), ``start`` and ``end`` (the first and the peak checkpoints' values, the peak at ``peak_step``) with
    ``end_ci``, the rise ``end - start`` with ``rise_ci`` and its one-sided bootstrap max-T ``p_value``, and the
    share of draws in which the curve rose (``draws_with_event``)."""

    step: float
    step_ci: tuple[float, float]
    bracket: tuple[float, float]
    start: float
    start_ci: tuple[float, float]
    end: float
    end_ci: tuple[float, float]
    rise: float
    rise_ci: tuple[float, float]
    p_value: float
    draws_with_event: float
    fraction: float
    peak_step: float = math.nan


def _widened(ci: tuple[float, float], bounds: tuple[float, float]) -> tuple[float, float]:
    """``ci`` stretched to cover ``bounds`` (NaN bounds: ``ci`` as it is)."""
    if math.isnan(bounds[0]) or math.isnan(bounds[1]):
        return ci
    if math.isnan(ci[0]):
        return bounds
    return (min(ci[0], bounds[0]), max(ci[1], bounds[1]))


def _interval(draws: Tensor, level: float) -> tuple[float, float]:
    if not bool(torch.isfinite(draws).any()):
        return (math.nan, math.nan)
    low, high = percentile_interval(draws, level)
    return (float(low), float(high))


def change_point(units: CurveUnits, steps: Sequence[int], *, n_boot: int = 1000, seed: int = 0,
                 fraction: float = 0.5, level: float = 0.95, counts: Tensor | None = None,
                 crossing: float | None = None) -> ChangePoint:
    """The :class:`ChangePoint` of a curve (module docstring). ``counts`` (from
    :func:`probes.stats.bootstrap.resample_counts`) pairs this curve's draws with another's; by default ``n_boot``
    (at least 10) are drawn from ``seed``. ``crossing``: the event is where
    the curve passes that fixed value for good (e.g. 0 for a loss's gain over a baseline: where the loss falls
    below the baseline's), not ``fraction`` of its rise; no event when the first checkpoint is already there.

    Example: ``change_point(units, (0, 10, 100), n_boot=500, seed=0).step``.
    """
    if units.n_checkpoints != len(steps) or len(steps) < 2:
        raise InputError(f"A change point needs one step per checkpoint and at least 2 checkpoints; got "
                         f"{len(steps)} steps for {units.n_checkpoints} checkpoints.")
    if counts is None:
        counts = resample_counts(units.n_units, integer("n_boot", n_boot, 10), seed)
    observed = units.values()
    draws = units.values(counts)
    peak = peak_index(observed[0], fraction, crossing)
    step = rise_steps(observed, steps, fraction, peak, crossing)[0]
    draw_steps = rise_steps(draws, steps, fraction, peak, crossing)
    bracket = crossing_bracket(observed[0], steps, fraction, peak, crossing)
    rises = draws[:, peak] - draws[:, 0]
    centred = (draws - draws[:, :1]) - (observed - observed[:, :1])
    largest = torch.nan_to_num(centred[:, 1:], nan=float("-inf")).max(1).values
    finite = torch.isfinite(largest)
    observed_rise = observed[0, peak] - observed[0, 0]
    p_value = float((1 + ((largest >= observed_rise) & finite).sum()) / (1 + finite.sum()))
    return ChangePoint(
        step=float(step), step_ci=_widened(_interval(draw_steps, level), bracket), bracket=bracket,
        start=float(observed[0, 0]), start_ci=_interval(draws[:, 0], level),
        end=float(observed[0, peak]), end_ci=_interval(draws[:, peak], level),
        rise=float(observed[0, peak] - observed[0, 0]), rise_ci=_interval(rises, level), p_value=p_value,
        draws_with_event=float(torch.isfinite(draw_steps).double().mean()), fraction=float(fraction),
        peak_step=float(steps[peak]))


@dataclass(frozen=True)
class EventOrder:
    """``later - earlier`` event steps: the observed difference, its interval over paired draws, and the
    one-sided p-value (share of draws where it is not positive or an event is missing)."""

    earlier: str
    later: str
    difference: float
    ci: tuple[float, float]
    p_value: float


def event_order(earlier: CurveUnits, later: CurveUnits, steps: Sequence[int], *, names: tuple[str, str],
                n_boot: int = 1000, seed: int = 0, fraction: float = 0.5, level: float = 0.95,
                crossings: tuple[float | None, float | None] = (None, None)) -> EventOrder:
    """How many steps after ``earlier``'s event ``later``'s comes (module docstring); both curves must share
    their batches (the draws are paired). ``crossings``: each curve's fixed event level (:func:`change_point`).

    Example: ``event_order(previous_token, induction, steps, names=("previous_token", "induction")).ci``.
    """
    if earlier.n_units != later.n_units:
        raise InputError(f"The two curves must be measured on the same batches; got {earlier.n_units} and "
                         f"{later.n_units} units.")
    counts = resample_counts(earlier.n_units, integer("n_boot", n_boot, 10), seed)
    cross_a, cross_b = crossings
    peak_a = peak_index(earlier.values()[0], fraction, cross_a)
    peak_b = peak_index(later.values()[0], fraction, cross_b)
    a = rise_steps(earlier.values(), steps, fraction, peak_a, cross_a)[0]
    b = rise_steps(later.values(), steps, fraction, peak_b, cross_b)[0]
    draws = (rise_steps(later.values(counts), steps, fraction, peak_b, cross_b)
             - rise_steps(earlier.values(counts), steps, fraction, peak_a, cross_a))
    not_after = ~(draws > 0)  # NaN (an event missing) counts against the order
    first = crossing_bracket(earlier.values()[0], steps, fraction, peak_a, cross_a)
    second = crossing_bracket(later.values()[0], steps, fraction, peak_b, cross_b)
    ci = _widened(_interval(draws, level), (second[0] - first[1], second[1] - first[0]))
    return EventOrder(names[0], names[1], float(b - a), ci,
                      float((1 + not_after.sum()) / (1 + draws.shape[0])))
