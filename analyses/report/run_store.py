"""A report's results on disk, so the report can be rebuilt without a model: ``OUT/results/``.

Layout::

    results/report.json                     corpus, settings, the order of models and toy settings
    results/toy/NAME.json                   each toy run's summary.json document (loaded back as its typed result)
    results/pretrained/NN-MODEL/run.json    the whole :class:`~analyses.pretrained.measure.PretrainedRun`: model
                                            facts, topic map, every probe result of the model and its control,
                                            held-out statistics, ablations, findings
    results/pretrained/NN-MODEL/run.safetensors   every tensor of it (all per-head tensors, not only the top heads)

Everything goes through :mod:`mechprobe.records` (strict JSON; a non-finite number is ``null`` and comes back
as NaN where the field is a float). :func:`load_report_inputs` gives back what
:func:`analyses.report.compare.compare` needs, so ``mechprobe render OUT`` rewrites report.md, report.html
and summary.json byte for byte as the run wrote them. A results folder written by another format (mechprobe
before 0.2 wrote format 1) is refused in one line that says to re-run ``mechprobe report``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file
from torch import Tensor

from analyses.experiments import toy_result
from analyses.pretrained.measure import PretrainedRun
from analyses.report.compare import ToyRun
from analyses.report.config import ReportSettings
from analyses.report.corpus import CorpusSummary
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text
from probes.core.errors import InputError

RESULTS = "results"
FORMAT = 2
RERUN = "re-run mechprobe report."


def _slug(index: int, name: str) -> str:
    return f"{index:02d}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model")


def _write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, records.to_json(document, indent=1))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path} is missing: the results folder is incomplete; {RERUN}")
    try:
        return records.strict_json(path.read_text(encoding="utf-8"))
    except RecordError as error:
        raise InputError(f"{path}: {error} {RERUN.capitalize()}") from None
    except ValueError as error:
        raise InputError(f"{path} is not valid JSON ({error}); {RERUN}") from None


def _check_format(document: Any, where: Path) -> None:
    found = document.get("format") if isinstance(document, dict) else None
    if found != FORMAT:
        raise InputError(f"{where} was saved in results format {found!r}; this mechprobe reads format {FORMAT}. "
                         f"{RERUN.capitalize()}")


def _load(kind: type[Any], document: Any, where: Path, tensors: dict[str, Tensor] | None = None) -> Any:
    try:
        return records.load(kind, document, tensors, where=str(where))
    except RecordError as error:
        raise InputError(f"{error} {RERUN.capitalize()}") from None


def save_pretrained_run(run: PretrainedRun, folder: Path) -> None:
    """Everything :class:`PretrainedRun` holds, under ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, Tensor] = {}
    document = {"format": FORMAT, "run": records.dump(run, tensors)}
    save_file(tensors, str(folder / "run.safetensors"))
    _write_json(folder / "run.json", document)


def load_pretrained_run(folder: Path) -> PretrainedRun:
    """The :class:`PretrainedRun` :func:`save_pretrained_run` wrote into ``folder``."""
    document = _read_json(folder / "run.json")
    _check_format(document, folder)
    tensors = load_file(str(folder / "run.safetensors"))
    run: PretrainedRun = _load(PretrainedRun, document["run"], folder / "run.json", tensors)
    return run


def save_report_inputs(out: Path, toy_runs: dict[str, ToyRun], pretrained: dict[str, PretrainedRun],
                       corpus: CorpusSummary, settings: ReportSettings | None) -> None:
    """Write ``out/results/`` so :func:`load_report_inputs` can rebuild the report from it."""
    root = out / RESULTS
    folders = {spec: _slug(i, spec) for i, spec in enumerate(pretrained)}
    for spec, run in pretrained.items():
        save_pretrained_run(run, root / "pretrained" / folders[spec])
    for name, toy in toy_runs.items():
        _write_json(root / "toy" / f"{name}.json", {"summary": records.dump(toy.result),
                                                    "folder": toy.folder.relative_to(out).as_posix()})
    _write_json(root / "report.json", {"format": FORMAT, "corpus": corpus, "settings": settings,
                                       "pretrained": folders, "toys": list(toy_runs)})


def load_report_inputs(out: Path
                       ) -> tuple[dict[str, ToyRun], dict[str, PretrainedRun], CorpusSummary, ReportSettings | None]:
    """``(toy_runs, pretrained_runs, corpus, settings)`` from ``out/results/``, as the report had them."""
    root = out / RESULTS
    if not root.is_dir():
        raise InputError(f"{out} has no {RESULTS}/ folder: render needs a folder written by mechprobe report "
                         f"(reports from before saved results must be re-run).")
    document = _read_json(root / "report.json")
    _check_format(document, root)
    toys = {}
    for name in document["toys"]:
        toy = _read_json(root / "toy" / f"{name}.json")
        toys[name] = ToyRun(name, toy_result(name, toy["summary"]), out / toy["folder"])
    pretrained = {spec: load_pretrained_run(root / "pretrained" / folder)
                  for spec, folder in document["pretrained"].items()}
    corpus: CorpusSummary = _load(CorpusSummary, document["corpus"], root / "report.json")
    settings: ReportSettings | None = (None if document["settings"] is None
                                       else _load(ReportSettings, document["settings"], root / "report.json"))
    return toys, pretrained, corpus, settings
