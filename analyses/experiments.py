"""The toy experiments by name: each paper's presets, its run and how its saved result loads (CLI and report)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from analyses.paper_result import PaperResult
from probes.core.errors import ConfigError

TOY_EXPERIMENTS = ("topic", "scansnap", "induction")


def toy_experiment(name: str) -> ModuleType:
    """``analyses.<name>.experiment``, which holds ``PRESETS`` (preset name -> frozen config),
    ``run(config, out_dir, *, progress) -> PaperResult`` and ``result_from_summary(document) -> PaperResult``.

    Example: ``toy_experiment("induction").PRESETS["fast"]``.
    """
    if name not in TOY_EXPERIMENTS:
        raise ConfigError(f"Unknown toy experiment {name!r}; choose from {', '.join(TOY_EXPERIMENTS)}.")
    return importlib.import_module(f"analyses.{name}.experiment")


def toy_result(name: str, document: Mapping[str, Any], where: str = "the summary", *, at: str = "",
               rerun: str | None = None) -> PaperResult:
    """The typed result of toy ``name`` from its summary document (what ``summary.json`` holds; ``where``, ``at``
    and ``rerun`` name the file, the place in it and what to re-run when it does not read)."""
    return toy_experiment(name).result_from_summary(document, where, at=at, rerun=rerun)
