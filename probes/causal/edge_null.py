"""An edge's effect beside its null of random edges of the same shape, and its verdict.

The null: random ``(sender, receiver)`` pairs at the measured edge's layer distance that share no head with it,
through the same receiver input (:func:`probes.causal.edge_plan.distance_matched_edges`), measured in groups and
stopped once the decision at the level is known (:func:`probes.stats.sequential.sequential_null`, issue 36's rule):
"is this edge's effect larger than a random edge's of the same shape?". Both effects
(:data:`probes.causal.edges.EFFECTS`) are tested at once, or, with ``null_loss=False``
(:class:`probes.causal.edge_plan.EdgePlan`), the receiver's score drop alone: the null's edges skip the pass from
the receiver's layer to the loss (their loss change is NaN, and so are the loss change's p-value and null q99), the
draws stop on the score's decision, and the measured edge keeps both effects with their intervals.

An edge *holds* (:meth:`EdgeEffect.finding`, :class:`probes.stats.findings.Finding`) when its effect clears the
null's 99th percentile with p < 0.01, the lower end of its 95% interval over sequences lies above the null's q99 and
the control model's same edge, and the effect is at least ``min_effect`` above the larger of the two; it is *absent*
when the interval's upper end lies below that threshold, else *inconclusive*.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from mechprobe.forward import model_device
from probes.causal.ablation import batches_as_read, reusable_batches
from probes.causal.edge_plan import EdgePlan, Head, format_edge
from probes.causal.edges import (
    EFFECTS,
    EdgeSums,
    check_edge_hooks,
    clean_passes,
    edge_effects,
    edge_route,
    edge_sums,
)
from probes.causal.means import HeadMeans, head_output_means
from probes.causal.null import NULL_QUANTILE
from probes.causal.pass_size import PASS_BYTES
from probes.causal.slices import SliceFn
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.result import ProbeResult, Provenance
from probes.stats.bootstrap import bootstrap_interval
from probes.stats.findings import Finding
from probes.stats.nulls import permutation_p_value
from probes.stats.sequential import DRAW_GROUP, SequentialNull, SequentialRule, sequential_null

if TYPE_CHECKING:
    import pandas as pd

EDGE_NULL = "99th percentile of random edges at the same layer distance through the same input, sharing no head"
MIN_EFFECT = {"loss_change": 0.1, "score_drop": 0.1}
"""The smallest effect an edge must show above the larger of its null's q99 and its control: 0.1 nats per token of
the slice's loss, 0.1 of the receiver's attention mass on its targets (the head ablations' and head scores'
thresholds)."""


def edge_with_null(model: HookedModel, plan: EdgePlan, batches: Sequence[Any], slice_fn: SliceFn, *,
                   means: HeadMeans | None = None, max_rows: int = 256, pass_bytes: int = PASS_BYTES,
                   shortcuts: bool = True, stop_at: float | None = 0.01, group: int = DRAW_GROUP
                   ) -> tuple[EdgeSums, SequentialNull | None]:
    """The sums of the plan's edge and of the random edges drawn, and the null of both effects (None without
    draws; of the score drop alone, the loss change's p-value NaN, where ``plan.null_loss`` is False). With
    ``stop_at`` the draws are measured ``group`` at a time until each tested effect's decision at that level is
    known; ``None`` measures all of them (fixed-count p-value). The draws used are the plan's first ones."""
    batches = list(batches)
    if not batches:
        raise InputError("No batches were given: the batch iterable was empty.")
    route = edge_route(model, plan, batches[0], slice_fn, shortcuts=shortcuts)
    check_edge_hooks(model, plan)
    # the groups share one clean pass per batch where what it keeps fits the pass budget
    clean = clean_passes(model, plan, batches, slice_fn, route, max_bytes=pass_bytes) if stop_at is not None else None

    def measure(start: int, stop: int) -> EdgeSums:
        return edge_sums(model, plan.subset(start, stop), batches, slice_fn, means=means, max_rows=max_rows,
                         pass_bytes=pass_bytes, route=route, clean=clean)

    sums = measure(0, 1 + (plan.n_draws if stop_at is None else min(group, plan.n_draws)))
    values = sums.effects()
    if plan.n_draws == 0:
        return sums, None
    # the effects the null tests: without the null's loss, the loss change has nothing to be judged against
    tested = values[0].clone()
    if not plan.null_loss:
        tested[EFFECTS.index("loss_change")] = float("nan")
    if stop_at is None:
        draws = values[1:]
        return sums, SequentialNull(draws, permutation_p_value(tested, draws),
                                    torch.full(values[0].shape, plan.n_draws, dtype=torch.long),
                                    torch.zeros(values[0].shape, dtype=torch.bool), plan.n_draws)

    def draw(start: int, stop: int) -> Tensor:
        nonlocal sums
        if 1 + stop > sums.n_edges:
            sums = sums.extend(measure(sums.n_edges, 1 + stop))
        return sums.effects()[1 + start : 1 + stop]

    null = sequential_null(tested, draw, SequentialRule(plan.n_draws, stop_at, group))
    return sums, null  # the sums after the draws extended them


@dataclass(frozen=True)
class EdgeEffect(ProbeResult):
    """The effect of ``sender`` on ``receiver`` through the receiver's ``input`` (``k``, ``q`` or ``v``), the
    sender's output replaced by ``method`` there alone.

    ``effects``: :data:`probes.causal.edges.EFFECTS`; ``value[i]`` effect ``i`` over all sequences, ``low``/``high``
    its percentile bootstrap interval over sequences; ``clean_loss`` the slice's clean loss (nats per token) and
    ``clean_score`` the receiver's clean attention mass on its targets; ``null[d, i]`` effect ``i`` of random edge
    ``null_edges[d]`` (``(l_s, h_s, l_r, h_r)``), ``null_q99`` its 99th percentile, ``p_value`` the sequential
    Monte Carlo p-value (NaN without draws), ``null_stop`` how many draws and why. A null measured on the score
    alone (``null_loss=False``) has NaN loss changes, so the loss change's ``null_q99`` and ``p_value`` are NaN."""

    sender: list[Any]
    receiver: list[Any]
    input: str
    method: str
    effects: list[Any]
    value: Tensor
    low: Tensor
    high: Tensor
    clean_loss: float
    clean_score: float
    null: Tensor
    null_q99: Tensor
    p_value: Tensor
    null_edges: Tensor
    null_stop: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sender", [int(v) for v in self.sender])
        object.__setattr__(self, "receiver", [int(v) for v in self.receiver])
        object.__setattr__(self, "effects", list(self.effects))

    @property
    def name(self) -> str:
        """``L0H0 -> L1H0 (k)``."""
        (ls, hs), (lr, hr) = self.sender, self.receiver
        return f"{format_edge((ls, hs), (lr, hr))} ({self.input})"

    def _index(self, effect: str) -> int:
        if effect not in self.effects:
            raise ConfigError(f"No effect {effect!r}; an edge has {self.effects}.")
        return self.effects.index(effect)

    def finding(self, effect: str = "loss_change", control: EdgeEffect | None = None,
                min_effect: float | None = None) -> Finding:
        """The verdict on ``effect`` (module docstring): against the null's q99, ``control`` (the same edge of the
        random-weight control model, measured the same way) and ``min_effect`` (default :data:`MIN_EFFECT`).

        Refused (:class:`ConfigError`) for an effect the null's draws did not measure (``null_loss=False``: the
        loss change): a :class:`Finding` ignores a missing (NaN) null value, so beside a control it would be judged
        against the control alone and could come out ``absent``, a verdict no null backs."""
        i = self._index(effect)
        if self.null.shape[0] and math.isfinite(float(self.value[i])) and bool(self.null[:, i].isnan().all()):
            raise ConfigError(f"The null's {self.null.shape[0]} random edges of {self.name} were measured without "
                              f"their {effect.replace('_', ' ')} (null_loss=False skips their loss pass), so this "
                              f"edge's {effect} has no null to be judged against; judge 'score_drop', or measure "
                              f"with edge_effect(..., null_loss=True).")
        if control is not None and (control.sender, control.receiver, control.input) != (
                self.sender, self.receiver, self.input):
            raise InputError(f"The control must be the same edge ({self.name}); got {control.name}.")
        finding = Finding(f"{effect.replace('_', ' ')} of edge {self.name}, sender {self.method}-replaced",
                          float(self.value[i]), (float(self.low[i]), float(self.high[i])), EDGE_NULL,
                          float(self.null_q99[i]), float(self.p_value[i]),
                          MIN_EFFECT[effect] if min_effect is None else min_effect,
                          n_units=self.provenance.n_sequences, null_draws=int(self.null.shape[0]) or None,
                          null_stop=self.null_stop, selection="edge fixed before the measured batches")
        if control is None:
            return finding
        j = control._index(effect)
        return finding.with_control(float(control.value[j]), (float(control.low[j]), float(control.high[j])))

    def to_dataframe(self) -> pd.DataFrame:
        """One row per effect: value, interval, null q99, p-value, draws."""
        import pandas as pd

        return pd.DataFrame([{"edge": self.name, "effect": name, "method": self.method, "value": float(self.value[i]),
                              "low": float(self.low[i]), "high": float(self.high[i]),
                              "null_q99": float(self.null_q99[i]), "p_value": float(self.p_value[i]),
                              "n_draws": int(self.null.shape[0])} for i, name in enumerate(self.effects)])

    @classmethod
    def from_sums(cls, sums: EdgeSums, plan: EdgePlan, provenance: Provenance, *, null: SequentialNull | None = None,
                  n_boot: int = 1000, level: float = 0.95, seed: int = 0) -> EdgeEffect:
        """The result of merged :class:`EdgeSums` (bootstrap over their sequences) and the null of their random
        edges (:func:`edge_with_null`; None: no draws)."""
        values = sums.effects()
        measured = {key: value[:, :1] if value.ndim == 2 else value for key, value in sums.state().items()}
        if sums.tokens.shape[0] >= 2:
            _, low, high = bootstrap_interval(measured, lambda st: edge_effects(st)[:, 0], n_boot=n_boot,
                                              level=level, seed=seed)
        else:
            low = high = torch.full_like(values[0], float("nan"))
        draws = values[:0] if null is None else null.draws
        nan = torch.full_like(values[0], float("nan"))
        return cls(provenance=provenance, sender=list(plan.sender), receiver=list(plan.receiver), input=plan.input,
                   method=plan.method, effects=list(EFFECTS), value=values[0], low=low, high=high,
                   clean_loss=float(sums.clean_loss.sum() / sums.tokens.sum()),
                   clean_score=float(sums.clean_mass[:, 0].sum() / sums.queries.sum()), null=draws,
                   null_q99=torch.nanquantile(draws, NULL_QUANTILE, dim=0) if draws.shape[0] else nan,
                   p_value=nan if null is None else null.p_value, null_edges=plan.edges[1 : 1 + draws.shape[0]],
                   null_stop="" if null is None else null.why())


def edge_effect(model: HookedModel, sender: Head, receiver: Head, batches: Iterable[Any], *, slice_fn: SliceFn,
                input: str = "k", method: str = "mean", score: str = "induction", n_draws: int = 0, seed: int = 0,
                means: HeadMeans | None = None, n_boot: int = 1000, level: float = 0.95, max_rows: int = 256,
                pass_bytes: int = PASS_BYTES, data: str = "unspecified", loss: str | None = None,
                shortcuts: bool = True, stop_at: float | None = 0.01, null_loss: bool = True) -> EdgeEffect:
    """Path-patch the edge ``sender -> receiver`` through the receiver's ``input`` on ``batches``: the sender's
    output replaced by ``method`` (``zero``, ``mean``: its mean on ``batches``, computed first unless ``means`` is
    given, or ``resample``) in that input alone (:mod:`probes.causal.edges`), measured on the loss of ``slice_fn``'s
    positions and on the receiver's ``score`` pattern, beside ``n_draws`` random edges of the same shape
    (:func:`edge_with_null`; ``seed`` draws them and fixes the resample derangement and the bootstrap).
    ``null_loss=False`` measures the null's edges on the receiver's score alone (a fraction of the cost on a deep
    model: no pass from the receiver's layer to the loss per draw); the edge's own loss change and its interval are
    kept, but ``finding("loss_change")`` is then refused.

    Example::

        batches = [probes.repeated_random_tokens(info, seq_len=20, n_sequences=4, generator=g) for _ in range(4)]
        result = edge_effect(model, (3, 1), (5, 4), batches, slice_fn=probes.repeated_half(20), input="k",
                             n_draws=200)
        result.finding("loss_change", control=same_edge_on_the_control).verdict
    """
    info = ModelInfo.of(model)
    plan = EdgePlan.build(info, sender, receiver, input=input, method=method, n_draws=n_draws, seed=seed, loss=loss,
                          score=score, null_loss=null_loss)
    batches = list(reusable_batches(batches, method))
    if method == "mean" and means is None:
        means = head_output_means(model, plan.sender_layers,
                                  batches_as_read(model, batches, {"slice": slice_fn}, plan.loss))
    sums, null = edge_with_null(model, plan, batches, slice_fn, means=means, max_rows=max_rows,
                                pass_bytes=pass_bytes, shortcuts=shortcuts, stop_at=stop_at)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    provenance = Provenance(
        model=info.name, data=data, probe="EdgeEffect",
        settings={"input": input, "method": method, "score": score, "n_draws": n_draws, "n_boot": n_boot,
                  "level": level, "loss": plan.loss, "stop_at": stop_at, "null_loss": null_loss,
                  "null": "random edges at the same layer distance through the same input, no head shared"},
        seed=seed, n_sequences=int(sums.tokens.shape[0]), n_tokens=int(sums.tokens.sum()),
        device=str(model_device(model)), dtype=str(dtype))
    return EdgeEffect.from_sums(sums, plan, provenance, null=null, n_boot=n_boot, level=level, seed=seed)
