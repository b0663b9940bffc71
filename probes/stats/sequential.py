"""Sequential Monte Carlo p-values (Besag & Clifford 1991): resampling nulls that stop drawing once the decision
at the level is known.

A null is drawn in groups. An entry (one statistic; a null may test several at once) stops as soon as ``h`` of its
draws reached the observed value, with ``h = ceil(alpha * max_draws)`` (at least 1): from then on the fixed-count
p-value over all ``max_draws`` draws could not fall below ``alpha`` whatever the remaining draws give, since it is
at least ``(1 + h) / (1 + max_draws) >= alpha``. Its p-value is then ``h / n_h``, ``n_h`` the draw that brought
the ``h``-th hit, which is at least ``h / max_draws >= alpha``; an entry that never gets ``h`` hits is drawn to
the full count and gets the fixed-count p-value ``(1 + hits) / (1 + max_draws)``. Both are valid p-values
(``P(p <= u) <= u`` under the null, Besag & Clifford's result), and the decision at ``alpha`` is the fixed-count
decision on the same draws: a stopped entry fails either way. Because Holm's and the fixed-sequence adjustments
only raise p-values, and a failing p-value ranks after every passing one, no adjustment of the family can turn a
stopped entry into a pass, nor change another entry's decision.

The draws come from ``draw(start, stop)``, which must return the statistic of draws ``start..stop-1`` of one
fixed sequence (a seed per draw, or one generator whose prefix does not depend on ``stop``), so the draws used
are the first ones of the fixed-count null. Groups may grow (``growth``): a null whose every group costs a pass
over the data (a probe's label permutations) draws 10, 100, 1,000, ... so that an entry drawn to the full count costs
a few passes, not one per ten draws; the stopping rule does not depend on where the groups end.

Drawn this way: the random head sets of every ablation (:func:`probes.causal.null.ablation_with_null`), the topic
toy's label permutations (its attention ratio and W_V block score) and the embedding topic null
(:func:`probes.dynamics.embedding_topics.embedding_topic_test` with ``stop_at``). Drawn at the full count: the
pretrained models' topic-attention null, whose permutations are summed inside the one pass over the text (a
group would cost a forward of every batch), and the nulls whose every draw costs microseconds (the co-occurrence
orderings' shuffles over a few query tokens, the causal toys' 10,000 sign flips: 0.07 s for 64 units).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from mechprobe.validation import integer
from probes.core.errors import ConfigError, InputError
from probes.stats.nulls import TIE_TOLERANCE

DRAW_GROUP = 10
log = logging.getLogger(__name__)


def fewest_draws(alpha: float) -> int:
    """The fewest draws whose smallest p-value, ``1 / (1 + draws)``, lies below ``alpha`` (100 at 0.01)."""
    draws = math.floor(1.0 / alpha)
    return draws if 1.0 / (1 + draws) < alpha else draws + 1


@dataclass(frozen=True)
class SequentialRule:
    """Draw at most ``max_draws`` in groups of ``group`` (each group ``growth`` times the last); stop an entry once
    the decision at ``alpha`` is known."""

    max_draws: int
    alpha: float = 0.01
    group: int = DRAW_GROUP
    growth: float = 1.0

    def __post_init__(self) -> None:
        integer("max_draws", self.max_draws, 1)
        integer("group", self.group, 1)
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"alpha must lie in (0, 1); got {self.alpha!r}.")
        if not self.growth >= 1.0:
            raise ConfigError(f"growth must be at least 1 (groups never shrink); got {self.growth!r}.")

    @classmethod
    def growing(cls, max_draws: int, alpha: float = 0.01) -> SequentialRule:
        """Groups of 10, 100, 1,000, ...: for a null whose every group costs a pass over the data (module
        docstring)."""
        return cls(max_draws, alpha, group=DRAW_GROUP, growth=10.0)

    def group_stop(self, drawn: int, groups: int) -> int:
        """Where the group after ``drawn`` draws in ``groups`` groups ends (at most ``max_draws``)."""
        return min(self.max_draws, drawn + max(1, round(self.group * self.growth ** groups)))

    @property
    def stop_hits(self) -> int:
        """Hits after which an entry's fixed-count p-value can no longer fall below ``alpha``."""
        return max(1, math.ceil(self.alpha * self.max_draws - 1e-12))


@dataclass(frozen=True)
class SequentialNull:
    """The draws a sequential null used and what they give, per entry of the observed statistic.

    ``draws[d, ...]``: the statistic of draw ``d`` (the first ``n_drawn`` of the fixed sequence); ``p_value``:
    Besag and Clifford's; ``used[...]``: draws that count for each entry (``n_h`` where it stopped, else ``n_drawn``);
    ``stopped[...]``: True where the entry stopped before ``max_draws`` (its decision at ``alpha`` known);
    ``max_draws``: the fixed count."""

    draws: Float[Tensor, "draw ..."]
    p_value: Float[Tensor, ...]
    used: Tensor
    stopped: Tensor
    max_draws: int

    @property
    def n_drawn(self) -> int:
        return int(self.draws.shape[0])

    def why(self) -> str:
        """One line: how many draws were made and why drawing stopped (entries with nothing to decide, p NaN, aside)."""
        if bool(self.stopped.any()) and bool((self.stopped | self.p_value.isnan()).all()):
            return (f"stopped after {self.n_drawn} of {self.max_draws} draws: enough of them reached the observed "
                    f"value that p cannot fall below the level")
        return f"all {self.max_draws} draws: p could still fall below the level until the last"


def _reaches(observed: Tensor, null: Tensor, alternative: str) -> Tensor:
    slack = TIE_TOLERANCE * observed.abs().clamp_min(1.0)
    hit = (null >= observed - slack) if alternative == "greater" else (null <= observed + slack)
    return hit & torch.isfinite(null)


def sequential_null(observed: Float[Tensor, ...], draw: Callable[[int, int], Tensor], rule: SequentialRule, *,
                    alternative: str = "greater", first: Tensor | None = None) -> SequentialNull:
    """Draw the null of ``observed`` in ``rule.group``-sized groups from ``draw(start, stop)`` (``[stop - start,
    *observed.shape]``) until every entry's decision at ``rule.alpha`` is known or ``rule.max_draws`` are drawn.
    A NaN draw counts neither way; an entry that is NaN (nothing to decide) is not waited for, and its p-value is
    NaN, as is an entry's none of whose draws is a number (set such an entry NaN in ``observed``, or it is drawn to
    the full count).
    ``first``: the first group's draws where they were computed beside the observed value (then ``draw`` is called
    for the later groups only).

    Example::

        rule = SequentialRule(max_draws=200)
        result = sequential_null(torch.tensor(0.4), lambda a, b: null_statistic(range(a, b)), rule)
        result.p_value, result.n_drawn, result.why()
    """
    if alternative not in ("greater", "less"):
        raise ConfigError(f"alternative must be 'greater' or 'less'; got {alternative!r}.")
    if 1.0 / (1 + rule.max_draws) >= rule.alpha:
        log.warning("A null of %d draws cannot give a p-value below %.3g, so nothing can pass at the level %g; draw "
                    "at least %d.", rule.max_draws, 1.0 / (1 + rule.max_draws), rule.alpha, fewest_draws(rule.alpha))
    observed = torch.as_tensor(observed, dtype=torch.float64)
    parts: list[Tensor] = []
    hits = torch.zeros(observed.shape, dtype=torch.long)
    finite = torch.zeros(observed.shape, dtype=torch.long)
    stopped_at = torch.zeros(observed.shape, dtype=torch.long)  # n_h where the entry stopped, else 0
    drawn = 0
    while drawn < rule.max_draws and not bool(((stopped_at > 0) | ~torch.isfinite(observed)).all()):
        stop = rule.group_stop(drawn, len(parts))
        given = first if first is not None and drawn == 0 else None
        part = torch.as_tensor(draw(drawn, stop) if given is None else given, dtype=torch.float64).cpu()
        if tuple(part.shape) != (stop - drawn, *observed.shape):
            raise InputError(f"draw({drawn}, {stop}) must return {stop - drawn} draws of shape "
                             f"{tuple(observed.shape)}; got {tuple(part.shape)}.")
        reached = _reaches(observed, part, alternative).long()
        running = hits + reached.cumsum(0)  # hits up to and including each draw of the group
        crossing = (running >= rule.stop_hits) & (stopped_at == 0)
        index = torch.arange(drawn + 1, stop + 1).view(-1, *[1] * observed.ndim).expand_as(running)
        at = torch.where(crossing, index, torch.full_like(index, rule.max_draws + 1)).amin(0)
        stopped_at = torch.where((stopped_at == 0) & (at <= rule.max_draws), at, stopped_at)
        hits += reached.sum(0)
        finite += torch.isfinite(part).sum(0)
        parts.append(part)
        drawn = stop
    if not parts:  # every entry NaN: nothing to decide
        parts.append(torch.zeros((0, *observed.shape), dtype=torch.float64))
    fixed = (1.0 + hits.double()) / (1.0 + finite.double())
    stopped = stopped_at > 0
    p = torch.where(stopped, rule.stop_hits / stopped_at.clamp_min(1).double(), fixed)
    p = torch.where(torch.isfinite(observed) & (finite > 0), p, torch.full_like(p, float("nan")))
    return SequentialNull(torch.cat(parts), p, torch.where(stopped, stopped_at, torch.full_like(stopped_at, drawn)),
                          stopped, rule.max_draws)
