"""Scan and Snap's typed results: :class:`ScanSnapResult` (co-occurrence task) and :class:`WikitextResult`, each the
``summary.json`` of its run, with the sections they hold (standard model, Figure 6 sweep, WikiText trace).

Every field is one number, history or section of the summary; ``summary()`` writes the document
(key for key as the run always wrote it) and ``from_summary()`` reads it back. The module docstring
of :mod:`analyses.scansnap.experiment` says what each number measures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from analyses.paper_reference import PaperReference
from analyses.paper_result import PaperResult, number, optional, record_from_dict
from analyses.scansnap.config import ScanSnapConfig
from analyses.toy_findings import ToyFinding, toy_findings_from_dict, toy_findings_to_dict
from probes.dynamics.scan_order import ScanOrder
from probes.dynamics.snap import RateSnap

STATISTICS = ("distinct_mass", "common_mass", "entropy", "entropy_all", "cooccurrence_spearman", "cooccurrence_kendall",
              "cooccurrence_spearman_corpus", "cooccurrence_spearman_mass")
"""The key-token attention statistics averaged over facts (:func:`analyses.scansnap.main_run.fact_statistics`)."""


def _numbers(values: Any) -> tuple[float, ...]:
    return tuple(number(v) for v in values)


@dataclass(frozen=True)
class LossCurve:
    """Training loss per optimiser step (``loss[i]``: the batch of step ``steps[i]``, before its update)."""

    steps: tuple[int, ...]
    loss: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "loss": list(self.loss)}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> LossCurve:
        return record_from_dict(cls, document)


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> StandardModelResult:
        return record_from_dict(cls, document)


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

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> SweepCell:
        return record_from_dict(cls, document)


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

    def to_dict(self) -> dict[str, Any]:
        falls, rises = self.entropy_falls_with_eta_z, self.entropy_rises_with_ratio
        return {"entropy_falls_with_eta_z": {"rows": falls.rows, "holds": falls.holds,
                                             "failing_num_last_ratio": [list(k) for k in falls.failing]},
                "entropy_rises_with_ratio": {"rows": rises.rows, "holds": rises.holds,
                                             "failing_num_last_eta_z": [list(k) for k in rises.failing]},
                "spearman_eta_z": self.spearman_eta_z, "spearman_ratio": self.spearman_ratio}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Figure6Trends:
        def rows(part: Mapping[str, Any], failing: str) -> MonotoneRows:
            return MonotoneRows(int(part["rows"]), int(part["holds"]), tuple(tuple(k) for k in part[failing]))

        return cls(rows(document["entropy_falls_with_eta_z"], "failing_num_last_ratio"),
                   rows(document["entropy_rises_with_ratio"], "failing_num_last_eta_z"),
                   number(document["spearman_eta_z"]), number(document["spearman_ratio"]))


def _snap_from_dict(document: Mapping[str, Any]) -> RateSnap:
    return RateSnap(int(document["step"]), int(document["index"]), bool(document["snapped"]), float(document["rate"]),
                    int(document["patience"]), _numbers(document["relative_speed"]))


def _scan_order_from_dict(document: Mapping[str, Any]) -> ScanOrder:
    return ScanOrder(tuple(int(s) for s in document["peak_steps"]), _numbers(document["cooccurrence"]),
                     number(document["spearman"]), number(document["kendall"]), float(document["tolerance"]))


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
    first_step_below_loss_target: int | None
    entropy_expected: float
    entropy_uniform_distinct: float
    snaps: tuple[RateSnap, ...]
    scan_orders: tuple[ScanOrder, ...]
    loss_curve: LossCurve
    reference: PaperReference
    config: ScanSnapConfig
    findings: Mapping[str, ToyFinding]
    standard: StandardModelResult | None = None
    sweep: tuple[SweepCell, ...] | None = None
    figure6: Figure6Trends | None = None

    _RENAMED: ClassVar[dict[str, str]] = {"first_step_below_loss_target": "first_step_below_0.05"}
    _NUMBERS: ClassVar[tuple[str, ...]] = (
        "final_loss", *STATISTICS, "probe_vs_expected_max_abs", "snap_step", "snapped", "scan_order_spearman",
        "scan_order_kendall", "initial_loss", "log_vocab", "loss_at_step_10", "first_step_below_loss_target",
        "entropy_expected", "entropy_uniform_distinct")

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = {self._RENAMED.get(name, name): getattr(self, name) for name in self._NUMBERS}
        document["snap"] = [s.to_dict() for s in self.snaps]
        document["scan_order"] = [o.to_dict() for o in self.scan_orders]
        document["loss_curve"] = self.loss_curve.to_dict()
        if self.standard is not None:
            document["standard"] = self.standard.to_dict()
        if self.sweep is not None:
            document["sweep"] = [cell.to_dict() for cell in self.sweep]
        if self.figure6 is not None:
            document["figure6"] = self.figure6.to_dict()
        document["findings"] = toy_findings_to_dict(self.findings)
        document["reference"] = self.reference.to_dict()
        document["settings"] = dataclasses.asdict(self.config)
        return document

    @classmethod
    def from_summary(cls, document: Mapping[str, Any]) -> ScanSnapResult:
        values: dict[str, Any] = {name: number(document[cls._RENAMED.get(name, name)]) for name in cls._NUMBERS}
        values["snap_step"] = int(document["snap_step"])
        values["snapped"] = bool(document["snapped"])
        values["first_step_below_loss_target"] = optional(document["first_step_below_0.05"], int)
        sweep = document.get("sweep")
        return cls(**values, snaps=tuple(_snap_from_dict(s) for s in document["snap"]),
                   scan_orders=tuple(_scan_order_from_dict(o) for o in document["scan_order"]),
                   loss_curve=LossCurve.from_dict(document["loss_curve"]),
                   reference=PaperReference.from_dict(document["reference"]),
                   config=ScanSnapConfig.from_settings(document["settings"]),
                   findings=toy_findings_from_dict(document.get("findings")),
                   standard=StandardModelResult.from_dict(document["standard"]) if "standard" in document else None,
                   sweep=None if sweep is None else tuple(SweepCell.from_dict(cell) for cell in sweep),
                   figure6=Figure6Trends.from_dict(document["figure6"]) if "figure6" in document else None)

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

    def to_dict(self) -> dict[str, Any]:
        document = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        document["loss_curve"] = self.loss_curve.to_dict()
        document["spearman_lift_matched_null"] = dataclasses.asdict(self.spearman_lift_matched_null)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in document.items()}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> WikitextTrace:
        values = {f.name: document[f.name] for f in dataclasses.fields(cls)}
        for name in ("vocabulary", "train_tokens", "steps", "steps_per_epoch", "probe_windows", "scan_order_queries"):
            values[name] = int(values[name])
        for name in ("initial_loss", "final_loss", "log_vocabulary", "keys_per_query", "scan_order_spearman"):
            values[name] = number(values[name])
        for name in cls._SERIES:
            values[name] = _numbers(values[name])
        null = document["spearman_lift_matched_null"]
        return cls(**{**values, "query_words": tuple(values["query_words"]), "step": tuple(map(int, values["step"])),
                      "example_window": tuple(values["example_window"]),
                      "loss_curve": LossCurve.from_dict(values["loss_curve"]),
                      "spearman_lift_matched_null": ShuffledLiftNull(number(null["mean"]), number(null["q95"]),
                                                                     int(null["permutations"]))})


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
    config: ScanSnapConfig

    @classmethod
    def of_trace(cls, trace: WikitextTrace, reference: PaperReference, config: ScanSnapConfig) -> WikitextResult:
        """The summary numbers of ``trace``: its first and last snapshot, its null and scan order."""
        return cls(trace.initial_loss, trace.final_loss, trace.steps, trace.entropy[0], trace.spearman_lift_matched[0],
                   trace.distinct_over_common[0], trace.entropy[-1], trace.spearman_count[-1], trace.spearman_lift[-1],
                   trace.spearman_lift_matched[-1], trace.distinct_over_common[-1],
                   trace.spearman_lift_matched_null.q95, trace.scan_order_spearman, trace, reference, config)

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                                    if f.name not in ("wikitext", "reference", "config")}
        document["wikitext"] = self.wikitext.to_dict()
        document["reference"] = self.reference.to_dict()
        document["settings"] = dataclasses.asdict(self.config)
        return document

    @classmethod
    def from_summary(cls, document: Mapping[str, Any]) -> WikitextResult:
        return cls.of_trace(WikitextTrace.from_dict(document["wikitext"]),
                            PaperReference.from_dict(document["reference"]),
                            ScanSnapConfig.from_settings(document["settings"]))


def result_class(document: Mapping[str, Any]) -> type[ScanSnapResult] | type[WikitextResult]:
    """The result class of a Scan and Snap summary: :class:`WikitextResult` for the WikiText run."""
    return WikitextResult if "wikitext" in document else ScanSnapResult
