"""``mechprobe dynamics``: the probes over a checkpoint series, one checkpoint at a time, resumable.

Each checkpoint's measurement is written to ``OUT/checkpoints/NNNN-stepS.json`` as soon as it is done (atomically,
through :mod:`mechprobe.records`), with the settings and the checkpoint spec it was made with; a rerun of the same
command reads those files instead of loading and measuring the checkpoints again, so a killed run resumes where it
stopped. A stored file made with other settings is refused (choose another ``--out``). At the end the events and
their findings (:mod:`analyses.dynamics.events`) go to ``OUT/summary.json`` and the curves to
``OUT/dynamics.png``.

Example: ``run_dynamics("EleutherAI/pythia-70m@revisions=step0,step1000,step143000", "runs/pythia")``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.events import series_events
from analyses.dynamics.figures import plot_dynamics
from analyses.dynamics.measure import CheckpointMeasure, curve_table, measure_checkpoint
from analyses.dynamics.summary import STORE, SUMMARY, DynamicsSummary
from analyses.dynamics.text_measure import TextProbeData, text_probe_data
from analyses.dynamics.toy_measure import measure_toy_checkpoint
from analyses.induction.config import InductionExperimentConfig
from analyses.series_writer import INDUCTION_TOY_MEASURE
from analyses.toy_model_loader import check_toy_checkpoints, load_any_model, train_lm_context
from mechprobe import records
from probes import ModelInfo, TokenBatch
from probes.core.atomic import atomic_write_text
from probes.core.checkpoint_series import (
    Checkpoint,
    CheckpointSeries,
    check_revisions,
    checkpoint_series,
    revision_of,
    same_spec,
)
from probes.core.errors import InputError

log = logging.getLogger(__name__)

FIGURE = "dynamics.png"
Loader = Callable[[str], Any]


@dataclass(frozen=True)
class StoredMeasure:
    """What one checkpoint's file holds: the settings and checkpoint it was measured with, and the measure."""

    settings: DynamicsConfig
    checkpoint: Checkpoint
    measure: CheckpointMeasure


def stored_path(out: Path, index: int, checkpoint: Checkpoint) -> Path:
    return out / STORE / f"{index:04d}-step{checkpoint.step}.json"


def _moved_store(path: Path, checkpoint: Checkpoint) -> None:
    """A checkpoint measured when the series had fewer checkpoints before it (``--refine`` added some) is stored
    under its old index: move that file to ``path``."""
    if path.is_file():
        return
    for earlier in sorted(path.parent.glob(f"*-step{checkpoint.step}.json")):
        if earlier.name.partition("-")[0].isdigit():
            earlier.replace(path)
            return


def _read_stored(path: Path, checkpoint: Checkpoint, config: DynamicsConfig) -> CheckpointMeasure | None:
    _moved_store(path, checkpoint)
    if not path.is_file():
        return None
    stored = records.read_record(StoredMeasure, path, rerun=f"Delete {path}: the same command then measures that "
                                 f"checkpoint again.")
    same = (stored.checkpoint.step, stored.checkpoint.tokens) == (checkpoint.step, checkpoint.tokens) and same_spec(
        stored.checkpoint.spec, checkpoint.spec)  # the series given as runs/lm or /abs/runs/lm: one checkpoint
    if stored.settings != config or not same:
        raise InputError(f"{path} was measured with other settings or another checkpoint ({stored.checkpoint.spec}); "
                         f"write this run to another --out, or delete that folder to measure again.")
    return stored.measure


def _text_batches(model: Any, config: DynamicsConfig) -> list[TokenBatch]:
    """Natural-text batches for ``context_loss_gain``: only for a corpus and a model with a tokenizer."""
    tokenizer = getattr(model, "tokenizer", None)
    if config.corpus is None:
        return []
    if tokenizer is None:
        log.warning("context_loss_gain skipped: %s has no tokenizer to read %s with", ModelInfo.of(model).name,
                    config.corpus)
        return []
    from probes.text.corpora import iter_documents
    from probes.text.text_batches import text_token_batches

    batches = text_token_batches(iter_documents(config.corpus), tokenizer, ModelInfo.of(model),
                                 seq_len=config.text_seq_len, batch_size=8, min_tokens=config.late[1],
                                 max_batches=config.text_batches)
    made = list(batches)
    if len(made) < 2:
        raise InputError(f"The corpus {config.corpus} gave {len(made)} batch(es) of text with at least "
                         f"{config.late[1]} tokens per row; context_loss_gain needs 2. Give a corpus of longer "
                         f"documents, or leave --corpus out.")
    return made


@dataclass(frozen=True)
class SeriesText:
    """The natural text every checkpoint of a series reads, built once from the first checkpoint measured (the
    checkpoints of a series share their tokenizer and vocabulary of ``d_vocab`` ids): the ``context`` batches of
    ``context_loss_gain`` and the text probes' data (None: skipped, logged)."""

    context: list[TokenBatch]
    probes: TextProbeData | None
    d_vocab: int

    def check(self, model: Any, checkpoint: Checkpoint) -> None:
        """Refuse a checkpoint whose vocabulary is not the one the text was read for."""
        d_vocab = ModelInfo.of(model).d_vocab
        if d_vocab != self.d_vocab:
            raise InputError(f"{checkpoint.spec} has {d_vocab} vocabulary ids, the series' earlier checkpoints "
                             f"{self.d_vocab}: the text was tokenized for those. Measure checkpoints of one "
                             f"vocabulary per series.")


def series_text(model: Any, config: DynamicsConfig) -> SeriesText:
    """The :class:`SeriesText` of ``config.corpus`` for ``model``'s tokenizer."""
    return SeriesText(_text_batches(model, config), text_probe_data(model, config), ModelInfo.of(model).d_vocab)


def toy_settings(series: CheckpointSeries) -> InductionExperimentConfig | None:
    """The induction toy's settings when ``series`` is a toy series (``series.json`` says ``"measure":
    "induction-toy"``), else None; another ``measure`` is refused."""
    measure = series.extra.get("measure")
    if measure is None:
        return None
    if measure != INDUCTION_TOY_MEASURE or not isinstance(series.extra.get("settings"), dict):
        raise InputError(f"{series.source}/series.json names measure {measure!r}; mechprobe dynamics knows "
                         f"{INDUCTION_TOY_MEASURE!r} (with the toy's 'settings'). Re-run the toy that wrote it.")
    # the chains are drawn on the CPU whatever the toy trained on (a cuda run is measured on a CPU-only machine too)
    return InductionExperimentConfig.from_settings({**series.extra["settings"], "device": "cpu"})


def measure_series(series: CheckpointSeries, out: Path, config: DynamicsConfig, *, load: Loader,
                   progress: bool = True) -> tuple[list[CheckpointMeasure], list[int], list[int]]:
    """Every checkpoint's measure, read from ``out`` where stored, else loaded (one at a time), measured and
    stored at once; returns ``(measures, indices measured now, indices reused)``. The induction toy's series
    is measured by :func:`analyses.dynamics.toy_measure.measure_toy_checkpoint` (copier and classifier)."""
    toy = toy_settings(series)
    measures, measured_now, reused = [], [], []
    text: SeriesText | None = None  # read once, from the first checkpoint measured here
    # every stored measure read (and a mismatched one refused) before any checkpoint is loaded
    stored = [_read_stored(stored_path(out, i, c), c, config) for i, c in enumerate(series.checkpoints)]
    bar = tqdm(list(enumerate(series.checkpoints)), desc="checkpoints", unit="ckpt", disable=not progress)
    for index, checkpoint in bar:
        bar.set_postfix_str(f"step {checkpoint.step}")
        path = stored_path(out, index, checkpoint)
        measure = stored[index]
        if measure is not None:
            log.info("step %d: read from %s", checkpoint.step, path)
            reused.append(index)
        else:
            model = load(checkpoint.spec)
            if toy is not None:
                measure = measure_toy_checkpoint(model, checkpoint, config, toy)
            else:
                if config.corpus is not None:
                    text = text or series_text(model, config)
                    text.check(model, checkpoint)
                measure = measure_checkpoint(model, checkpoint, config, text_batches=text.context if text else (),
                                             text=text.probes if text else None)
            del model
            # made with the first measure stored: a run refused before it (its corpus too short) leaves no folder
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, records.to_json(StoredMeasure(config, checkpoint, measure)))
            measured_now.append(index)
        measures.append(measure)
    return measures, measured_now, reused


def checked_series(spec: Any) -> CheckpointSeries:
    """The series ``spec`` names, checked before any checkpoint is measured: each hub revision resolved, each toy
    or train-lm step's files read (:func:`~analyses.toy_model_loader.check_toy_checkpoints`), a toy series'
    measure known. Example: ``checked_series("runs/lm").steps``."""
    series = checkpoint_series(spec)
    check_revisions(series)
    check_toy_checkpoints(c.spec for c in series.checkpoints)
    toy_settings(series)
    return series


def known_context(series: CheckpointSeries) -> tuple[int, bool] | None:
    """``(context, prepends a BOS)`` of the models of ``series`` where known without loading one: a train-lm step's
    ``model.json`` (no BOS), a hub revision's config (resolved already by :func:`check_revisions`: read from the
    cache; a BOS where it names one). None otherwise (the context is then checked where the first checkpoint
    loads)."""
    first = series.checkpoints[0].spec
    if series.kind == "revisions":
        from transformers import AutoConfig

        found = revision_of(first)
        if found is None:
            return None
        config = AutoConfig.from_pretrained(found[0], revision=found[1])
        context = next((value for key in ("max_position_embeddings", "n_positions", "n_ctx")
                        if isinstance(value := getattr(config, key, None), int)), None)
        return None if context is None else (context, getattr(config, "bos_token_id", None) is not None)
    context = train_lm_context(first) if toy_settings(series) is None else None
    return None if context is None else (context, False)


def longest_block(series: CheckpointSeries, seq_len: int) -> tuple[int, int] | None:
    """For a series whose context (:func:`known_context`) cannot take the ``[BOS] X X`` block of ``seq_len``,
    (their context, the longest seq_len it takes); None when it fits or is not known before loading a model. No
    model is loaded."""
    known = known_context(series)
    if known is None:
        return None
    context, bos = known
    return None if 2 * seq_len + bos <= context else (context, (context - bos) // 2)


def run_dynamics(series_spec: Any, out: str | Path, config: DynamicsConfig | None = None, *,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, progress: bool = True,
                 load: Loader | None = None) -> DynamicsSummary:
    """Measure every checkpoint of ``series_spec`` (resuming from ``out``), find the events, write
    ``summary.json`` and ``dynamics.png`` into ``out``. ``load`` (a spec to a hooked model) defaults to
    :func:`analyses.toy_model_loader.load_any_model` on ``device`` in ``dtype``.

    Example: ``run_dynamics("runs/lm", "runs/lm-dynamics").events.orders``.
    """
    config = DynamicsConfig() if config is None else config
    series = checked_series(series_spec)
    out = Path(out)
    loader = load or (lambda spec: load_any_model(spec, device=device, dtype=dtype))
    measures, measured_now, reused = measure_series(series, out, config, load=loader, progress=progress)
    summary = DynamicsSummary(series.source, series.kind, series.steps, tuple(c.tokens for c in series.checkpoints),
                              config, dict(curve_table(measures)), series_events(measures, config),
                              tuple(measured_now), tuple(reused))
    plot_dynamics(summary, out / FIGURE)
    atomic_write_text(out / SUMMARY, records.to_json(summary))  # last: a folder with it is finished, its figure too
    return summary


def summary_lines(summary: DynamicsSummary) -> Sequence[str]:
    """What ``mechprobe dynamics`` prints: each curve, each event with its interval and verdict, each order."""
    lines = [f"steps: {', '.join(str(s) for s in summary.steps)}"]
    for curve, values in summary.curves.items():
        lines.append(f"{curve}: " + " ".join(f"{v:.3f}" for v in values))
    for curve, event in summary.events.events.items():
        change = event.change
        where = (f"no step (the measured curve does not cross its event level; {change.draws_with_event:.0%} of "
                 f"the bootstrap draws do)" if math.isnan(change.step) else
                 f"step {change.step:.0f} [{change.step_ci[0]:.0f}, {change.step_ci[1]:.0f}]")
        lines.append(f"event {curve}: {where}, {change.start:.3f} -> {change.end:.3f} (peak at step "
                     f"{change.peak_step:.0f}), p={event.finding.reported_p:.3g}: "
                     f"{'holds' if event.holds else 'does not hold'}")
    for name, finding in summary.events.orders.items():
        gap = ("no gap (an event of the two has no step)" if math.isnan(finding.value) else
               f"{finding.value:.0f} steps [{finding.ci[0]:.0f}, {finding.ci[1]:.0f}]")
        lines.append(f"order {name}: {gap}, p={finding.reported_p:.3g}: "
                     f"{'holds' if finding.holds else 'does not hold'}")
    for where, within in (("repeated half of [BOS] X X", summary.events.loss_drop_within_induction),
                          ("natural text", summary.events.text_loss_drop_within_induction)):
        if within is not None:
            lines.append(f"in-context loss event ({where}) inside the induction event's interval: {within}")
    return lines

