"""A toy experiment over several seeds: the full run on the config's seed, then only the findings on more seeds.

``mechprobe toy NAME --seeds N`` and ``mechprobe report --toy-seeds N`` both come here. The experiment's
``run(config, out)`` trains, probes and plots everything on ``config.seed`` (its result holds that seed's
findings); each further seed ``config.seed + k`` (k = 1 .. N-1) trains only what the findings need
(``seed_findings`` of the paper's findings module). The findings over all seeds
(:func:`analyses.toy_findings.aggregate_seeds`) replace the result's, and summary.json is written again.

The further seeds are independent, and every toy trains and measures them on one torch thread, so ``workers > 1``
measures them in that many worker processes while this process runs the full runs: the same numbers, bit for bit,
in less wall time (the toys are small enough that a second thread in one process does not help them).
"""

from __future__ import annotations

import ctypes
import dataclasses
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import Any, cast

from tqdm.auto import tqdm

from analyses.experiments import toy_experiment
from analyses.paper_result import PaperResult
from analyses.toy_findings import SeedFindings, aggregate_seeds, seed_findings_of
from mechprobe.validation import integer

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def usable_cpus() -> int:
    """The CPU cores this process may run on (its affinity where the platform says, else the machine's count)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def extra_seed_findings(name: str, config: Any, seeds: list[int], *, progress: bool) -> list[SeedFindings]:
    """The findings of toy ``name`` on each of ``seeds``, one after another in this process."""
    module = toy_experiment(name)
    return [module.seed_findings(config, seed)
            for seed in tqdm(seeds, desc=f"{name} toy: more seeds", disable=not progress, leave=False)]


def _seed_findings(name: str, config: Any, seed: int) -> SeedFindings:
    """One further seed's findings (a worker process's task)."""
    return toy_experiment(name).seed_findings(config, seed)


def _worker_start(parent: int) -> None:
    """A worker leaves Ctrl-C to the process that started it (which stops the workers), ends on SIGTERM whatever
    handlers that process had when it forked, and on Linux gets SIGTERM when that process dies (killed, it cannot
    stop them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # it died before the line above
            os._exit(1)


@contextmanager
def _seed_pool(workers: int) -> Iterator[Pool | None]:
    """``workers`` processes for the further seeds (none for one worker). Forked where the platform can (the
    workers start with this process's imports instead of importing torch again). Leaving the block normally waits
    for them; an error or an interrupt here stops them at once."""
    if workers <= 1:
        yield None
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    pool = context.Pool(workers, _worker_start, (os.getpid(),))
    try:
        yield pool
    except BaseException:
        pool.terminate()
        raise
    else:
        pool.close()
    finally:
        pool.join()


def _pooled_seeds(runs: Sequence[tuple[str, Any, Path]], n_seeds: int) -> list[tuple[int, int]]:
    """``(index in runs, seed)`` of every further seed a worker may measure: those of the toys on the CPU."""
    return [(i, config.seed + k) for i, (_, config, _) in enumerate(runs)
            if str(getattr(config, "device", "cpu")) == "cpu" for k in range(1, n_seeds)]


class ToySeeds:
    """The toys of ``runs`` (``(name, config, out_dir)`` each) with the further seeds ``pooled`` (``(index, seed)``)
    already handed to worker processes (``pool``; None, or a seed not pooled: measured here when :meth:`results`
    needs it)."""

    def __init__(self, runs: Sequence[tuple[str, Any, Path]], n_seeds: int, pool: Pool | None,
                 pooled: Sequence[tuple[int, int]]) -> None:
        self.runs, self.n_seeds = list(runs), n_seeds
        self.futures: dict[tuple[int, int], AsyncResult[SeedFindings]] = {} if pool is None else {
            (i, seed): pool.apply_async(_seed_findings, (self.runs[i][0], self.runs[i][1], seed))
            for i, seed in pooled}

    def results(self, *, progress: bool) -> list[PaperResult]:
        """Each toy's full run, here and in order, with its findings judged over all seeds."""
        results = []
        for i, (name, config, out_dir) in enumerate(self.runs):
            result = toy_experiment(name).run(config, out_dir, progress=progress)
            first = seed_findings_of(result.toy_findings())
            if self.n_seeds > 1 and first:
                started = time.perf_counter()
                seeds = [config.seed + k for k in range(1, self.n_seeds)]
                if (i, seeds[0]) in self.futures:
                    extra = [self.futures[i, seed].get() for seed in tqdm(
                        seeds, desc=f"{name} toy: more seeds", disable=not progress, leave=False)]
                else:
                    extra = extra_seed_findings(name, config, seeds, progress=progress)
                log.info("%s toy: %d more seeds in %.1f s", name, self.n_seeds - 1, time.perf_counter() - started)
                result = dataclasses.replace(cast(Any, result), findings=aggregate_seeds(name, first + extra))
                result.save(out_dir)
            results.append(result)
        return results


@contextmanager
def toy_seeds(runs: Sequence[tuple[str, Any, Path]], *, n_seeds: int, workers: int = 1) -> Iterator[ToySeeds]:
    """The further seeds of every toy in ``runs`` handed to up to ``workers`` processes now (on the CPU only; a
    toy on another device measures its seeds in this process), so other work can run here until
    :meth:`ToySeeds.results`; leaving the block waits for the workers, or on an error stops them.

    Example: ``with toy_seeds(runs, n_seeds=5, workers=2) as seeds: ...; results = seeds.results(progress=False)``.
    """
    integer("n_seeds", n_seeds, 1)
    integer("workers", workers, 1)
    pooled = _pooled_seeds(runs, n_seeds)
    with _seed_pool(min(workers, len(pooled))) as pool:
        yield ToySeeds(runs, n_seeds, pool, pooled)


def run_toys_with_seeds(runs: Sequence[tuple[str, Any, Path]], *, n_seeds: int, progress: bool, workers: int = 1
                        ) -> list[PaperResult]:
    """Each ``(name, config, out_dir)`` of ``runs`` run into ``out_dir`` with its findings judged over ``n_seeds``
    seeds (``config.seed``, ``config.seed + 1``, ...), in order; the further seeds of every toy in up to
    ``workers`` processes beside the full runs (:func:`toy_seeds`).

    Example: ``run_toys_with_seeds([("topic", PRESETS["fast"], Path("runs/topic"))], n_seeds=5, progress=False,
    workers=2)[0].toy_findings()``.
    """
    with toy_seeds(runs, n_seeds=n_seeds, workers=workers) as seeds:
        return seeds.results(progress=progress)


def run_with_seeds(name: str, config: Any, out_dir: str | Path, *, n_seeds: int, progress: bool) -> PaperResult:
    """Run toy ``name`` on ``config`` into ``out_dir`` and judge its findings over ``n_seeds`` seeds
    (``config.seed``, ``config.seed + 1``, ...); return the result holding the findings over all seeds
    (:func:`run_toys_with_seeds` for one toy).

    Example: ``run_with_seeds("topic", PRESETS["fast"], "runs/topic", n_seeds=5, progress=False).toy_findings()``.
    """
    return run_toys_with_seeds([(name, config, Path(out_dir))], n_seeds=n_seeds, progress=progress)[0]
