"""Paired loss changes of the toys' causal findings: an intervention (ablated heads, uniform attention) against the
toy as trained, per unit of held-out data, with a bootstrap interval over units and a sign-flip p-value
against a null intervention (or against no change)."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from probes.stats.bootstrap import bootstrap_interval
from probes.stats.nulls import sign_flip_p_value

N_BOOT = 1000


@dataclass(frozen=True)
class LossChange:
    """A paired loss change: ``value`` = mean change (nats per counted token) of the tested condition,
    ``ci`` its 95% bootstrap interval over units, ``null_value`` the null condition's mean change (0 when the
    null is no change), ``p_value`` the sign-flip p of tested - null per unit."""

    value: float
    ci: tuple[float, float]
    null_value: float
    p_value: float


def paired_loss_change(count: Tensor, clean: Tensor, tested: Tensor, null: Tensor | None = None, *,
                       seed: int, n_boot: int = N_BOOT) -> LossChange:
    """The :class:`LossChange` of summed per-unit losses [unit]: ``clean`` (the model as trained), ``tested``
    (the tested intervention), ``null`` (the null intervention; None: no intervention, the null is no change),
    ``count`` the tokens each unit sums over. Value and interval: ``sum(tested - clean) / sum(count)`` over all
    units and over bootstrap resamples of the units; p-value: :func:`sign_flip_p_value` of ``tested - null``."""
    reference = clean if null is None else null
    total = float(count.sum())
    _, low, high = bootstrap_interval({"t": tested, "c": clean, "n": count},
                                      lambda st: (st["t"] - st["c"]) / st["n"], n_boot=n_boot, seed=seed)
    return LossChange(float((tested - clean).sum()) / total, (float(low), float(high)),
                      float((reference - clean).sum()) / total, sign_flip_p_value(tested - reference, seed=seed))
