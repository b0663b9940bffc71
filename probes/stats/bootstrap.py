"""Bootstrap confidence intervals for statistics of additive probe state, resampling whole units.

Probe states are sums, so a resample of units (batches of documents, tokens, pairs) is a weighted
sum of per-unit states: ``resampled = counts @ per_unit``. Every resample is evaluated at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechprobe.validation import integer
from probes.core.errors import InputError

if TYPE_CHECKING:
    from probes.core.probe import Probe

Statistic = Callable[[Mapping[str, Tensor]], Tensor]
"""Maps summed state (each entry with a leading resample axis) to the statistic per resample."""


def bootstrap_draws(
    per_unit: Mapping[str, Float[Tensor, "unit ..."]],
    statistic: Statistic,
    *,
    n_boot: int = 1000,
    seed: int = 0,
) -> tuple[Tensor, Float[Tensor, "draw ..."]]:
    """``(estimate, draws)``: ``statistic`` on all units once, and on ``n_boot`` resamples of the units.

    ``per_unit[key][i]`` is unit ``i``'s contribution to the summed state entry ``key``; units are
    resampled with replacement (every resample evaluated at once).
    """
    if not per_unit:
        raise InputError("bootstrap_interval needs at least one per-unit state entry.")
    n_units = {int(v.shape[0]) for v in per_unit.values()}
    if len(n_units) != 1:
        raise InputError(f"Every per-unit entry must have the same number of units; got {sorted(n_units)}.")
    (n,) = n_units
    counts = resample_counts(n, n_boot, seed)
    full = {k: v.detach().cpu().double().sum(0, keepdim=True) for k, v in per_unit.items()}
    resampled = {k: torch.einsum("rn,n...->r...", counts, v.detach().cpu().double()) for k, v in per_unit.items()}
    return statistic(full)[0], statistic(resampled)


def resample_counts(n_units: int, n_boot: int, seed: int) -> Float[Tensor, "draw unit"]:
    """How often each of ``n_units`` units is drawn in each of ``n_boot`` resamples with replacement (``seed``).

    The one resampling of the package: :func:`bootstrap_draws` and the change points of
    :mod:`probes.dynamics.change_point` both draw their resamples here, so the same units, ``n_boot`` and ``seed``
    give the same draws in both. Example: ``resample_counts(4, 20, seed=0).sum(1)`` is 4 in every row.
    """
    if n_units < 2:
        raise InputError(f"A bootstrap needs at least 2 units; got {n_units}. Use more batches.")
    integer("n_boot", n_boot, 1)
    generator = torch.Generator().manual_seed(seed)
    draws = torch.randint(0, n_units, (n_boot, n_units), generator=generator)
    counts = torch.zeros(n_boot, n_units, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones(n_boot, n_units, dtype=torch.float64))


def bootstrap_interval(
    per_unit: Mapping[str, Float[Tensor, "unit ..."]],
    statistic: Statistic,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(estimate, low, high)`` of ``statistic`` with a percentile bootstrap over units.

    ``per_unit[key][i]`` is unit ``i``'s contribution to the summed state entry ``key``; the
    estimate uses all units once. Units are resampled with replacement ``n_boot`` times.

    Example: the CI of a mean over batches, ``bootstrap_interval({"s": sums, "n": counts},
    lambda st: st["s"] / st["n"])``.
    """
    estimate, values = bootstrap_draws(per_unit, statistic, n_boot=n_boot, seed=seed)
    return (estimate, *percentile_interval(values, level))


def percentile_interval(draws: Float[Tensor, "draw ..."], level: float = 0.95) -> tuple[Tensor, Tensor]:
    """``(low, high)``: the central ``level`` percentile interval of bootstrap ``draws`` (NaN draws ignored)."""
    if not 0 < level < 1:
        raise InputError(f"level must lie in (0, 1); got {level}.")
    alpha = (1 - level) / 2
    return torch.nanquantile(draws, alpha, dim=0), torch.nanquantile(draws, 1 - alpha, dim=0)


class BatchStateRecorder:
    """An ``on_batch`` callback for :func:`probes.feed_probes` that keeps each batch's state increment.

    ``recorder.per_unit(j)`` maps each state key of probe ``j`` (restricted to ``keys`` when given)
    to a tensor [batch, ...] of per-batch contributions, ready for :func:`bootstrap_interval`.
    """

    def __init__(self, keys: Callable[[str], bool] | None = None) -> None:
        self._keep = keys or (lambda key: True)
        self._previous: list[dict[str, Tensor]] = []
        self._increments: list[dict[str, list[Tensor]]] = []

    def __call__(self, index: int, probes: Sequence[Probe[Any]]) -> None:
        if not self._previous:
            self._previous = [{} for _ in probes]
            self._increments = [{} for _ in probes]
        for j, probe in enumerate(probes):
            state = {k: v for k, v in probe.state_dict().items() if self._keep(k)}
            for key, value in state.items():
                before = self._previous[j].get(key)
                self._increments[j].setdefault(key, []).append(value if before is None else value - before)
            self._previous[j] = state

    def per_unit(self, probe_index: int = 0) -> dict[str, Tensor]:
        if not self._increments:
            raise InputError("No batch was recorded; pass the recorder as on_batch to feed_probes.")
        return {key: torch.stack(values) for key, values in self._increments[probe_index].items()}
