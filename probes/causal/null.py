"""An ablation beside its random-head null, the draws measured in groups and stopped once the decision is known.

:func:`ablation_with_null` measures the plan's heads with the first group of random head sets, then further groups
only while some entry of the statistic could still reach the level (:mod:`probes.stats.sequential`): a model
whose random head sets often do as much as its chosen heads (a random-weight control) stops after a group or two,
one whose heads beat every draw so far is measured on all of them. Every analysis that ablates with a null calls
this one function; ``stop_at=None`` draws every set at once and gives the fixed-count p-value.

The statistic maps the loss changes ``[..., set, slice]`` (:meth:`AblationSums.loss_change`) to one value, or a row
of values, per head set: :func:`slice_changes` (the change on each slice) or :func:`signed_contrast` (a signed sum
of the slices' changes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from probes.causal.ablation import (
    AblationPlan,
    AblationSums,
    ablation_clean_passes,
    ablation_route,
    ablation_sums,
)
from probes.causal.means import HeadMeans
from probes.causal.pass_size import PASS_BYTES
from probes.causal.slices import SliceFn
from probes.core.errors import InputError
from probes.core.model_kind import HookedModel
from probes.stats.bootstrap import bootstrap_interval
from probes.stats.nulls import permutation_p_value
from probes.stats.sequential import DRAW_GROUP, SequentialNull, SequentialRule, sequential_null

NULL_QUANTILE = 0.99
"""The null value a finding must clear: this quantile of the random head sets' statistic."""

SetStatistic = Callable[[Tensor], Tensor]


def slice_changes(changes: Float[Tensor, "... set slice"]) -> Float[Tensor, "... set slice"]:
    """The mean per-token loss change on each slice, per head set."""
    return changes


def signed_contrast(signs: Sequence[float]) -> SetStatistic:
    """The statistic ``sum_s signs[s] * change[s]`` per head set (e.g. ``(1, -1)``: slice 0 minus slice 1)."""
    weights = torch.tensor([float(s) for s in signs], dtype=torch.float64)

    def contrast(changes: Float[Tensor, "... set slice"]) -> Float[Tensor, "... set"]:
        if changes.shape[-1] != len(weights):
            raise InputError(f"Give one sign per slice ({changes.shape[-1]}); got {len(weights)}.")
        return changes.double() @ weights

    return contrast


def per_set(sums: AblationSums, statistic: SetStatistic) -> Tensor:
    """``statistic`` of every head set of ``sums`` over all its batches: ``[set, ...]``."""
    return statistic(sums.loss_change())


def measured_interval(sums: AblationSums, statistic: SetStatistic, *, n_boot: int, level: float = 0.95,
                      seed: int) -> tuple[Tensor, Tensor]:
    """The percentile bootstrap interval ``(low, high)`` of the measured heads' statistic (set 0) over the sums'
    rows (the batches); NaN with one row."""
    if sums.count.shape[0] < 2:
        nan = torch.full_like(per_set(sums, statistic)[0], float("nan"))
        return nan, nan
    _, low, high = bootstrap_interval(
        {"a": sums.ablated[:, 0], "c": sums.clean, "n": sums.count},
        lambda st: statistic(((st["a"] - st["c"]) / st["n"])[:, None])[:, 0], n_boot=n_boot, level=level, seed=seed)
    return low, high


def ablation_with_null(model: HookedModel, plan: AblationPlan, batches: Sequence[Any], slices: Mapping[str, SliceFn],
                       statistic: SetStatistic = slice_changes, *, means: HeadMeans | None = None,
                       max_rows: int = 256, pass_bytes: int = PASS_BYTES, shortcuts: bool = True,
                       stop_at: float | None = 0.01, group: int = DRAW_GROUP
                       ) -> tuple[AblationSums, SequentialNull | None]:
    """The sums of the plan's heads and of the random head sets drawn, and the null of ``statistic`` (None
    without draws). With ``stop_at`` (the level), the draws are measured ``group`` at a time and stop where every
    entry's decision at that level is known (:func:`probes.stats.sequential.sequential_null`); ``None`` measures
    all of them and gives the fixed-count p-value. The draws used are the plan's first ones either way."""
    batches = list(batches)
    if not batches:
        raise InputError("No batches were given: the batch iterable was empty.")
    route = ablation_route(model, plan, batches[0], slices, shortcuts=shortcuts)
    # the groups share one clean pass per batch where what it keeps fits the pass budget
    clean = (ablation_clean_passes(model, plan, batches, slices, route, max_bytes=pass_bytes)
             if stop_at is not None else None)

    def measure(start: int, stop: int) -> AblationSums:
        return ablation_sums(model, plan.subset(start, stop), batches, slices, means=means, max_rows=max_rows,
                             pass_bytes=pass_bytes, route=route, clean=clean)

    first = 1 + (plan.n_draws if stop_at is None else min(group, plan.n_draws))
    sums = measure(0, first)
    values = per_set(sums, statistic)
    if plan.n_draws == 0:
        return sums, None
    if stop_at is None:
        draws = values[1:].double()
        every = torch.full(values[0].shape, plan.n_draws, dtype=torch.long)
        return sums, SequentialNull(draws, permutation_p_value(values[0], draws), every,
                                    torch.zeros(values[0].shape, dtype=torch.bool), plan.n_draws)

    def draw(start: int, stop: int) -> Tensor:
        nonlocal sums
        if 1 + stop > sums.n_sets:
            sums = sums.extend(measure(sums.n_sets, 1 + stop))
        return per_set(sums, statistic)[1 + start : 1 + stop]

    null = sequential_null(values[0], draw, SequentialRule(plan.n_draws, stop_at, group))
    return sums, null  # the sums after the draws extended them
