"""What settling a pretrained model's findings records, and how it is configured (the rounds themselves are in
:mod:`analyses.pretrained.settle`).

Under ``mechprobe report --settle`` a finding is decided on its confidence sequence alone
(:mod:`probes.stats.confidence_sequence`): it *holds* when the sequence's lower end lies above its null, its control
and its threshold, it is *absent* when the upper end lies below the threshold, and *inconclusive* otherwise: the rule
of :mod:`probes.stats.findings`, with the sequence in place of the fixed-sample interval and the p-value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

from mechprobe.validation import integer
from probes.core.errors import ConfigError
from probes.stats.confidence_sequence import ALPHA, MIN_UNITS, mixture_radius, mixture_rho

CORPUS_SPENT = "more text is needed beyond the corpora given"
"""How a finding's ``stop`` says the text ran out (the verdict table then counts its needs beyond the corpora)."""


@dataclass(frozen=True)
class SettleConfig:
    """How ``--settle`` buys further text: ``enabled`` (off: the report is the fixed-sample one), rounds until every
    monitored finding is settled or ``budget_minutes`` of measuring, ``max_tokens`` tokens of new text or
    ``max_rounds`` rounds are spent. A round measures at least ``min_units`` units in all (the sequence is read
    from there on, :data:`probes.stats.confidence_sequence.MIN_UNITS`), at most ``max_round_units``, and at most as
    many as the units so far (so the looks come at doubling sizes). ``alpha``: each sequence's error rate over all
    its looks. ``corpora``: further corpus specs whose text the rounds read, in order, once the report's corpus runs
    out (each read once, streamed; LDA stays fitted on the first corpus and labels their words too)."""

    enabled: bool = False
    budget_minutes: float = 20.0
    max_tokens: int = 5_000_000
    max_rounds: int = 20
    min_units: int = MIN_UNITS
    max_round_units: int = 400
    alpha: float = ALPHA
    corpora: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"settle.enabled must be true or false; got {self.enabled!r}.")
        if not (isinstance(self.budget_minutes, (int, float)) and math.isfinite(self.budget_minutes)
                and self.budget_minutes > 0):
            raise ConfigError(f"settle.budget_minutes (--budget-minutes) must be a positive number of minutes; got "
                              f"{self.budget_minutes!r}.")
        integer("settle.max_tokens (--max-tokens)", self.max_tokens, 1)
        integer("settle.max_rounds", self.max_rounds, 1)
        integer("settle.min_units", self.min_units, 2)
        integer("settle.max_round_units", self.max_round_units, 1)
        if not 0.0 < self.alpha < 1.0:
            raise ConfigError(f"settle.alpha must lie in (0, 1); got {self.alpha!r}.")
        if not isinstance(self.corpora, tuple) or not all(isinstance(c, str) and c for c in self.corpora):
            raise ConfigError(f"settle.corpora must be corpus specs (a second --corpus and on); got {self.corpora!r}.")
        repeated = sorted({c for c in self.corpora if self.corpora.count(c) > 1})
        if repeated:
            raise ConfigError(f"--corpus {repeated[0]} is named twice: each corpus is read once (text is never read "
                              f"again); name it once.")
        if self.corpora and not self.enabled:
            raise ConfigError("a second --corpus is read only by --settle (fresh text for its rounds once the first "
                              "corpus runs out); add --settle, or name one --corpus.")


def sequence_cost(alpha: float = ALPHA, level: float = 0.95) -> float:
    """How many times the units of a fixed-sample interval a sequence needs for the same width where it is tuned
    (2.40 at alpha 0.05 beside a 95% interval): the factor that turns :func:`probes.stats.power.units_for_power`
    into a round's size."""
    fixed = NormalDist().inv_cdf(0.5 + level / 2)  # z of the two-sided fixed interval
    # the ratio is the same at any number of units where the sequence is tuned for them
    tuned = float(mixture_radius(1000, 1.0, alpha=alpha, rho=mixture_rho(1000, alpha))) * math.sqrt(1000)
    return (tuned / fixed) ** 2


def sequence_verdict(low: float, high: float, threshold: float, null_value: float,
                     control_value: float | None) -> str:
    """``holds`` when ``low`` lies above the null, the control and the threshold; ``absent`` when ``high`` lies
    below the threshold; else ``inconclusive`` (also when a number is missing)."""
    floor = [v for v in (null_value, control_value, threshold) if v is not None]
    if not all(math.isfinite(v) for v in (low, high, *floor)):
        return "inconclusive"
    if all(low > v for v in floor):
        return "holds"
    return "absent" if high < threshold else "inconclusive"


@dataclass(frozen=True)
class SequenceLook:
    """One look at a finding's sequence: after ``units`` fresh units, the value and the sequence's ends."""

    units: int
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class SettledFinding:
    """One finding after settling.

    ``verdict``: from the sequence (:func:`sequence_verdict`) where it was monitored, else the first pass's
    fixed-sample verdict; ``first_pass``: that fixed-sample verdict; ``unit``: what its units are; ``units``,
    ``rounds``, ``tokens``: what the rounds measured (fresh units only); ``stop``: why it stopped;
    ``needs_units`` / ``needs_tokens``: for one still inconclusive, about how many more units (and tokens of text)
    would settle it; ``tuned_at``: where its sequence is tightest (chosen from the first pass, before the rounds);
    ``looks``: the sequence after each round (it narrows as units come)."""

    name: str
    unit: str
    verdict: str
    first_pass: str
    threshold: float
    units: int
    rounds: int
    tokens: int
    stop: str
    needs_units: int | None = None
    needs_tokens: int | None = None
    tuned_at: int | None = None
    looks: tuple[SequenceLook, ...] = ()

    @property
    def settled(self) -> bool:
        return self.verdict != "inconclusive"

    def table_note(self) -> str:
        """What the verdict table adds for a monitored finding: ``settled after 120 batches: holds``, or
        ``unsettled: needs about 800 more batches (1,200,000 tokens beyond the corpora given)`` ("more tokens of
        fresh text" where a budget, not the corpora, stopped it); empty for a finding no round measured."""
        if not self.looks:
            return ""
        if self.settled:
            return f"settled after {self.units:,} {self.unit}: {self.verdict}"
        if self.needs_units is None:
            return f"unsettled after {self.units:,} {self.unit} ({self.stop})"
        text = "tokens beyond the corpora given" if CORPUS_SPENT in self.stop else "more tokens of fresh text"
        tokens = "" if self.needs_tokens is None else f" ({self.needs_tokens:,} {text})"
        return f"unsettled: needs about {self.needs_units:,} more {self.unit}{tokens}"

    def cell(self) -> str:
        """``holds, settled after 120 batches`` / ``inconclusive, unsettled: needs about 800 more batches
        (1,200,000 tokens)`` / the first pass's verdict and why it was not monitored."""
        if not self.looks:
            return f"{self.verdict} ({self.stop})"
        last = self.looks[-1]
        numbers = f"{last.value:.3f} sequence [{last.low:.3f}, {last.high:.3f}]"
        if self.settled:
            return f"{self.verdict}, settled after {self.units} {self.unit} ({self.rounds} rounds): {numbers}"
        needs = ("" if self.needs_units is None else f"; needs about {self.needs_units:,} more {self.unit}"
                 + ("" if self.needs_tokens is None else f" ({self.needs_tokens:,} tokens)"))
        return f"inconclusive, unsettled after {self.units} {self.unit}: {numbers} ({self.stop}{needs})"
