"""A report's results on disk, so the report can be rebuilt without a model: ``OUT/results/``.

Layout::

    results/report.json                     corpus, settings, the order of models and toy settings
    results/toy/NAME.json                   each toy run's summary.json document (loaded back as its typed result),
                                            its folder and the figures in it (``render`` copies them again)
    results/pretrained/NN-MODEL/run.json    the whole :class:`~analyses.pretrained.measure.PretrainedRun`: model
                                            facts, topic map, every probe result of the model and its control,
                                            held-out statistics, ablations, findings
    results/pretrained/NN-MODEL/run.safetensors   every tensor of it (all per-head tensors, not only the top heads)

Everything goes through :mod:`mechprobe.records` (strict JSON; a non-finite number is ``null`` and comes back
as NaN where the field is a float). :func:`load_report_inputs` gives back what
:func:`analyses.report.compare.compare` needs, so ``mechprobe render OUT`` rewrites report.md, report.html
and summary.json byte for byte as the run wrote them. A results folder written by another format (mechprobe
before 0.2 wrote format 1), a file or folder missing or damaged (truncated, another container, a key missing or
unknown, a safetensors file that does not read) and a toy folder or figure that is gone are each refused in one line
that names the file and the field and says to re-run ``mechprobe report``: ``render`` never draws less than the
report had.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor

from analyses.experiments import toy_result
from analyses.pretrained.measure import PretrainedRun
from analyses.report.compare import ToyRun
from analyses.report.config import ReportSettings
from analyses.report.corpus import CorpusSummary
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text

RESULTS = "results"
FORMAT = 2
RERUN = "Re-run mechprobe report."


@dataclass(frozen=True)
class ReportIndex:
    """``results/report.json``: the corpus, the settings, each model's folder under ``pretrained/`` and the toys."""

    format: int
    corpus: CorpusSummary
    settings: ReportSettings | None
    pretrained: dict[str, str]
    toys: list[str]


@dataclass(frozen=True)
class ToyEntry:
    """``results/toy/NAME.json``: the toy's summary document, its folder (relative to the report) and the figures
    the report copied from it (None in results written before they were listed)."""

    summary: dict[str, Any]
    folder: str
    figures: list[str] | None = None


@dataclass(frozen=True)
class RunFile:
    """``results/pretrained/NN-MODEL/run.json``: the format and the run (its tensors in ``run.safetensors``)."""

    format: int
    run: PretrainedRun


def _slug(index: int, name: str) -> str:
    return f"{index:02d}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model")


def _write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, records.to_json(document, indent=1))


def _read_versioned(kind: type[Any], path: Path, tensors: dict[str, Tensor] | None = None) -> Any:
    """The ``kind`` record in ``path`` after its ``format`` is checked (an older format is refused as such)."""
    document = records.read_json(path, rerun=RERUN)
    found = document.get("format") if isinstance(document, dict) else None
    if isinstance(document, dict) and "format" not in document:
        raise RecordError(f"{path}: format: missing, which every results file has: it is damaged. {RERUN}")
    if found != FORMAT:
        raise RecordError(f"{path} was saved in results format {found!r}; this mechprobe reads format {FORMAT}. "
                          f"{RERUN}")
    return records.checked(kind, document, path, rerun=RERUN, tensors=tensors)


def save_pretrained_run(run: PretrainedRun, folder: Path) -> None:
    """Everything :class:`PretrainedRun` holds, under ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    document = {"format": FORMAT, "run": records.dump(run, tensors)}
    save_file(tensors, str(folder / "run.safetensors"))
    _write_json(folder / "run.json", document)


def load_pretrained_run(folder: Path) -> PretrainedRun:
    """The :class:`PretrainedRun` :func:`save_pretrained_run` wrote into ``folder``."""
    if not folder.is_dir():
        raise RecordError(f"{folder} is missing (the results folder is incomplete). {RERUN}")
    tensors = records.read_tensors(folder / "run.safetensors", rerun=RERUN)
    saved: RunFile = _read_versioned(RunFile, folder / "run.json", tensors)
    return saved.run


def save_report_inputs(out: Path, toy_runs: dict[str, ToyRun], pretrained: dict[str, PretrainedRun],
                       corpus: CorpusSummary, settings: ReportSettings | None) -> None:
    """Write ``out/results/`` so :func:`load_report_inputs` can rebuild the report from it."""
    root = out / RESULTS
    folders = {spec: _slug(i, spec) for i, spec in enumerate(pretrained)}
    for spec, run in pretrained.items():
        save_pretrained_run(run, root / "pretrained" / folders[spec])
    for name, toy in toy_runs.items():
        _write_json(root / "toy" / f"{name}.json", ToyEntry(records.dump(toy.result), toy.folder.relative_to(
            out).as_posix(), sorted(png.name for png in toy.folder.glob("*.png"))))
    _write_json(root / "report.json", {"format": FORMAT, "corpus": corpus, "settings": settings,
                                       "pretrained": folders, "toys": list(toy_runs)})


def load_report_inputs(out: Path
                       ) -> tuple[dict[str, ToyRun], dict[str, PretrainedRun], CorpusSummary, ReportSettings | None]:
    """``(toy_runs, pretrained_runs, corpus, settings)`` from ``out/results/``, as the report had them."""
    root = out / RESULTS
    if not root.is_dir():
        raise RecordError(f"{out} has no {RESULTS}/ folder: render needs a folder written by mechprobe report "
                          f"(reports from before saved results must be re-run).")
    index: ReportIndex = _read_versioned(ReportIndex, root / "report.json")
    toys = {name: _load_toy(out, root / "toy" / f"{name}.json", name) for name in index.toys}
    pretrained = {spec: load_pretrained_run(root / "pretrained" / folder) for spec, folder in index.pretrained.items()}
    return toys, pretrained, index.corpus, index.settings


def _load_toy(out: Path, path: Path, name: str) -> ToyRun:
    """The toy run ``results/toy/NAME.json`` describes; its folder and every figure it lists must be there."""
    entry = records.read_record(ToyEntry, path, rerun=RERUN)
    result = toy_result(name, entry.summary, str(path), at="summary", rerun=RERUN)
    folder = out / entry.folder
    if not folder.is_dir():
        raise RecordError(f"{folder} is missing: the report's {name} toy figures and model are there ({path}: "
                          f"folder). {RERUN}")
    for figure in entry.figures or ():
        if not (folder / figure).is_file():
            raise RecordError(f"{folder / figure} is missing ({path}: figures): render would draw less than the "
                              f"report had. {RERUN}")
    return ToyRun(name, result, folder)
