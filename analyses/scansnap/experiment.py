"""``mechprobe toy scansnap``: Tian et al. 2023, "Scan and Snap", on the co-occurrence task and on WikiText-2.

Presets (every ``summary.json`` names its paper, figure and remaining deviations under ``reference``;
:mod:`analyses.scansnap.reference`):

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

Run time, one torch thread on a 2-core machine shared with other jobs (wall, whole command):
``fast`` 7.5 s, ``paper`` 23 s, ``adam`` 53 s (under heavier load), ``sweep`` 2 min 10 s (its 640 runs
train as four stacked batches: 100 s), ``wikitext`` 4 min 45 s (1038 steps on the test split).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from analyses.timings import write_timings
from analyses.toy_model_store import save_toy_model
from probes.core.atomic import atomic_write_text
from probes.text.cooccurrence import cooccurrence_ordering
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, entropy_nats
from probes.core.loading import check_device
from probes.core.runner import model_device, run_probes
from probes.dynamics.scan_order import scan_order
from probes.dynamics.snap import detect_snap_by_rate
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.errors import ToyConfigError
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.scansnap.training import TwoRateConfig, query_logits, train_on_cooccurrence
from toymodels.standard import StandardModelConfig, build_standard_model

log = logging.getLogger(__name__)

LOSS_TARGET = 0.05


def _positive_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0


@dataclass(frozen=True)
class ScanSnapConfig:
    """Every setting of the experiment; ``mechprobe toy scansnap --set key=value`` overrides fields.

    ``experiment`` picks the co-occurrence task (main run, standard model, optional sweep) or WikiText.
    ``device`` is where the models train and are probed (data is sampled on the CPU).
    """

    experiment: Literal["cooccurrence", "wikitext"] = "cooccurrence"
    num_last: int = 2
    num_next_per_last: int = 1
    num_common: int = 10
    num_distinct: int = 10
    seq_len: int = 128
    init: Literal["zero", "linear"] = "zero"
    eta_y: float = 1.0
    eta_z: float = 1.0
    optimizer: Literal["sgd", "adam"] = "sgd"
    momentum: float = 0.9
    batch_size: int = 128
    n_steps: int = 100
    seed: int = 0
    eval_sequences: int = 512
    snap_rate: float = 0.01
    snap_patience: int = 10
    scan_tolerance: float = 0.05
    train_standard: bool = True
    standard_d_model: int = 64
    standard_optimizer: Literal["sgd", "adam"] = "adam"
    standard_eta_y: float = 0.01
    standard_eta_z: float = 0.01
    standard_steps: int = 200
    sweep_num_last: tuple[int, ...] = ()
    sweep_num_next_per_last: int = 2
    sweep_eta_z: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
    sweep_ratio: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
    sweep_seeds: int = 10
    sweep_init: Literal["zero", "linear"] = "linear"
    threads: int = 1
    wikitext_train: str = "../shared/data/wikitext-2/wiki.test.tokens"
    wikitext_probe: str = "../shared/data/wikitext-2/wiki.valid.tokens"
    wikitext_max_vocab: int | None = None
    wikitext_d_model: int = 200
    wikitext_d_mlp: int = 200
    wikitext_heads: int = 1
    wikitext_dropout: float = 0.2
    wikitext_bptt: int = 35
    wikitext_batch_size: int = 20
    wikitext_lr: float = 5.0
    wikitext_gamma: float = 0.95
    wikitext_clip: float = 0.5
    wikitext_epochs: int = 3
    wikitext_max_steps: int | None = None
    wikitext_snapshot_every: int = 50
    wikitext_probe_windows: int = 1000
    wikitext_queries: int = 30
    wikitext_query_rank: int = 50
    wikitext_keys: int = 300
    wikitext_min_cooccurrence: int = 5
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        if self.experiment not in ("cooccurrence", "wikitext"):
            raise ToyConfigError(f"experiment must be 'cooccurrence' or 'wikitext'; got {self.experiment!r}.")
        for name, low in (("eval_sequences", 2), ("snap_patience", 0), ("standard_d_model", 1),
                          ("standard_steps", 0), ("sweep_seeds", 1), ("sweep_num_next_per_last", 1), ("threads", 1),
                          ("wikitext_d_model", 1), ("wikitext_d_mlp", 1), ("wikitext_heads", 1),
                          ("wikitext_bptt", 2), ("wikitext_batch_size", 1), ("wikitext_epochs", 1),
                          ("wikitext_snapshot_every", 1), ("wikitext_probe_windows", 1), ("wikitext_queries", 1),
                          ("wikitext_query_rank", 1), ("wikitext_keys", 2), ("wikitext_min_cooccurrence", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ToyConfigError(f"ScanSnapConfig.{name} must be an integer >= {low}; got {value!r}.")
        for name, low in (("wikitext_max_vocab", 4), ("wikitext_max_steps", 1)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ToyConfigError(f"ScanSnapConfig.{name} must be none or an integer >= {low}; got {value!r}.")
        if not _positive_number(self.snap_rate) or self.snap_rate >= 1:
            raise ToyConfigError(f"snap_rate must lie in (0, 1) (a fraction of the total change per step); got "
                                 f"{self.snap_rate!r}.")
        if isinstance(self.scan_tolerance, bool) or not isinstance(self.scan_tolerance, (int, float)) \
                or not 0 <= self.scan_tolerance < 1:
            raise ToyConfigError(f"scan_tolerance must lie in [0, 1); got {self.scan_tolerance!r}.")
        for name in ("standard_eta_y", "standard_eta_z", "wikitext_lr", "wikitext_clip"):
            if not _positive_number(getattr(self, name)):
                raise ToyConfigError(f"ScanSnapConfig.{name} must be a finite number > 0; got {getattr(self, name)!r}.")
        if not (_positive_number(self.wikitext_gamma) and self.wikitext_gamma <= 1):
            raise ToyConfigError(f"wikitext_gamma must lie in (0, 1]; got {self.wikitext_gamma!r}.")
        if isinstance(self.wikitext_dropout, bool) or not isinstance(self.wikitext_dropout, (int, float)) \
                or not 0 <= self.wikitext_dropout < 1:
            raise ToyConfigError(f"wikitext_dropout must lie in [0, 1); got {self.wikitext_dropout!r}.")
        if self.wikitext_d_model % self.wikitext_heads:
            raise ToyConfigError(f"wikitext_d_model ({self.wikitext_d_model}) must be divisible by wikitext_heads "
                                 f"({self.wikitext_heads}).")
        if self.wikitext_max_vocab is not None and self.wikitext_max_vocab < max(
                self.wikitext_query_rank + self.wikitext_queries, self.wikitext_keys + 1):
            raise ToyConfigError(
                f"wikitext_max_vocab ({self.wikitext_max_vocab}) must hold the query words (ranks up to "
                f"{self.wikitext_query_rank + self.wikitext_queries}) and the {self.wikitext_keys} key words; raise it "
                f"or lower wikitext_query_rank / wikitext_queries / wikitext_keys.")
        for name in ("sweep_eta_z", "sweep_ratio"):
            values = getattr(self, name)
            if not values or any(not _positive_number(v) for v in values):
                raise ToyConfigError(f"ScanSnapConfig.{name} must be a non-empty tuple of numbers > 0; got {values!r}.")
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in self.sweep_num_last):
            raise ToyConfigError(f"sweep_num_last must hold integers >= 1 (empty = no sweep); got {self.sweep_num_last!r}.")
        self.data_config()
        self.train_config()
        YZModelConfig(d_vocab=self.data_config().d_vocab, n_ctx=self.seq_len, init=self.init, seed=self.seed)

    def data_config(self) -> CooccurrenceConfig:
        return CooccurrenceConfig(self.num_last, self.num_next_per_last, self.num_common, self.num_distinct,
                                  self.seq_len)

    def train_config(self) -> TwoRateConfig:
        return TwoRateConfig(self.eta_y, self.eta_z, self.optimizer, self.momentum, self.batch_size,
                             self.n_steps, self.seed)


PRESETS: dict[str, ScanSnapConfig] = {
    "paper": ScanSnapConfig(),
    "fast": ScanSnapConfig(eval_sequences=128, standard_d_model=32, standard_steps=20),
    "adam": ScanSnapConfig(optimizer="adam", eta_y=0.05, eta_z=0.05),
    "sweep": ScanSnapConfig(sweep_num_last=(1, 3, 5, 10)),
    "wikitext": ScanSnapConfig(experiment="wikitext", train_standard=False),
}


# -- probing ---------------------------------------------------------------------------------------
def probe_fact(model: nn.Module, data: CooccurrenceData, fact: int, tokens: torch.Tensor, *,
               batch_size: int = 128) -> KeyTokenAttention:
    """Key-token attention of the fact's query token (query row -1) over the given sequences."""
    probe = KeyTokenAttentionProbe([int(data.fact_last[fact])], query_position="last")
    (result,) = run_probes(model, [probe], tokens.split(batch_size), data=f"cooccurrence fact {fact}",
                           progress=False)
    return result


def fact_statistics(result: KeyTokenAttention, data: CooccurrenceData, fact: int) -> dict[str, float]:
    """Masses, entropies and co-occurrence ordering of one fact from its probe result."""
    query = int(data.fact_last[fact])
    distinct = data.distinct_tokens[fact]
    known = data.context_probs[fact][None].float()
    ordering = cooccurrence_ordering(result, known, keys=distinct.tolist())
    corpus = cooccurrence_ordering(result, None, keys=distinct.tolist())
    by_mass = cooccurrence_ordering(result, known, keys=distinct.tolist(), measure="mass")
    return {
        "distinct_mass": result.key_mass(query, distinct),
        "common_mass": result.key_mass(query, data.common_tokens) if len(data.common_tokens) else 0.0,
        "entropy": result.token_entropy(query, distinct),
        "entropy_all": result.token_entropy(query, data.support(fact)),
        "cooccurrence_spearman": float(ordering.spearman[0, 0, 0]),
        "cooccurrence_kendall": float(ordering.kendall[0, 0, 0]),
        "cooccurrence_spearman_corpus": float(corpus.spearman[0, 0, 0]),
        "cooccurrence_spearman_mass": float(by_mass.spearman[0, 0, 0]),
    }


def average_statistics(results: list[KeyTokenAttention], data: CooccurrenceData) -> dict[str, float]:
    """``fact_statistics`` averaged over facts (``results[f]`` probed on fact ``f``'s sequences)."""
    rows = [fact_statistics(result, data, f) for f, result in enumerate(results)]
    return {key: sum(r[key] for r in rows) / len(rows) for key in rows[0]}


def eval_loss(model: nn.Module, data: CooccurrenceData, eval_sets: list[torch.Tensor]) -> float:
    """Query-token cross-entropy averaged over facts (``eval_sets[f]``: fact ``f``'s sequences).

    The sequences are moved to the model's device.
    """
    device = model_device(model)
    with torch.no_grad():
        losses = [F.cross_entropy(query_logits(model, tokens.to(device)),
                                  data.fact_next[f].expand(len(tokens)).to(device))
                  for f, tokens in enumerate(eval_sets)]
    return float(torch.stack(losses).mean())


def expected_attention(model: YZTransformer, data: CooccurrenceData) -> torch.Tensor:
    """The Y/Z model's long-context composition [fact d_vocab] of every fact, on the CPU."""
    return model.expected_attention(data.fact_last, data.context_probs).cpu()


# -- main run ----------------------------------------------------------------------------------------
def main_run(config: ScanSnapConfig, *, progress: bool) -> dict[str, Any]:
    """Train the Y/Z model, recording the support composition of every fact at every step."""
    data = CooccurrenceData(config.data_config())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=config.seq_len, init=config.init,
                                        seed=config.seed), device=config.device)
    generator = torch.Generator().manual_seed(config.seed + 1_000_003)
    eval_sets = [data.sample(config.eval_sequences, generator, fact=f)[0] for f in range(data.n_facts)]
    supports = [data.support(f) for f in range(data.n_facts)]
    trajectory: list[list[torch.Tensor]] = [[] for _ in range(data.n_facts)]

    def record(step: int, trained: nn.Module, history: Any) -> None:
        expected = expected_attention(trained, data)
        for f in range(data.n_facts):
            trajectory[f].append(expected[f, supports[f]].float())

    record(0, model, None)
    history = train_on_cooccurrence(model, data, config.train_config(), callbacks=[record], progress=progress,
                                    desc="Y/Z model")
    steps = [0, *history.steps]
    snaps = [detect_snap_by_rate(torch.stack(trajectory[f]), steps, rate=config.snap_rate,
                                 patience=config.snap_patience) for f in range(data.n_facts)]
    n_common = len(data.common_tokens)
    orders = [scan_order(torch.stack(trajectory[f])[:, n_common:], data.context_probs[f, data.distinct_tokens[f]],
                         steps, tolerance=config.scan_tolerance) for f in range(data.n_facts)]
    losses = history.values["loss"]
    below = [s for s, loss in zip(history.steps, losses) if loss < LOSS_TARGET]
    expected = expected_attention(model, data)
    expected_entropy = entropy_nats(torch.gather(expected, 1, data.distinct_tokens)).mean()
    results = [probe_fact(model, data, f, eval_sets[f]) for f in range(data.n_facts)]
    deviation = max(float((r.mass[0, 0, 0, supports[f]] - expected[f, supports[f]]).abs().max())
                    for f, r in enumerate(results))
    summary = {
        "final_loss": eval_loss(model, data, eval_sets),
        **average_statistics(results, data),
        "probe_vs_expected_max_abs": deviation,
        "snap_step": max(s.step for s in snaps),
        "snapped": all(s.snapped for s in snaps),
        "scan_order_spearman": sum(o.spearman for o in orders) / len(orders),
        "scan_order_kendall": sum(o.kendall for o in orders) / len(orders),
        "initial_loss": losses[0],
        "log_vocab": math.log(data.d_vocab),
        "loss_at_step_10": losses[min(9, len(losses) - 1)],
        "first_step_below_0.05": below[0] if below else None,
        "entropy_expected": float(expected_entropy),
        "entropy_uniform_distinct": float(entropy_nats(torch.gather(data.context_probs, 1, data.distinct_tokens)).mean()),
    }
    return {"summary": summary, "history": history, "trajectory": trajectory, "steps": steps, "data": data,
            "snaps": snaps, "scan_orders": orders, "model": model}


def standard_run(config: ScanSnapConfig) -> dict[str, Any]:
    """A standard 1-layer attention-only TL model (no positional encoding) on the same data and probes."""
    data = CooccurrenceData(config.data_config())
    model = build_standard_model(StandardModelConfig(
        n_layers=1, d_model=config.standard_d_model, n_heads=1, d_vocab=data.d_vocab, n_ctx=config.seq_len,
        attn_only=True, positional="none", attention_dir="causal", seed=config.seed), device=config.device)
    train_config = dataclasses.replace(config.train_config(), eta_y=config.standard_eta_y,
                                       eta_z=config.standard_eta_z, optimizer=config.standard_optimizer,
                                       n_steps=config.standard_steps)
    history = train_on_cooccurrence(model, data, train_config, desc="standard model")
    generator = torch.Generator().manual_seed(config.seed + 1_000_003)
    eval_sets = [data.sample(config.eval_sequences, generator, fact=f)[0] for f in range(data.n_facts)]
    return {
        "final_loss": eval_loss(model, data, eval_sets),
        "initial_loss": history.values["loss"][0] if history.steps else None,
        **average_statistics([probe_fact(model, data, f, eval_sets[f]) for f in range(data.n_facts)], data),
        "steps": config.standard_steps, "optimizer": config.standard_optimizer,
        "eta_y": config.standard_eta_y, "eta_z": config.standard_eta_z, "d_model": config.standard_d_model,
    }


# -- figures -----------------------------------------------------------------------------------------
def plot_heatmap(run: dict[str, Any], path: Path) -> None:
    """Figure 4: the composition over fact 0's support (common | distinct tokens) at every step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    image = torch.stack(run["trajectory"][0]).numpy()
    n_common = len(run["data"].common_tokens)
    fig, ax = plt.subplots(figsize=(5, 5))
    shown = ax.imshow(image, aspect="auto", interpolation="nearest", cmap="viridis")
    if n_common:
        ax.axvline(n_common - 0.5, color="w", linestyle="--", linewidth=1)
    ax.axhline(run["snaps"][0].index, color="r", linestyle=":", linewidth=1, label=f"snap (step {run['snaps'][0].step})")
    peaks = [run["steps"].index(step) for step in run["scan_orders"][0].peak_steps]
    ax.scatter([n_common + i for i in range(len(peaks))], peaks, s=12, color="w", edgecolors="k", linewidths=0.5,
               label="peak of each distinct token", zorder=3)
    ax.set_xlabel("context token (common | distinct, by increasing co-occurrence)")
    ax.set_ylabel("training step")
    ax.set_title("attention of the query of fact 0 over iterations")
    ax.legend(loc="lower right", fontsize=8)
    fig.colorbar(shown, ax=ax, label="attention mass")
    fig.subplots_adjust(left=0.13, right=0.97, bottom=0.1, top=0.93)  # fixed margins: tight_layout draws twice
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_loss(run: dict[str, Any], path: Path) -> None:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    history = run["history"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.semilogy(history.steps, history.values["loss"], label="Y/Z model (training batch)")
    # plain "0.01"-style labels: the default 10^k labels start matplotlib's mathtext parser (~0.3 s)
    ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda y, _: f"{y:g}"))
    ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    ax.axhline(LOSS_TARGET, color="k", linestyle="--", linewidth=0.5, label=f"loss = {LOSS_TARGET}")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.legend()
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.14, top=0.96)
    fig.savefig(path, dpi=120)
    plt.close(fig)




# -- running -----------------------------------------------------------------------------------------
def run(config: ScanSnapConfig, out_dir: Path, *, progress: bool) -> dict[str, Any]:
    """Run the experiment of ``config``; write summary.json and figures into ``out_dir``."""
    if not isinstance(config, ScanSnapConfig):
        raise ToyConfigError(f"run() needs a ScanSnapConfig; got {type(config).__name__}.")
    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)  # these models are tiny: extra threads mostly contend
    try:
        return _run(config, Path(out_dir), progress=progress)
    finally:
        torch.set_num_threads(threads)


def _run(config: ScanSnapConfig, out_dir: Path, *, progress: bool) -> dict[str, Any]:
    from analyses.scansnap.reference import reference_for

    start = time.perf_counter()
    timings: dict[str, float] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    summary: dict[str, Any] = {}
    if config.experiment == "wikitext":
        from analyses.scansnap.wikitext import plot_wikitext, wikitext_run

        result = wikitext_run(config, progress=progress)
        plot_wikitext(result, out_dir / "wikitext.png")
        result.pop("_example_patterns")
        torch.save(result.pop("_snapshots"), out_dir / "wikitext_snapshots.pt")
        summary.update({key: result[key] for key in ("initial_loss", "final_loss", "steps")})
        summary.update({f"{key}_first": result[key][0] for key in ("entropy", "spearman_lift_matched",
                                                                   "distinct_over_common")})
        summary.update({f"{key}_last": result[key][-1] for key in ("entropy", "spearman_count", "spearman_lift",
                                                                   "spearman_lift_matched", "distinct_over_common")})
        summary["spearman_lift_matched_null_q95"] = result["spearman_lift_matched_null"]["q95"]
        summary["scan_order_spearman"] = result["scan_order_spearman"]
        summary["wikitext"] = result
        timings["wikitext"] = time.perf_counter() - start
    else:
        main = main_run(config, progress=progress)
        summary.update(main["summary"])
        save_toy_model(main["model"], out_dir, "scansnap")  # probe it again: mechprobe probe-linear --model OUT
        plot_heatmap(main, out_dir / "attention_heatmap.png")
        plot_loss(main, out_dir / "loss.png")
        summary["snap"] = [s.to_dict() for s in main["snaps"]]
        summary["scan_order"] = [o.to_dict() for o in main["scan_orders"]]
        summary["loss_curve"] = {"steps": main["history"].steps, "loss": main["history"].values["loss"]}
        if config.train_standard:
            summary["standard"] = standard_run(config)
        if config.sweep_num_last:
            from analyses.scansnap.sweep import figure6_trends, plot_sweep, run_sweep

            sweep_start = time.perf_counter()
            summary["sweep"] = run_sweep(config, progress=progress)
            timings["sweep"] = time.perf_counter() - sweep_start
            summary["figure6"] = figure6_trends(summary["sweep"])
            plot_sweep(summary["sweep"], out_dir / "entropy_sweep.png")
    summary["reference"] = reference_for(config).to_dict()
    summary["settings"] = dataclasses.asdict(config)
    timings["total"] = time.perf_counter() - start
    write_timings(out_dir, timings)
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2))
    log.info("scansnap: wrote %s", out_dir / "summary.json")
    return summary
