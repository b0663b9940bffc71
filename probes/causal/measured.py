"""One ablation measured from start to end: the plan of heads and random sets, the heads' means (mean ablation), the
sums beside the random-head null, and the bootstrap interval of the heads' statistic.

:func:`probes.causal.result.head_ablation` (the change on each slice) and the report's causal findings
(:func:`analyses.pretrained.causal.measure_ablation`: a signed contrast of slices) both measure this way; they
differ only in what they make of the :class:`MeasuredAblation`.

Example::

    measured = measured_ablation(model, [(1, 0)], batches, slices={"repeated_half": repeated_half(50)},
                                 n_draws=200)
    measured.value, (measured.low, measured.high), measured.p_value
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from probes.causal.ablation import AblationPlan, AblationSums, batches_as_read, reusable_batches
from probes.causal.means import HeadMeans, head_output_means
from probes.causal.null import (
    NULL_QUANTILE,
    SetStatistic,
    ablation_with_null,
    measured_interval,
    per_set,
    slice_changes,
)
from probes.causal.pass_size import PASS_BYTES
from probes.causal.slices import SliceFn
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.stats.sequential import SequentialNull


@dataclass(frozen=True)
class MeasuredAblation:
    """The ``plan``, its merged ``sums`` (one row per batch), the statistic of the plan's heads (``value``) with its
    percentile bootstrap interval over batches (``low``, ``high``; NaN with one batch) and the sequential ``null``
    of its random head sets (None without draws)."""

    plan: AblationPlan
    sums: AblationSums
    value: Tensor
    low: Tensor
    high: Tensor
    null: SequentialNull | None

    @property
    def null_draws(self) -> Tensor:
        """The statistic of each random head set measured ``[draw, ...]`` (no rows without a null)."""
        return self.value[None][:0] if self.null is None else self.null.draws

    @property
    def null_q99(self) -> Tensor:
        """The :data:`~probes.causal.null.NULL_QUANTILE` of the draws (NaN without any)."""
        draws = self.null_draws
        if draws.shape[0] == 0:
            return torch.full_like(self.value, float("nan"))
        return torch.nanquantile(draws, NULL_QUANTILE, dim=0)

    @property
    def p_value(self) -> Tensor:
        """The null's sequential Monte Carlo p-value (NaN without a null)."""
        return torch.full_like(self.value, float("nan")) if self.null is None else self.null.p_value

    @property
    def clean_loss(self) -> Tensor:
        """The unablated mean loss per slice over every batch."""
        return self.sums.clean.sum(0) / self.sums.count.sum(0)

    @property
    def n_tokens(self) -> Tensor:
        """The tokens counted on each slice over every batch."""
        return self.sums.count.sum(0)


def measured_ablation(model: HookedModel, heads: Iterable[tuple[int, int]], batches: Iterable[Any], *,
                      slices: Mapping[str, SliceFn], statistic: SetStatistic = slice_changes, method: str = "mean",
                      n_draws: int = 0, seed: int = 0, means: HeadMeans | None = None, n_boot: int = 1000,
                      level: float = 0.95, max_rows: int = 256, pass_bytes: int = PASS_BYTES, loss: str | None = None,
                      shortcuts: bool = True, stop_at: float | None = 0.01) -> MeasuredAblation:
    """Ablate ``heads`` on ``batches`` beside up to ``n_draws`` layer-matched random sets and measure ``statistic``
    (the arguments as :func:`probes.causal.result.head_ablation` takes them): the plan
    (:meth:`AblationPlan.build`, ``seed``), the heads' means on ``batches`` as the model reads them unless given
    (``method="mean"``), the sums and the null (:func:`probes.causal.null.ablation_with_null`, stopped at
    ``stop_at``), and the interval (:func:`probes.causal.null.measured_interval`, ``seed``)."""
    plan = AblationPlan.build(ModelInfo.of(model), heads, method=method, n_draws=n_draws, seed=seed, loss=loss)
    batches = reusable_batches(batches, method)
    if method == "mean" and means is None:
        means = head_output_means(model, plan.layers, batches_as_read(model, batches, slices, plan.loss))
    sums, null = ablation_with_null(model, plan, list(batches), slices, statistic, means=means, max_rows=max_rows,
                                    pass_bytes=pass_bytes, shortcuts=shortcuts, stop_at=stop_at)
    low, high = measured_interval(sums, statistic, n_boot=n_boot, level=level, seed=seed)
    return MeasuredAblation(plan, sums, per_set(sums, statistic)[0], low, high, null)

