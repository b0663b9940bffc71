"""``mechprobe toy induction``: Chen et al. 2024, "Unveiling induction heads", on n-gram Markov chains.

Data: in-context n-gram Markov chains (a fresh Dirichlet(alpha) kernel per sequence; paper:
S = 3, n = 3, L = 100, alpha = 0.1, 9,000 / 1,000 sequences). Models:

- ``model="simplified"`` (presets ``paper``, ``fast``): the paper's simplified model, trained by
  full-batch gradient descent on the last token, staged (c -> w -> a) or jointly. After every
  step the selector's subset weights ``c_S^2 / sum c^2`` and ``a`` are recorded (the parent-share
  trajectory). ``model="full"`` (preset ``full``): the appendix's full model (layer-1 ``W_Q``,
  ``W_K``, ``W_OV`` + relative position bias + normalisation), trained the same way.
- ``model="standard"`` (preset ``standard``): a TransformerLens 2-layer model from
  ``build_standard_model`` (attention-only or with MLPs, standard or rotary positions), Adam on
  batches of fresh chains, next-token loss at every position.

At the end the same probes run on either model over held-out chains: the copier profile
(layer-1 attention mass by relative distance), the generalized induction score of layer 2 with
its uniform-attention chance and its mass on keys matching only the last token, the attention
on keys matching each parent subset, and (simplified model) the selector share from its hook.
``parent_share`` is the selector share for the simplified model; for models without an explicit
selector it is the best layer-2 head's excess attention ``(score - chance) / (1 - chance)`` on
keys matching each parent subset. Losses are last-token NLLs in nats, next to the Bayes-optimal
in-context estimator's. Generalisation: the trained model is evaluated at other L and alpha.
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

from analyses.timings import write_timings
from probes.atomic import atomic_write_text
from probes.batch import as_token_batch
from probes.copier import CopierProbe, CopierProfile
from probes.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores, parent_match_mask
from probes.loading import check_device
from probes.parent_criterion import chi_square_parent_criterion
from probes.model_info import ModelInfo
from probes.runner import capture, model_device, run_probes
from probes.selector import ParentSubsetAttention, ParentSubsetAttentionProbe, SelectorWeightProbe
from toymodels.errors import ToyConfigError
from toymodels.induction_models import (SUBSET_WEIGHTS_HOOK, FullInductionModel, SimplifiedInductionConfig,
                                        SimplifiedInductionModel)
from toymodels.induction_training import (SimplifiedTraining, all_token_loss, last_token_loss, train_on_fresh_chains,
                                          train_simplified)
from toymodels.markov_data import MarkovConfig, bayes_optimal_loss, sample_markov_icl
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import Checkpointer, History

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InductionExperimentConfig:
    """Every setting; ``mechprobe toy induction --set key=value`` overrides fields.

    Simplified model: ``schedule`` joint (``n_steps``) or staged (``steps_c``, ``steps_w``,
    ``steps_a``), SGD rates ``lr_c``, ``lr_w``, ``lr_a``, ``batch_size`` 0 = full batch.
    Standard model: ``n_steps`` Adam steps at ``lr`` on ``batch_size`` fresh chains.
    ``checkpoint_every`` > 0 saves a resumable checkpoint in ``OUT/checkpoint``. ``device`` is where
    the model trains and is probed (data is sampled on the CPU).
    """

    model: Literal["simplified", "full", "standard"] = "simplified"
    n_states: int = 3
    order: int = 3
    seq_len: int = 100
    alpha: float = 0.1
    n_train: int = 9000
    n_val: int = 1000
    n_heads: int = 3
    max_subset: int = 2
    window: int = 8
    w_plus: float = 3.0
    w_minus: float = 0.1
    c_init: float = 1.0
    a_init: float = 1.0
    schedule: Literal["joint", "staged"] = "staged"
    steps_c: int = 50
    steps_w: int = 50
    steps_a: int = 200
    lr_c: float = 100.0
    lr_w: float = 10.0
    lr_a: float = 10.0
    d_model: int = 64
    attn_only: bool = True
    positional: Literal["standard", "rotary"] = "standard"
    lr: float = 3e-3
    n_steps: int = 300
    batch_size: int = 0
    eval_every: int = 100
    probe_sequences: int = 128
    eval_seq_lens: tuple[int, ...] = (50, 200)
    eval_alphas: tuple[float, ...] = (0.05, 1.0)
    early_step: int = 10
    checkpoint_every: int = 0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        MarkovConfig(self.n_states, self.order, self.seq_len, self.alpha)  # validates the data settings
        for name in ("n_train", "n_val", "probe_sequences", "eval_every", "early_step"):
            if getattr(self, name) < 1:
                raise ToyConfigError(f"{name} must be >= 1; got {getattr(self, name)}.")
        if self.checkpoint_every < 0 or self.n_steps < 0 or min(self.steps_c, self.steps_w, self.steps_a) < 0:
            raise ToyConfigError("checkpoint_every, n_steps and steps_c/w/a must be >= 0.")
        if self.model == "standard" and self.batch_size < 0:
            raise ToyConfigError(f"batch_size must be >= 1 for the standard model; got {self.batch_size}.")
        if self.model == "standard" and self.d_model % self.n_heads:
            raise ToyConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}).")
        if self.model != "standard":  # validates the simplified/full model's settings
            SimplifiedInductionConfig(n_states=self.n_states, n_heads=self.n_heads, max_subset=self.max_subset,
                                      window=self.window)
        for length in self.eval_seq_lens:
            MarkovConfig(self.n_states, self.order, length, self.alpha)
        for alpha in self.eval_alphas:
            MarkovConfig(self.n_states, self.order, self.seq_len, alpha)

    @property
    def data(self) -> MarkovConfig:
        return MarkovConfig(self.n_states, self.order, self.seq_len, self.alpha)

    @property
    def true_parents(self) -> list[int]:
        return list(range(1, self.order))


PRESETS: dict[str, InductionExperimentConfig] = {
    "paper": InductionExperimentConfig(),
    "fast": InductionExperimentConfig(n_train=500, n_val=500, steps_c=20, steps_w=20, steps_a=60,
                                      probe_sequences=64, eval_seq_lens=(50, 200), eval_alphas=(0.05, 1.0)),
    "full": InductionExperimentConfig(model="full"),
    "standard": InductionExperimentConfig(model="standard", n_heads=4, n_steps=800, batch_size=32, n_train=2000,
                                          n_val=256, eval_every=100, probe_sequences=128),
}


# -- building and training ----------------------------------------------------------------------
def _simplified(config: InductionExperimentConfig) -> SimplifiedInductionModel:
    model_class = FullInductionModel if config.model == "full" else SimplifiedInductionModel
    return model_class(SimplifiedInductionConfig(
        n_states=config.n_states, n_heads=config.n_heads, max_subset=config.max_subset, window=config.window,
        n_ctx=max((config.seq_len,) + tuple(config.eval_seq_lens)) + 1, w_plus=config.w_plus,
        w_minus=config.w_minus, c_init=config.c_init, a_init=config.a_init, seed=config.seed,
        model_name=f"chen-{config.model}"), device=config.device)


def _standard(config: InductionExperimentConfig):
    return build_standard_model(StandardModelConfig(
        n_layers=2, d_model=config.d_model, n_heads=config.n_heads, d_vocab=config.n_states,
        n_ctx=max((config.seq_len,) + tuple(config.eval_seq_lens)) + 1, attn_only=config.attn_only,
        positional=config.positional, seed=config.seed), device=config.device)


def _checkpointer(config: InductionExperimentConfig, out_dir: Path) -> Checkpointer | None:
    if not config.checkpoint_every:
        return None
    settings = dataclasses.asdict(config)
    for name in ("checkpoint_every", "device"):  # how often and where do not change the run; a resume may change them
        del settings[name]
    fingerprint = json.dumps(settings, sort_keys=True)
    return Checkpointer(out_dir / "checkpoint", every=config.checkpoint_every, fingerprint=fingerprint)


def train_model(config: InductionExperimentConfig, train_tokens: torch.Tensor, val_tokens: torch.Tensor,
                out_dir: Path, *, progress: bool) -> tuple[torch.nn.Module, History]:
    """Build and train the configured model; per-step records go into the history."""
    torch.manual_seed(config.seed)
    generator = torch.Generator().manual_seed(config.seed + 1)
    checkpointer = _checkpointer(config, out_dir)
    if config.model in ("simplified", "full"):
        model = _simplified(config)
        labels = model.subset_labels

        def record(step: int, m: torch.nn.Module, history: History) -> None:
            with torch.no_grad():
                weights = m.subset_weights()
                history.log(step, a=float(m.a.detach()), **{f"share {l}": float(w) for l, w in zip(labels, weights)})
                if step % config.eval_every == 0:
                    history.log(step, val_loss=last_token_loss(m, val_tokens))

        training = SimplifiedTraining(schedule=config.schedule, n_steps=config.n_steps,
                                      stage_steps=(config.steps_c, config.steps_w, config.steps_a),
                                      lr_c=config.lr_c, lr_w=config.lr_w, lr_a=config.lr_a,
                                      batch_size=config.batch_size)
        history = train_simplified(model, train_tokens, training, generator=generator, callbacks=[record],
                                   checkpointer=checkpointer, progress=progress)
        return model, history
    model = _standard(config)
    probe_tokens = val_tokens[: min(64, val_tokens.shape[0]), :-1]

    def evaluate(step: int, m: torch.nn.Module, history: History) -> None:
        if step % config.eval_every:
            return
        (scores,) = run_probes(m, [GeneralizedInductionProbe(config.order)], [probe_tokens], progress=False)
        m.train()
        history.log(step, val_loss=last_token_loss(m, val_tokens), induction_score=float(scores.scores[-1].max()))

    history = train_on_fresh_chains(model, config.data, n_steps=config.n_steps, batch_size=config.batch_size or 32,
                                    lr=config.lr, generator=generator, callbacks=[evaluate],
                                    checkpointer=checkpointer, progress=progress)
    return model, history


# -- probing ------------------------------------------------------------------------------------
def true_head_subset(copier: CopierProfile, parents: list[int]) -> tuple[int, ...]:
    """The layer-1 heads that copy the parents: for each parent distance, the head with most mass there."""
    return tuple(sorted({int(copier.mass[0, :, d].argmax()) for d in parents}))


def probe_model(model: torch.nn.Module, config: InductionExperimentConfig, tokens: torch.Tensor) -> dict[str, Any]:
    """Run the copier, generalized-induction, parent-subset and (simplified) selector probes."""
    batches = list(tokens.split(32))
    max_distance = max(8 if config.model == "standard" else config.window, config.order)
    probes_ = [CopierProbe(max_distance), GeneralizedInductionProbe(config.order),
               ParentSubsetAttentionProbe(1, max_distance=config.order, max_subset=min(config.max_subset, config.order))]
    if isinstance(model, SimplifiedInductionModel):
        probes_.append(SelectorWeightProbe(SUBSET_WEIGHTS_HOOK, labels=model.subset_labels))
    results = run_probes(model, probes_, batches, data=f"{tokens.shape[0]} held-out chains", seed=config.seed,
                         progress=False)
    copier, induction, subsets = results[0], results[1], results[2]
    assert isinstance(copier, CopierProfile) and isinstance(induction, GeneralizedInductionScores)
    assert isinstance(subsets, ParentSubsetAttention)
    layer2 = induction.scores[-1]
    best = int(layer2.argmax())
    out: dict[str, Any] = {
        "copier": copier, "induction": induction, "subsets": subsets, "best_head": best,
        "copier_distance": [int(d) for d in copier.copied_distance[0]],
        "copier_mass": copier.mass[0].tolist(),
        "generalized_induction_score": float(layer2[best]),
        "generalized_induction_chance": induction.chance,
        "last_token_only_mass": float(induction.last_token_only[-1, best]),
        "last_token_only_chance": induction.last_token_only_chance,
        "parent_subset_attention": {label: float(v) for label, v in zip(subsets.labels, subsets.scores[:, best])},
        "parent_subset_chance": {label: float(v) for label, v in zip(subsets.labels, subsets.chance[:, best])},
    }
    if isinstance(model, SimplifiedInductionModel):
        shares = results[3].as_dict()
        heads = true_head_subset(copier, config.true_parents)
        label = "{" + ",".join(map(str, heads)) + "}"
        out.update(parent_share=shares, true_parent_subset=label, true_parent_share=shares.get(label, 0.0))
    else:
        excess = {label: float(v) for label, v in zip(subsets.labels, subsets.excess[:, best])}
        label = "{" + ",".join(map(str, config.true_parents)) + "}"
        out.update(parent_share=excess, true_parent_subset=label, true_parent_share=excess[label])
    return out


def generalisation(model: torch.nn.Module, config: InductionExperimentConfig) -> list[dict[str, float]]:
    """Last-token loss of the trained model vs the optimal estimator at other L and alpha."""
    rows = []
    settings = [(length, config.alpha) for length in config.eval_seq_lens]
    settings += [(config.seq_len, alpha) for alpha in config.eval_alphas]
    for i, (length, alpha) in enumerate(settings):
        data = MarkovConfig(config.n_states, config.order, length, alpha)
        tokens = sample_markov_icl(data, config.n_val, config.seed + 100 + i).tokens
        loss, optimal = last_token_loss(model, tokens), bayes_optimal_loss(tokens, data)
        rows.append({"seq_len": length, "alpha": alpha, "loss": loss, "optimal_loss": optimal, "gap": loss - optimal})
    return rows


# -- figures --------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_parent_share(history: History, path: Path, true_label: str) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    shares = [k for k in history.values if k.startswith("share ")]
    if shares:
        for key in shares:
            label = key.removeprefix("share ")
            ax.plot(history.steps, history.column(key), label=label, lw=2.5 if label == true_label else 1.2)
        ax.set_ylabel("selector weight share")
        ax.set_title(f"parent-subset share (true parents: heads {true_label})")
    else:
        steps = [s for s, v in zip(history.steps, history.column("induction_score")) if not math.isnan(v)]
        values = [v for v in history.column("induction_score") if not math.isnan(v)]
        ax.plot(steps, values, marker="o", label="best layer-2 generalized induction score")
        ax.set_ylabel("score")
        ax.set_title("generalized induction score during training")
    ax.set_xlabel("step")
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_copier_heatmaps(pattern: torch.Tensor, mass: list[list[float]], path: Path, n_show: int = 24) -> None:
    """Layer-1 attention [head q k] of one sequence (first ``n_show`` positions) + mass by distance."""
    plt = _plt()
    n_heads = pattern.shape[0]
    fig, axes = plt.subplots(2, n_heads, figsize=(2.8 * n_heads, 5.4), squeeze=False)
    for h in range(n_heads):
        axes[0, h].imshow(pattern[h, :n_show, :n_show].numpy(), cmap="viridis", vmin=0, vmax=1)
        axes[0, h].set_title(f"layer 1 head {h}")
        axes[0, h].set_xlabel("key position")
        axes[0, h].set_ylabel("query position")
        axes[1, h].bar(range(len(mass[h])), mass[h])
        axes[1, h].set_xlabel("relative distance q - k")
        axes[1, h].set_ylim(0, 1)
    axes[1, 0].set_ylabel("attention mass")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_layer2_example(tokens: torch.Tensor, pattern: torch.Tensor, order: int, path: Path) -> None:
    """Layer-2 attention of the last query over keys; keys whose parents match are marked."""
    plt = _plt()
    match = parent_match_mask(tokens[None], torch.ones_like(tokens[None], dtype=torch.bool), range(1, order))[0, -1]
    fig, ax = plt.subplots(figsize=(8, 3))
    keys = torch.arange(tokens.shape[0])
    ax.bar(keys.numpy(), pattern[-1].numpy(), color=["tab:red" if m else "tab:gray" for m in match.tolist()])
    ax.set_xlabel("key position (red: parents match the query's)")
    ax.set_ylabel("attention")
    ax.set_title("layer-2 attention of the last position")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_loss(history: History, optimal_train: float, optimal_val: float, path: Path) -> None:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(history.steps, history.column("loss"), lw=1, label="training loss")
    val = [(s, v) for s, v in zip(history.steps, history.column("val_loss")) if not math.isnan(v)]
    if val:
        ax.plot(*zip(*val), marker="o", label="validation loss (last token)")
    ax.axhline(optimal_train, color="k", ls="--", lw=1, label="optimal estimator (training objective)")
    ax.axhline(optimal_val, color="tab:red", ls=":", lw=1, label="optimal estimator (validation, last token)")
    ax.set_xlabel("step")
    ax.set_ylabel("NLL (nats)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _nan_to_none(value: Any) -> Any:
    """JSON has no NaN: undefined numbers (e.g. a score without any target) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_none(v) for v in value]
    return value


# -- the experiment -----------------------------------------------------------------------------
def run(config: InductionExperimentConfig, out_dir: Path, *, progress: bool) -> dict[str, Any]:
    """Train, probe, evaluate, plot; write ``out_dir/summary.json`` and return the summary.

    Runs on one CPU thread (these small tensors train several times faster without intra-op
    threading, especially on a shared machine); the thread count is restored afterwards.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run(config, Path(out_dir), progress=progress)
    finally:
        torch.set_num_threads(threads)


def _run(config: InductionExperimentConfig, out_dir: Path, *, progress: bool) -> dict[str, Any]:
    started = time.perf_counter()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    data = config.data
    train_tokens = sample_markov_icl(data, config.n_train, config.seed).tokens
    val_tokens = sample_markov_icl(data, config.n_val, config.seed + 10_000).tokens
    model, history = train_model(config, train_tokens, val_tokens, out_dir, progress=progress)
    trained = time.perf_counter()
    model.eval()
    probe_tokens = val_tokens[: config.probe_sequences, :-1]
    found = probe_model(model, config, probe_tokens)
    criterion = chi_square_parent_criterion(train_tokens[: min(2000, config.n_train)], config.n_states,
                                            max_distance=max(3, config.order), max_subset=config.order - 1)
    val_loss, optimal = last_token_loss(model, val_tokens), bayes_optimal_loss(val_tokens, data)
    if config.model == "standard":
        optimal_train = bayes_optimal_loss(val_tokens, data, positions="all")
    else:
        optimal_train = bayes_optimal_loss(train_tokens, data)
    share_key = f"share {found['true_parent_subset']}"
    trajectory = history.column(share_key) if share_key in history.values else []
    early = trajectory[config.early_step - 1] if len(trajectory) >= config.early_step else None
    summary: dict[str, Any] = {
        "model": config.model,
        "val_loss": val_loss,
        "optimal_loss": optimal,
        "loss_gap": val_loss - optimal,
        "parent_share": found["parent_share"],
        "true_parent_subset": found["true_parent_subset"],
        "true_parent_share": found["true_parent_share"],
        "true_parent_share_early": early,
        "early_step": config.early_step,
        "copier_distance": found["copier_distance"],
        "copier_mass": found["copier_mass"],
        "generalized_induction_score": found["generalized_induction_score"],
        "generalized_induction_chance": found["generalized_induction_chance"],
        "last_token_only_mass": found["last_token_only_mass"],
        "last_token_only_chance": found["last_token_only_chance"],
        "generalized_induction_head": found["best_head"],
        "parent_subset_attention": found["parent_subset_attention"],
        "parent_subset_chance": found["parent_subset_chance"],
        "parent_criterion": criterion.as_dict(),
        "parent_criterion_selected": criterion.labels[criterion.subsets.index(criterion.selected)],
        "generalisation": generalisation(model, config),
        "final_a": float(model.a.detach()) if isinstance(model, SimplifiedInductionModel) else None,
        "final_train_loss": history.column("loss")[-1] if history.steps else None,
        "steps": history.steps[-1] if history.steps else 0,
        "settings": dataclasses.asdict(config),
    }
    if config.model == "standard":
        onset = [s for s, v in zip(history.steps, history.column("induction_score")) if v >= 0.8]
        summary["induction_onset_step"] = onset[0] if onset else None  # first eval with score >= 0.8
        summary["val_loss_all_positions"] = all_token_loss(model, val_tokens[:128])
        summary["optimal_loss_all_positions"] = bayes_optimal_loss(val_tokens, data, positions="all")
    example = probe_tokens[:1]
    with torch.no_grad():
        acts = capture(model, as_token_batch(example, ModelInfo.of(model)).to(model_device(model)),
                       ["blocks.0.attn.hook_pattern", "blocks.1.attn.hook_pattern"])
    acts = {name: pattern.cpu() for name, pattern in acts.items()}
    plot_parent_share(history, out_dir / "parent_share.png", found["true_parent_subset"])
    plot_copier_heatmaps(acts["blocks.0.attn.hook_pattern"][0].float(), found["copier_mass"], out_dir / "copier_heatmaps.png")
    plot_layer2_example(example[0], acts["blocks.1.attn.hook_pattern"][0, found["best_head"]].float(), config.order,
                        out_dir / "layer2_attention_example.png")
    plot_loss(history, optimal_train, optimal, out_dir / "loss_vs_optimal.png")
    history.save(out_dir / "history.json")
    write_timings(out_dir, {"train": trained - started, "total": time.perf_counter() - started})
    summary = _nan_to_none(summary)
    atomic_write_text(out_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False))
    log.info("induction toy: val %.4f vs optimal %.4f", val_loss, optimal)
    return summary
