"""Scan and Snap's typed results: :class:`ScanSnapResult` (co-occurrence task) and :class:`WikitextResult`, each the
``summary.json`` of its run, with the sections they hold (standard model, Figure 6 sweep, WikiText trace).

Every field is one number, history or section of the summary; the fields are the document
(:mod:`mechprobe.records`; ``config`` is written as ``"settings"``, ``snaps`` as ``"snap"``, ``scan_orders``
as ``"scan_order"``). The module docstring of :mod:`analyses.scansnap.experiment` says what each number
measures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from analyses.paper_reference import PaperReference
from analyses.paper_result import PaperResult
from analyses.scansnap.config import ScanSnapConfig
from analyses.toy_findings import ToyFinding
from mechprobe.records import key
from probes.dynamics.scan_order import ScanOrder
from probes.dynamics.snap import RateSnap

STATISTICS = ("distinct_mass", "common_mass", "entropy", "entropy_all", "cooccurrence_spearman", "cooccurrence_kendall",
              "cooccurrence_spearman_corpus", "cooccurrence_spearman_mass")
"""The key-token attention statistics averaged over facts (:func:`analyses.scansnap.main_run.fact_statistics`)."""


@dataclass(frozen=True)
class LossCurve:
    """Training loss per optimiser step (``loss[i]``: the batch of step ``steps[i]``, before its update)."""

    steps: tuple[int, ...]
    loss: tuple[float, ...]


@dataclass(frozen=True)
class StandardModelResult:
    """The standard 1-layer TL model on the same data: losses, the attention statistics, its training settings."""

    final_loss: float
    initial_loss: float | None
    distinct_mass: float
    common_mass: float
    entropy: float
    entropy_all: float
    cooccurrence_spearman: float
    cooccurrence_kendall: float
    cooccurrence_spearman_corpus: float
    cooccurrence_spearman_mass: float
    steps: int
    optimizer: str
    eta_y: float
    eta_z: float
    d_model: int


@dataclass(frozen=True)
class SweepCell:
    """One cell of Figure 6's grid: the final distinct-token entropy (nats) and snap step over ``seeds`` runs."""

    num_last: int
    num_next: int
    eta_z: float
    ratio: float
    eta_y: float
    entropy_mean: float
    entropy_std: float
    entropy_all_mean: float
    entropy_all_std: float
    snap_step_mean: float
    snapped_fraction: float
    final_loss_mean: float
    seeds: int


@dataclass(frozen=True)
class MonotoneRows:
    """How many rows of the grid move as Figure 6 reads (``holds`` of ``rows``) and the keys of the others."""

    rows: int
    holds: int
    failing: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class Figure6Trends:
    """:func:`analyses.scansnap.sweep.figure6_trends` of the sweep: entropy falls with eta_Z (rows: num_last, ratio),
    rises with eta_Y / eta_Z (rows: num_last, eta_Z); mean Spearman of entropy with each within the other's panels."""

    entropy_falls_with_eta_z: MonotoneRows
    entropy_rises_with_ratio: MonotoneRows
    spearman_eta_z: float
    spearman_ratio: float


@dataclass(frozen=True)
class ScanSnapResult(PaperResult):
    """The co-occurrence run (presets paper, fast, adam, sweep): the Y/Z model's numbers at the end of training,
    its snap and scan order per fact, its loss curve, and the optional standard model and Figure 6 sweep.

    ``first_step_below_loss_target`` is the summary's ``"first_step_below_0.05"`` (None: never below),
    ``snaps`` its ``"snap"``, ``scan_orders`` its ``"scan_order"`` and ``config`` its ``"settings"``;
    ``findings``: the toy's findings over seeds (:mod:`analyses.scansnap.findings`; a summary written before
    they existed reads back without any).
    """

    experiment: ClassVar[str] = "scansnap"

    final_loss: float
    distinct_mass: float
    common_mass: float
    entropy: float
    entropy_all: float
    cooccurrence_spearman: float
    cooccurrence_kendall: float
    cooccurrence_spearman_corpus: float
    cooccurrence_spearman_mass: float
    probe_vs_expected_max_abs: float
    snap_step: int
    snapped: bool
    scan_order_spearman: float
    scan_order_kendall: float
    initial_loss: float
    log_vocab: float
    loss_at_step_10: float
    first_step_below_loss_target: int | None = field(metadata=key("first_step_below_0.05"))
    entropy_expected: float
    entropy_uniform_distinct: float
    snaps: tuple[RateSnap, ...] = field(metadata=key("snap"))
    scan_orders: tuple[ScanOrder, ...] = field(metadata=key("scan_order"))
    loss_curve: LossCurve
    reference: PaperReference
    config: ScanSnapConfig = field(metadata=key("settings"))
    findings: Mapping[str, ToyFinding] = field(default_factory=dict)
    standard: StandardModelResult | None = None
    sweep: tuple[SweepCell, ...] | None = None
    figure6: Figure6Trends | None = None

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        return self.findings


@dataclass(frozen=True)
class ShuffledLiftNull:
    """The chance level of a Spearman with lift: mean and 95th percentile over ``permutations`` shuffles."""

    mean: float
    q95: float
    permutations: int


@dataclass(frozen=True)
class WikitextTrace:
    """The WikiText run in full (:mod:`analyses.scansnap.wikitext`): corpus sizes, losses and, per snapshot
    ``step``, the probes' entropy, orderings and distinct/common ratio; the summary's ``"wikitext"`` section."""

    train: str
    probe: str
    vocabulary: int
    train_tokens: int
    steps: int
    steps_per_epoch: int
    probe_windows: int
    query_words: tuple[str, ...]
    initial_loss: float
    final_loss: float
    log_vocabulary: float
    loss_curve: LossCurve
    keys_per_query: float
    step: tuple[int, ...]
    entropy: tuple[float, ...]
    spearman_count: tuple[float, ...]
    spearman_lift: tuple[float, ...]
    spearman_lift_matched: tuple[float, ...]
    distinct_over_common: tuple[float, ...]
    spearman_lift_matched_null: ShuffledLiftNull
    scan_order_spearman: float
    scan_order_queries: int
    example_window: tuple[str, ...]

    _SERIES: ClassVar[tuple[str, ...]] = ("entropy", "spearman_count", "spearman_lift", "spearman_lift_matched",
                                          "distinct_over_common")



@dataclass(frozen=True)
class WikitextResult(PaperResult):
    """The WikiText run (preset wikitext): losses, the first and last snapshot's probe numbers, the scan order,
    and the whole trace (``wikitext``). ``config`` is the summary's ``"settings"``."""

    experiment: ClassVar[str] = "scansnap"

    initial_loss: float
    final_loss: float
    steps: int
    entropy_first: float
    spearman_lift_matched_first: float
    distinct_over_common_first: float
    entropy_last: float
    spearman_count_last: float
    spearman_lift_last: float
    spearman_lift_matched_last: float
    distinct_over_common_last: float
    spearman_lift_matched_null_q95: float
    scan_order_spearman: float
    wikitext: WikitextTrace
    reference: PaperReference
    config: ScanSnapConfig = field(metadata=key("settings"))

    @classmethod
    def of_trace(cls, trace: WikitextTrace, reference: PaperReference, config: ScanSnapConfig) -> WikitextResult:
        """The summary numbers of ``trace``: its first and last snapshot, its null and scan order."""
        return cls(trace.initial_loss, trace.final_loss, trace.steps, trace.entropy[0], trace.spearman_lift_matched[0],
                   trace.distinct_over_common[0], trace.entropy[-1], trace.spearman_count[-1], trace.spearman_lift[-1],
                   trace.spearman_lift_matched[-1], trace.distinct_over_common[-1],
                   trace.spearman_lift_matched_null.q95, trace.scan_order_spearman, trace, reference, config)


def result_class(document: Mapping[str, Any]) -> type[ScanSnapResult] | type[WikitextResult]:
    """The result class of a Scan and Snap summary: :class:`WikitextResult` for the WikiText run."""
    return WikitextResult if "wikitext" in document else ScanSnapResult
