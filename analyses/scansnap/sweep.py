"""Scan and Snap's Figure 6: final attention entropy over the learning-rate grid (``--preset sweep``).

For every number of last tokens ``sweep.num_last`` (``sweep.num_next_per_last`` next tokens each), every
``eta_Z`` and every ratio ``eta_Y / eta_Z``, ``sweep.seeds`` Y/Z models (seeds 0..n-1: initialisation
and data stream) train for ``train.n_steps`` steps; all cells of one ``num_last`` train together as one
stacked batch (:func:`toymodels.scansnap.seeds.train_yz_runs`, equal to separate runs up to rounding).
The statistic is the final entropy (nats) of the long-context composition
``c_l ~ P(l | m, n) exp(Z[m, l])`` restricted to the fact's distinct tokens and renormalised,
averaged over facts; each cell reports its mean and std over seeds, plus the entropy over the
whole support and the snap step (:func:`probes.dynamics.snap.detect_snap_by_rate`, averaged over facts and seeds).

The paper's reading of Figure 6 (Section 5, Theorem 5): a larger ``eta_Z`` gives a sparser final
attention (lower entropy); a larger ``eta_Y / eta_Z`` makes the decoder learn faster, the snap come
earlier and the attention stay less sparse (higher entropy). :func:`figure6_trends` checks both
in every row of the grid. The figure is :func:`analyses.scansnap.figures.plot_sweep`.
"""

from __future__ import annotations

import itertools
import math
from typing import TYPE_CHECKING, Any

import torch

from analyses.scansnap.result import Figure6Trends, MonotoneRows
from probes.attention.key_token_attention import entropy_nats
from probes.dynamics.snap import detect_snap_by_rate
from probes.text.cooccurrence import spearman
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.seeds import YZRun, support_compositions, train_yz_runs

if TYPE_CHECKING:
    from analyses.scansnap.config import ScanSnapConfig


def sweep_group(config: ScanSnapConfig, num_last: int) -> list[dict[str, Any]]:
    """Every (eta_Z, ratio) cell of one ``num_last``, trained as one batch of runs."""
    sweep, train = config.sweep, config.train
    data = CooccurrenceData(CooccurrenceConfig(num_last, sweep.num_next_per_last, config.data.num_common,
                                               config.data.num_distinct, config.data.seq_len))
    cells = [(eta_z, ratio) for eta_z in sweep.eta_z for ratio in sweep.ratio]
    runs = [YZRun(seed=seed, eta_y=ratio * eta_z, eta_z=eta_z) for eta_z, ratio in cells
            for seed in range(sweep.seeds)]
    result = train_yz_runs(data, runs, n_steps=train.n_steps, batch_size=train.batch_size,
                           optimizer=train.optimizer, momentum=train.momentum, init=sweep.init,
                           device=config.device)
    final = support_compositions(result.Z, data)  # run fact support (common, then distinct tokens)
    n_common = config.data.num_common
    distinct_entropy = entropy_nats(final[..., n_common:]).mean(-1)  # run (entropy_nats renormalises)
    support_entropy = entropy_nats(final).mean(-1)
    steps = list(range(train.n_steps + 1))
    found = [[detect_snap_by_rate(result.support_trajectory[:, r, f], steps, rate=config.snap_rate,
                                  patience=config.snap_patience) for f in range(data.n_facts)]
             for r in range(len(runs))]
    snaps = torch.tensor([[s.step for s in run] for run in found], dtype=torch.float64)
    snapped = torch.tensor([[s.snapped for s in run] for run in found], dtype=torch.float64)

    def std(t: torch.Tensor) -> float:
        return float(t.std()) if len(t) > 1 else 0.0

    rows = []
    for c, (eta_z, ratio) in enumerate(cells):
        chosen = slice(c * sweep.seeds, (c + 1) * sweep.seeds)
        d, s = distinct_entropy[chosen], support_entropy[chosen]
        rows.append({"num_last": num_last, "num_next": data.config.num_next, "eta_z": eta_z, "ratio": ratio,
                     "eta_y": ratio * eta_z, "entropy_mean": float(d.mean()), "entropy_std": std(d),
                     "entropy_all_mean": float(s.mean()), "entropy_all_std": std(s),
                     "snap_step_mean": float(snaps[chosen].mean()), "snapped_fraction": float(snapped[chosen].mean()),
                     "final_loss_mean": float(result.loss[-1, chosen].mean()) if len(result.loss) else math.nan,
                     "seeds": sweep.seeds})
    return rows


def run_sweep(config: ScanSnapConfig, *, progress: bool) -> list[dict[str, Any]]:
    """All cells of the grid (module docstring), one row per (num_last, eta_Z, ratio)."""
    from tqdm.auto import tqdm

    rows: list[dict[str, Any]] = []
    for num_last in tqdm(config.sweep.num_last, desc="sweep (one batch per #last tokens)", disable=not progress):
        rows += sweep_group(config, num_last)
    return rows


def figure6_trends(sweep: list[dict[str, Any]]) -> Figure6Trends:
    """Do the sweep's entropies move as Figure 6 reads? Counts rows where they do, and where they do not.

    ``entropy_falls_with_eta_z``: rows (num_last, ratio) whose mean entropy strictly decreases as eta_Z
    grows; ``entropy_rises_with_ratio``: rows (num_last, eta_Z) whose mean entropy strictly increases
    with the ratio; ``spearman_eta_z`` / ``spearman_ratio``: Spearman over all cells, within each
    panel of the other setting, averaged.
    """
    def rows_by(fixed: tuple[str, str], moving: str) -> dict[tuple, list[tuple[float, float]]]:
        groups: dict[tuple, list[tuple[float, float]]] = {}
        for row in sweep:
            groups.setdefault(tuple(row[k] for k in fixed), []).append((row[moving], row["entropy_mean"]))
        return {k: sorted(v) for k, v in groups.items()}

    def monotone(groups: dict[tuple, list[tuple[float, float]]], sign: int) -> MonotoneRows:
        holds, failing = 0, []
        for key, points in groups.items():
            values = [e for _, e in points]
            if all(sign * (b - a) > 0 for a, b in itertools.pairwise(values)):
                holds += 1
            else:
                failing.append(key)
        return MonotoneRows(len(groups), holds, tuple(failing))

    def mean_spearman(groups: dict[tuple, list[tuple[float, float]]]) -> float:
        values = [float(spearman(torch.tensor([x for x, _ in p]), torch.tensor([e for _, e in p])))
                  for p in groups.values() if len(p) > 1]
        values = [v for v in values if not math.isnan(v)]
        return sum(values) / len(values) if values else math.nan

    by_eta_z = rows_by(("num_last", "ratio"), "eta_z")
    by_ratio = rows_by(("num_last", "eta_z"), "ratio")
    return Figure6Trends(monotone(by_eta_z, -1), monotone(by_ratio, +1), mean_spearman(by_eta_z),
                         mean_spearman(by_ratio))
