"""``mechprobe toy scansnap``: Tian et al. 2023, "Scan and Snap", on the co-occurrence task.

Main run: the Y/Z model (Y = Z = 0) trained with SGD (momentum 0.9), ``eta_Y = eta_Z = 1``, fresh
batches of 128 sequences of length 128, 100 steps, 2 facts, 10 common + 10 distinct tokens.
After every step the long-context composition ``c_l ~ P(l | m, n)
exp(Z[m, l])`` over the fact's support is recorded (as the paper's Figure 4 does); this
trajectory gives the attention-over-iterations heatmap and the snap step (``probes.detect_snap``).
At the end, from the key-token attention probe reading ``blocks.0.attn.hook_pattern`` (query row
-1) on a fixed evaluation set per fact (``probe_vs_expected_max_abs`` compares it with ``c``):

- ``distinct_mass`` / ``common_mass``: attention mass of the query on the fact's distinct / the
  common tokens, averaged over facts;
- ``cooccurrence_spearman`` (and ``_kendall``): rank correlation, over the fact's distinct tokens,
  between per-occurrence attention and ``P(l | m, n)``, averaged over facts;
- ``entropy``: entropy (nats) of the composition restricted to the fact's distinct tokens and
  renormalised, averaged over facts (``entropy_all``: over all support tokens);
- ``standard``: the same probes on a standard 1-layer TransformerLens attention model without
  positional encoding trained on the same data.

Sweep (the paper's Figure 6): for each number of last tokens (2 next tokens each), ``eta_Z`` and
ratio ``eta_Y / eta_Z``, ``sweep_seeds`` runs from the default initialisation; the statistic is
the final distinct-token entropy of ``c_l ~ P(l | m, n) exp(Z[m, l])`` (the Y/Z model's
long-context attention), averaged over facts, then mean and std over seeds
(``snap_step_mean``: the snap step of ``c`` over the support, averaged over facts and seeds).
Run time: ``--preset fast`` about 10 s (22 s wall with imports on a loaded 2-core machine);
``--preset sweep`` (480 runs of 100 steps) 195 s for the sweep itself plus about 50 s for the
main run and the standard model, measured on one thread of a loaded 2-core machine.

Real text (off unless ``--set wikitext_steps=N``): :mod:`analyses.scansnap_wikitext` trains a
1-layer attention model without positions on WikiText-2 and records the attention entropy and the
co-occurrence ordering along the way (``summary["wikitext"]``, ``wikitext.png``).
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
from probes.atomic import atomic_write_text
from probes.cooccurrence import cooccurrence_ordering
from probes.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, entropy_nats
from probes.loading import check_device
from probes.runner import model_device, run_probes
from probes.snap import detect_snap
from toymodels.cooccurrence_data import CooccurrenceConfig, CooccurrenceData
from toymodels.errors import ToyConfigError
from toymodels.scansnap_model import YZModelConfig, YZTransformer
from toymodels.scansnap_training import TwoRateConfig, query_logits, train_on_cooccurrence
from toymodels.standard import StandardModelConfig, build_standard_model

log = logging.getLogger(__name__)

LOSS_TARGET = 0.05


@dataclass(frozen=True)
class ScanSnapConfig:
    """Every setting of the experiment; ``mechprobe toy scansnap --set key=value`` overrides fields.

    ``device`` is where the models train and are probed (data is sampled on the CPU).
    """

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
    snap_tolerance: float = 0.01
    snap_patience: int = 10
    train_standard: bool = True
    standard_d_model: int = 64
    standard_optimizer: Literal["sgd", "adam"] = "adam"
    standard_eta_y: float = 0.01
    standard_eta_z: float = 0.01
    standard_steps: int = 200
    sweep_num_last: tuple[int, ...] = ()
    sweep_num_next_per_last: int = 2
    sweep_eta_z: tuple[float, ...] = (0.5, 1.0, 2.0)
    sweep_ratio: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
    sweep_seeds: int = 10
    sweep_init: Literal["zero", "linear"] = "linear"
    threads: int = 1
    wikitext_steps: int = 0
    wikitext_corpus: str = "../shared/data/wikitext-2/wiki.test.tokens"
    wikitext_vocab: int = 2000
    wikitext_seq_len: int = 64
    wikitext_d_model: int = 64
    wikitext_lr: float = 0.003
    wikitext_batch_size: int = 32
    wikitext_probe_every: int = 50
    wikitext_queries: int = 30
    wikitext_query_rank: int = 50
    wikitext_keys: int = 300
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        for name, low in (("eval_sequences", 2), ("snap_patience", 0),
                          ("standard_d_model", 1), ("standard_steps", 0), ("sweep_seeds", 1),
                          ("sweep_num_next_per_last", 1), ("threads", 1), ("wikitext_steps", 0),
                          ("wikitext_vocab", 4), ("wikitext_seq_len", 4), ("wikitext_d_model", 1),
                          ("wikitext_batch_size", 1), ("wikitext_probe_every", 1), ("wikitext_queries", 1),
                          ("wikitext_query_rank", 1), ("wikitext_keys", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ToyConfigError(f"ScanSnapConfig.{name} must be an integer >= {low}; got {value!r}.")
        if not 0 <= self.snap_tolerance < 1:
            raise ToyConfigError(f"snap_tolerance must lie in [0, 1); got {self.snap_tolerance!r}.")
        if self.wikitext_query_rank + self.wikitext_queries > self.wikitext_vocab:
            raise ToyConfigError(
                f"wikitext_query_rank + wikitext_queries ({self.wikitext_query_rank + self.wikitext_queries}) must "
                f"not exceed wikitext_vocab ({self.wikitext_vocab}); lower them or raise the vocabulary."
            )
        if self.wikitext_keys >= self.wikitext_vocab:
            raise ToyConfigError(f"wikitext_keys ({self.wikitext_keys}) must be < wikitext_vocab ({self.wikitext_vocab}).")
        for name in ("standard_eta_y", "standard_eta_z", "wikitext_lr"):
            if not (math.isfinite(getattr(self, name)) and getattr(self, name) > 0):
                raise ToyConfigError(f"ScanSnapConfig.{name} must be a finite number > 0; got {getattr(self, name)!r}.")
        for name in ("sweep_eta_z", "sweep_ratio"):
            values = getattr(self, name)
            if not values or any(not (math.isfinite(v) and v > 0) for v in values):
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
    "sweep": ScanSnapConfig(sweep_num_last=(1, 3, 5, 10)),
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
    snaps = [detect_snap(torch.stack(trajectory[f]), steps, tolerance=config.snap_tolerance,
                         patience=config.snap_patience) for f in range(data.n_facts)]
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
        "initial_loss": losses[0],
        "log_vocab": math.log(data.d_vocab),
        "loss_at_step_10": losses[min(9, len(losses) - 1)],
        "first_step_below_0.05": below[0] if below else None,
        "entropy_expected": float(expected_entropy),
        "entropy_uniform_distinct": float(entropy_nats(torch.gather(data.context_probs, 1, data.distinct_tokens)).mean()),
    }
    return {"summary": summary, "history": history, "trajectory": trajectory, "steps": steps, "data": data,
            "snaps": snaps}


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


# -- sweep (Figure 6) --------------------------------------------------------------------------------
def final_entropies(model: YZTransformer, data: CooccurrenceData) -> tuple[float, float]:
    """(distinct-token entropy, support entropy) of the expected attention, averaged over facts."""
    expected = expected_attention(model, data)
    distinct = entropy_nats(torch.gather(expected, 1, data.distinct_tokens)).mean()
    support = torch.stack([entropy_nats(expected[f, data.support(f)]) for f in range(data.n_facts)]).mean()
    return float(distinct), float(support)


def snap_steps(trajectory: list[torch.Tensor], data: CooccurrenceData, config: ScanSnapConfig) -> list[int]:
    """The snap step of every fact from per-step expected attentions [fact d_vocab] (step 0 first)."""
    stacked = torch.stack(trajectory)  # step fact d_vocab
    return [detect_snap(stacked[:, f, data.support(f)], tolerance=config.snap_tolerance,
                        patience=config.snap_patience).step for f in range(data.n_facts)]


def sweep_cell(config: ScanSnapConfig, num_last: int, eta_z: float, ratio: float) -> dict[str, Any]:
    """Mean and std over ``sweep_seeds`` seeds of the final entropies (and snap step) for one cell."""
    data = CooccurrenceData(CooccurrenceConfig(num_last, config.sweep_num_next_per_last, config.num_common,
                                               config.num_distinct, config.seq_len))
    distinct, support, snaps = [], [], []
    for seed in range(config.sweep_seeds):
        model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=config.seq_len, init=config.sweep_init,
                                            seed=seed), device=config.device)
        trajectory = [expected_attention(model, data)]
        train_config = dataclasses.replace(config.train_config(), eta_y=ratio * eta_z, eta_z=eta_z, seed=seed)
        train_on_cooccurrence(model, data, train_config, callbacks=[
            lambda step, m, h: trajectory.append(expected_attention(m, data))])
        d, s = final_entropies(model, data)
        distinct.append(d)
        support.append(s)
        snaps.append(sum(snap_steps(trajectory, data, config)) / data.n_facts)
    d_t, s_t = torch.tensor(distinct), torch.tensor(support)
    std = (lambda t: float(t.std()) if len(t) > 1 else 0.0)
    return {"num_last": num_last, "num_next": data.config.num_next, "eta_z": eta_z, "ratio": ratio,
            "eta_y": ratio * eta_z, "entropy_mean": float(d_t.mean()), "entropy_std": std(d_t),
            "entropy_all_mean": float(s_t.mean()), "entropy_all_std": std(s_t),
            "snap_step_mean": sum(snaps) / len(snaps), "seeds": config.sweep_seeds}


def run_sweep(config: ScanSnapConfig, *, progress: bool) -> list[dict[str, Any]]:
    from tqdm.auto import tqdm

    cells = [(n, z, r) for n in config.sweep_num_last for z in config.sweep_eta_z for r in config.sweep_ratio]
    return [sweep_cell(config, *cell) for cell in tqdm(cells, desc="sweep", disable=not progress)]


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


def plot_sweep(sweep: list[dict[str, Any]], path: Path) -> None:
    """Figure 6: final distinct-token entropy vs eta_Y / eta_Z, one line per eta_Z, one panel per #last tokens."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({row["num_last"] for row in sweep})
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3), squeeze=False)
    for ax, num_last in zip(axes[0], panels):
        for eta_z in sorted({row["eta_z"] for row in sweep}):
            rows = sorted((r for r in sweep if r["num_last"] == num_last and r["eta_z"] == eta_z),
                          key=lambda r: r["ratio"])
            ax.errorbar([r["ratio"] for r in rows], [r["entropy_mean"] for r in rows],
                        [r["entropy_std"] for r in rows], label=rf"$\eta_Z = {eta_z:g}$", capsize=2)
        ax.set_xscale("log")
        ax.set_xlabel(r"$\eta_Y / \eta_Z$")
        ax.set_title(f"#last/next tokens = {num_last}/{rows[0]['num_next']}")
    axes[0][0].set_ylabel("entropy of distinct-token attention")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


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
    start = time.perf_counter()
    timings: dict[str, float] = {}
    main = main_run(config, progress=progress)
    summary: dict[str, Any] = dict(main["summary"])
    plot_heatmap(main, out_dir / "attention_heatmap.png")
    plot_loss(main, out_dir / "loss.png")
    summary["snap"] = [s.to_dict() for s in main["snaps"]]
    summary["loss_curve"] = {"steps": main["history"].steps, "loss": main["history"].values["loss"]}
    if config.train_standard:
        summary["standard"] = standard_run(config)
    if config.sweep_num_last:
        sweep_start = time.perf_counter()
        summary["sweep"] = run_sweep(config, progress=progress)
        timings["sweep"] = time.perf_counter() - sweep_start
        plot_sweep(summary["sweep"], out_dir / "entropy_sweep.png")
    if config.wikitext_steps:
        from analyses.scansnap_wikitext import plot_wikitext, wikitext_run

        summary["wikitext"] = wikitext_run(config, progress=progress)
        plot_wikitext(summary["wikitext"], out_dir / "wikitext.png")
    summary["settings"] = dataclasses.asdict(config)
    timings["total"] = time.perf_counter() - start
    write_timings(out_dir, timings)
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2))
    log.info("scansnap: wrote %s", out_dir / "summary.json")
    return summary
