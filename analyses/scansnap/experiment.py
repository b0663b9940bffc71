"""``mechprobe toy scansnap``'s run: Tian et al. 2023, "Scan and Snap", trained, probed and saved as a typed result.

:func:`run` takes a :class:`analyses.scansnap.config.ScanSnapConfig` (presets in
:data:`analyses.scansnap.config.PRESETS`), writes ``summary.json`` (:class:`analyses.scansnap.result.ScanSnapResult`,
or :class:`analyses.scansnap.result.WikitextResult` for the WikiText run), the figures
(:mod:`analyses.scansnap.figures`) and the trained model, and returns the result. Every ``summary.json``
names its paper, figure and remaining deviations under ``reference`` (:mod:`analyses.scansnap.reference`).

Presets:

- ``paper``: the main run (Figures 3-4): the Y/Z model (Y = Z = 0) trained with SGD (momentum 0.9),
  ``eta_Y = eta_Z = 1``, fresh batches of 128 sequences of length 128, 100 steps, 2 facts, 10 common +
  10 distinct tokens, plus a standard 1-layer TransformerLens attention model on the same data;
- ``fast``: the same main run with a smaller evaluation set and a short standard-model run (the report's);
- ``adam``: the main run with Adam (Figure 5), ``eta_Y = eta_Z = 0.05``;
- ``sweep``: the main run plus Figure 6's grid (:mod:`analyses.scansnap.sweep`): eta_Z in
  {0.5, 1, 2, 3} x eta_Y/eta_Z in {1, 2, 5, 10} x #last tokens in {1, 3, 5, 10}, 10 seeds = 64 cells;
- ``wikitext``: the PyTorch tutorial transformer on WikiText-2 with attention snapshots and
  co-occurrence probes across training (:mod:`analyses.scansnap.wikitext`).

Main run. After every step the long-context composition ``c_l ~ P(l | m, n) exp(Z[m, l])`` over
each fact's support is recorded (the paper's Figure 4 heatmap); from it come

- ``snap_step``: :func:`probes.dynamics.snap.detect_snap_by_rate` (the first step from which the composition
  moves by less than ``snap_rate`` of its total change so far per step, for ``snap_patience``
  steps), the latest over facts; it does not depend on how long the run is;
- ``scan_order_spearman``: per fact, the step at which each distinct token's attention peaks (or
  starts to fall) against its co-occurrence ``P(l | m, n)`` (:func:`probes.dynamics.scan_order.scan_order`),
  averaged over facts: the paper's "low to high co-occurrence" order, measured during training.

At the end, from the key-token attention probe reading ``blocks.0.attn.hook_pattern`` (query row
-1) on a fixed evaluation set per fact (``probe_vs_expected_max_abs`` compares it with ``c``):
``distinct_mass`` / ``common_mass`` (attention of the query on the fact's distinct / the common
tokens), ``cooccurrence_spearman`` (and ``_kendall``: rank correlation over the distinct tokens
between per-occurrence attention and ``P(l | m, n)``), ``entropy`` (entropy in nats of the
composition restricted to the distinct tokens, renormalised; ``entropy_all``: over the whole
support), each averaged over facts; ``standard``: the same probes on the standard model.

Findings (:mod:`analyses.scansnap.findings`): ``cooccurrence_ordering`` (the pretrained models' distance-matched
co-occurrence Spearman, on the evaluation sets) and ``scan_order`` (the paper's scan order as a finding) of the
trained Y/Z model, judged against the same toy at initialisation; ``seed_findings(config, seed)`` measures them
on more seeds (``mechprobe toy scansnap --seeds N``).

Run time, one torch thread on a 2-core machine shared with other jobs (wall, whole command):
``fast`` 7.5 s (+ about 2 s for the findings), ``paper`` 23 s, ``adam`` 53 s (under heavier load), ``sweep``
2 min 10 s (its 640 runs train as four stacked batches: 100 s), ``wikitext`` 4 min 45 s (1038 steps on the test
split).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from analyses.curve_series import save_curve_series
from analyses.paper_result import SUMMARY_FILE
from analyses.scansnap.config import PRESETS, ScanSnapConfig
from analyses.scansnap.figures import plot_heatmap, plot_loss
from analyses.scansnap.findings import FINDINGS, main_run_findings, seed_findings
from analyses.scansnap.main_run import MainRun, average_statistics, eval_loss, eval_sets, main_run, probe_fact
from analyses.scansnap.order import ORDER, order_series, scan_snap_orders
from analyses.scansnap.result import (
    LossCurve,
    ScanSnapResult,
    StandardModelResult,
    SweepCell,
    WikitextResult,
    result_class,
)
from analyses.timings import write_timings
from analyses.torch_threads import torch_threads
from analyses.toy_findings import aggregate_seeds
from analyses.toy_model_store import save_toy_model
from mechprobe import records
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.training import train_on_cooccurrence
from toymodels.standard import StandardModelConfig, build_standard_model

__all__ = ["FINDINGS", "PRESETS", "MainRun", "ScanSnapConfig", "ScanSnapResult", "WikitextResult", "load",
           "main_run", "result_from_summary", "run", "seed_findings", "standard_run"]

log = logging.getLogger(__name__)

def standard_run(config: ScanSnapConfig) -> StandardModelResult:
    """A standard 1-layer attention-only TL model (no positional encoding) on the same data and probes."""
    data = CooccurrenceData(config.data)
    standard = config.standard
    model = build_standard_model(StandardModelConfig(
        n_layers=1, d_model=standard.d_model, n_heads=1, d_vocab=data.d_vocab, n_ctx=config.data.seq_len,
        attn_only=True, positional="none", attention_dir="causal", seed=config.seed), device=config.device)
    history = train_on_cooccurrence(model, data, standard.train_config(config.training()))
    evaluation = eval_sets(config, data)
    statistics = average_statistics([probe_fact(model, data, f, evaluation[f]) for f in range(data.n_facts)], data)
    return StandardModelResult(
        final_loss=eval_loss(model, data, evaluation),
        initial_loss=history.values["loss"][0] if history.steps else None, **statistics,
        steps=standard.n_steps, optimizer=standard.optimizer, eta_y=standard.eta_y, eta_z=standard.eta_z,
        d_model=standard.d_model)


# -- running -----------------------------------------------------------------------------------------
def run(config: ScanSnapConfig, out_dir: str | Path, *, progress: bool = True) -> ScanSnapResult | WikitextResult:
    """Run the experiment of ``config``; write summary.json, the figures and the model into ``out_dir``.

    Example: ``result = run(PRESETS["fast"], "runs/scansnap"); result.snap_step``.
    """
    if not isinstance(config, ScanSnapConfig):
        raise ToyConfigError(f"run() needs a ScanSnapConfig; got {type(config).__name__}.")
    with torch_threads(config.threads):  # these models are tiny: extra threads mostly contend
        return _run(config, Path(out_dir), progress=progress)


def result_from_summary(document: Mapping[str, Any], where: str = "the summary", *, at: str = "",
                        rerun: str | None = None) -> ScanSnapResult | WikitextResult:
    """The typed result of a summary document of either kind (the report's way back from summary.json;
    ``where``, ``at``, ``rerun``: as :meth:`~analyses.paper_result.PaperResult.from_document`)."""
    return result_class(document).from_document(document, where, at=at, rerun=rerun)


def load(folder: str | Path) -> ScanSnapResult | WikitextResult:
    """The result a :func:`run` saved in ``folder`` (either kind)."""
    path = Path(folder) / SUMMARY_FILE
    kind = result_class(records.read_json(path, rerun=f"Run `mechprobe toy scansnap --out {folder}` again.")) \
        if path.is_file() else ScanSnapResult
    return kind.load(folder)


def _run(config: ScanSnapConfig, out_dir: Path, *, progress: bool) -> ScanSnapResult | WikitextResult:
    from analyses.scansnap.reference import reference_for

    start = time.perf_counter()
    timings: dict[str, float] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    result: ScanSnapResult | WikitextResult
    if config.experiment == "wikitext":
        from analyses.scansnap.figures import plot_wikitext
        from analyses.scansnap.wikitext import wikitext_run

        trace, example_patterns, snapshots = wikitext_run(config, progress=progress)
        plot_wikitext(trace, example_patterns, out_dir / "wikitext.png")
        torch.save(snapshots, out_dir / "wikitext_snapshots.pt")
        result = WikitextResult.of_trace(trace, reference_for(config), config)
        timings["wikitext"] = time.perf_counter() - start
    else:
        main = main_run(config, progress=progress)
        save_toy_model(main.model, out_dir, "scansnap")  # probe it again: mechprobe probe-linear --model OUT
        plot_heatmap(main, out_dir / "attention_heatmap.png")
        plot_loss(main.history, out_dir / "loss.png")
        findings_start = time.perf_counter()
        findings = aggregate_seeds("scansnap", [main_run_findings(config, main, eval_sets(config, main.data))])
        save_curve_series(order_series(scan_snap_orders(main.trajectory, main.steps, config), main.steps,
                                       findings[ORDER].first), out_dir)  # the report's shared-axis figure
        timings["findings"] = time.perf_counter() - findings_start
        standard = standard_run(config) if config.standard.enabled else None
        sweep = figure6 = None
        if config.sweep.num_last:
            from analyses.scansnap.figures import plot_sweep
            from analyses.scansnap.sweep import figure6_trends, run_sweep

            sweep_start = time.perf_counter()
            rows = run_sweep(config, progress=progress)
            timings["sweep"] = time.perf_counter() - sweep_start
            sweep = tuple(records.load(SweepCell, row, where="the sweep") for row in rows)
            figure6 = figure6_trends(rows)
            plot_sweep(rows, out_dir / "entropy_sweep.png")
        result = ScanSnapResult(**main.numbers, snaps=main.snaps, scan_orders=main.scan_orders,
                                loss_curve=LossCurve(tuple(main.history.steps), tuple(main.history.values["loss"])),
                                reference=reference_for(config), config=config, findings=findings,
                                standard=standard, sweep=sweep,
                                figure6=figure6)
    timings["total"] = time.perf_counter() - start
    write_timings(out_dir, timings)
    result.save(out_dir)
    log.info("scansnap: wrote %s", out_dir / "summary.json")
    return result
