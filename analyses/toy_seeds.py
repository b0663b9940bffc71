"""A toy experiment over several seeds: the full run on the config's seed, then only the findings on more seeds.

``mechprobe toy NAME --seeds N`` and ``mechprobe report --toy-seeds N`` both come here. The experiment's
``run(config, out)`` trains, probes and plots everything on ``config.seed`` (its result holds that seed's
findings); each further seed ``config.seed + k`` (k = 1 .. N-1) trains only what the findings need
(``seed_findings`` of the paper's findings module). The findings over all seeds
(:func:`analyses.toy_findings.aggregate_seeds`) replace the result's, and summary.json is written again.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, cast

from tqdm.auto import tqdm

from analyses.experiments import toy_experiment
from analyses.paper_result import PaperResult
from analyses.toy_findings import SeedFindings, aggregate_seeds, seed_findings_of
from mechprobe.validation import integer

log = logging.getLogger(__name__)


def extra_seed_findings(name: str, config: Any, seeds: list[int], *, progress: bool) -> list[SeedFindings]:
    """The findings of toy ``name`` on each of ``seeds``, one after another (training a toy seed is a small part
    of measuring it: stacking seeds in one batch would save little)."""
    module = toy_experiment(name)
    return [module.seed_findings(config, seed)
            for seed in tqdm(seeds, desc=f"{name} toy: more seeds", disable=not progress, leave=False)]


def run_with_seeds(name: str, config: Any, out_dir: str | Path, *, n_seeds: int, progress: bool) -> PaperResult:
    """Run toy ``name`` on ``config`` into ``out_dir`` and judge its findings over ``n_seeds`` seeds
    (``config.seed``, ``config.seed + 1``, ...); return the result holding the findings over all seeds.

    Example: ``run_with_seeds("topic", PRESETS["fast"], "runs/topic", n_seeds=5, progress=False).toy_findings()``.
    """
    integer("n_seeds", n_seeds, 1)
    module = toy_experiment(name)
    result = module.run(config, out_dir, progress=progress)
    first = seed_findings_of(result.toy_findings())
    if n_seeds == 1 or not first:
        return result
    started = time.perf_counter()
    extra = extra_seed_findings(name, config, [config.seed + k for k in range(1, n_seeds)], progress=progress)
    log.info("%s toy: %d more seeds in %.1f s", name, n_seeds - 1, time.perf_counter() - started)
    result = dataclasses.replace(cast(Any, result), findings=aggregate_seeds(name, first + extra))  # a dataclass
    result.save(out_dir)
    return result
