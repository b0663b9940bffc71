"""Fit the time model's constants to the GPU rows of issue 44, and print each row's estimate beside its measurement.

``python -m analyses.plan.calibrate`` meters every row of :data:`analyses.plan.estimate.H200_ROWS` on ``meta``
(a few minutes on 2 cores), fits the flop and byte efficiencies and the per-call cost (least squares on log time
over the rows with a time; a grid search), and prints the rows with the fitted constants and with
:data:`~analyses.plan.estimate.CALIBRATION` (the constants in the code; copy the fitted ones there). It also prints
the ablation null's ratio to one forward as ``benchmarks/ablation_null_cost.py`` measures it (issue 44: 40.2x).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from analyses.plan.estimate import CALIBRATION, GPUS, H200_ROWS, Calibration, MeasuredRow, estimate
from analyses.plan.routes import RouteLedger, run
from analyses.plan.shapes import meta_models

NULL_RATIO = 40.2
"""Issue 44: the 200-draw null of benchmarks/ablation_null_cost.py (its defaults: 2 batches of 8 x [BOS] X X with
|X| = 50, mean ablation, float32, the SmolLM2-shape checkpoint) costs 40.2 times its forwards over the batches."""


def metered_rows(rows: Iterable[MeasuredRow]) -> list[tuple[MeasuredRow, RouteLedger]]:
    found = []
    models: dict[tuple[str, int], object] = {}
    for row in rows:
        key = (row.shape, row.n_pos)
        if key not in models:
            models[key] = meta_models(row.shape, n_pos=row.n_pos)
        found.append((row, run(models[key], row.route, row.n_pos)))  # type: ignore[arg-type]
    return found


def log_error(pairs: list[tuple[MeasuredRow, RouteLedger]], calibration: Calibration) -> float:
    return sum(math.log(estimate(ledger, GPUS["h200"], calibration).seconds / row.seconds) ** 2
               for row, ledger in pairs if row.seconds is not None)


def fit(pairs: list[tuple[MeasuredRow, RouteLedger]]) -> Calibration:
    """The constants of least log-time error over a grid (efficiencies 0.2-1.0 by 0.05, 0.5-20 us per call)."""
    import numpy as np

    timed = [(row, ledger) for row, ledger in pairs if row.seconds is not None]
    gpu = GPUS["h200"]
    arrays = [np.array([[f, b, n] for (f, b), n in ledger.kernels.items()], dtype=np.float64).reshape(-1, 3)
              for _, ledger in timed]
    measured = np.log([float(row.seconds or 0.0) for row, _ in timed])
    calls = np.array([ledger.device_calls for _, ledger in timed], dtype=np.float64)
    grid = [round(0.2 + 0.05 * i, 2) for i in range(17)]
    per_call = np.array([0.5e-6 * i for i in range(1, 41)])
    best = (math.inf, CALIBRATION)
    for f in grid:
        for b in grid:
            kernels = np.array([float((a[:, 2] * np.maximum(a[:, 0] / (gpu.flops_per_s * f),
                                                            a[:, 1] / (gpu.bytes_per_s * b))).sum()) for a in arrays])
            errors = ((np.log(kernels[None, :] + per_call[:, None] * calls[None, :]) - measured) ** 2).sum(1)
            if errors.min() < best[0]:
                best = (float(errors.min()), Calibration(f, b, float(per_call[errors.argmin()])))
    return best[1]


def null_ratio() -> tuple[float, float]:
    """(estimated null / forward time, null / forward FLOPs) at ablation_null_cost.py's defaults, one batch."""
    models = meta_models("smollm2-135m", n_pos=101, dtype=torch.float32)
    null, forward = run(models, "null", 101, batch=8), run(models, "bridge", 101, batch=8)
    gpu = GPUS["h200"]
    return estimate(null, gpu).seconds / estimate(forward, gpu).seconds, null.flops / forward.flops


def main() -> None:
    pairs = metered_rows(H200_ROWS)
    fitted = fit(pairs)
    print(f"fitted: {fitted} (log error {log_error(pairs, fitted):.3f}); in the code: {CALIBRATION} "
          f"(log error {log_error(pairs, CALIBRATION):.3f})")
    print(f"{'shape':<14} {'route':<7} {'tokens':>7} | {'measured s':>10} {'estimate s':>10} {'fitted s':>9} | "
          f"{'measured MiB':>12} {'ledger MiB':>10}")
    for row, ledger in pairs:
        shown = "OOM" if row.seconds is None else f"{row.seconds:.3f}"
        memory = "OOM" if row.memory_mib is None else f"{row.memory_mib:,.0f}"
        print(f"{row.shape:<14} {row.route:<7} {row.n_pos:>7} | {shown:>10} "
              f"{estimate(ledger, GPUS['h200']).seconds:>10.3f} "
              f"{estimate(ledger, GPUS['h200'], fitted).seconds:>9.3f} | "
              f"{memory:>12} {ledger.peak_bytes / 2**20:>10,.0f}")
    ratio, flops = null_ratio()
    print(f"ablation null (200 draws) / one forward: measured {NULL_RATIO}x, estimated {ratio:.1f}x "
          f"(FLOPs {flops:.1f}x)")


if __name__ == "__main__":
    main()
