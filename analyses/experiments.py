"""The toy experiments by name: each paper's presets, its run and how its saved result loads (CLI and report),
imported from the module its record names (:mod:`analyses.toy_registry`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from analyses.paper_result import PaperResult
from analyses.toy_findings import SeedFindings
from analyses.toy_registry import toy_spec


class ToyExperiment(Protocol):
    """What a toy's ``experiment`` module holds: ``PRESETS`` (preset name -> frozen config), ``run`` (train, probe
    and plot into ``out_dir``), ``result_from_summary`` (its typed result from ``summary.json``'s document) and
    ``seed_findings`` (only the findings, on one more seed: :mod:`analyses.toy_seeds`)."""

    PRESETS: Mapping[str, Any]

    def run(self, config: Any, out_dir: str | Path, *, progress: bool = True) -> PaperResult: ...

    def result_from_summary(self, document: Mapping[str, Any], where: str = "the summary", *, at: str = "",
                            rerun: str | None = None) -> PaperResult: ...

    def seed_findings(self, config: Any, seed: int) -> SeedFindings: ...


def toy_experiment(name: str) -> ToyExperiment:
    """The experiment module of toy ``name`` (:class:`ToyExperiment`); :class:`ConfigError` for an unknown name.

    Example: ``toy_experiment("induction").PRESETS["fast"]``.
    """
    return cast(ToyExperiment, importlib.import_module(toy_spec(name).experiment))


def toy_result(name: str, document: Mapping[str, Any], where: str = "the summary", *, at: str = "",
               rerun: str | None = None) -> PaperResult:
    """The typed result of toy ``name`` from its summary document (what ``summary.json`` holds; ``where``, ``at``
    and ``rerun`` name the file, the place in it and what to re-run when it does not read)."""
    return toy_experiment(name).result_from_summary(document, where, at=at, rerun=rerun)
