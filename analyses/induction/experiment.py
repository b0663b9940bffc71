"""``mechprobe toy induction``: Chen et al. 2024, "Unveiling induction heads", on n-gram Markov chains.

Data: in-context n-gram Markov chains (a fresh Dirichlet(alpha) kernel per sequence; paper:
S = 3, n = 3, L = 100, alpha = 0.1, 9,000 / 1,000 sequences). Models:

- ``model="simplified"``: the paper's simplified model, trained by full-batch gradient descent on
  the last token. Preset ``paper``: the main-text run of the reference code (joint SGD, lr 1,
  ``c = a = 0.01``, per-head windows, the reference's candidate subsets and loss; 1,000 steps,
  ``--set n_steps=50000`` for the whole run). Preset ``staged``: c -> w -> a in stages; ``fast``:
  a small staged run for the report. ``model="full"`` (preset ``full``): the appendix's full model
  (layer-1 ``W_Q``, ``W_K``, ``W_OV`` + relative position bias + normalisation), joint SGD.
  ``summary["trajectory"]`` holds the true-parent share, ``a`` and the losses at every step up to
  100 and log-spaced steps after (:mod:`analyses.induction.trajectory`), and
  ``summary["reference"]`` the paper, experiment and deviations (:mod:`analyses.induction.reference`).
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
The parent criterion is reported twice: the paper's population value (modified chi-square mutual
information from the sampled kernels' stationary distributions) and the plug-in estimate from tokens.
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
from analyses.induction.figures import plot_copier_heatmaps, plot_layer2_example, plot_loss, plot_parent_share
from analyses.induction.reference import induction_reference
from analyses.induction.trajectory import TRAJECTORY_KEYS, log_growth_fit, plot_trajectory, trajectory_steps
from analyses.toy_model_store import save_toy_model
from probes.core.atomic import atomic_write_text
from probes.core.batch import as_token_batch
from probes.attention.copier import CopierProbe, CopierProfile
from probes.attention.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores
from probes.core.loading import check_device
from probes.text.parent_criterion import chi_square_parent_criterion, population_parent_criterion
from probes.core.model_info import ModelInfo
from probes.core.runner import capture, model_device, run_probes
from probes.attention.selector import ParentSubsetAttention, ParentSubsetAttentionProbe, SelectorWeightProbe
from toymodels.errors import ToyConfigError
from toymodels.induction.model import (SUBSET_WEIGHTS_HOOK, FullInductionModel, SimplifiedInductionConfig,
                                        SimplifiedInductionModel)
from toymodels.induction.training import (LOSSES, SimplifiedTraining, all_token_loss, last_token_loss,
                                          loss_from_probs, train_on_fresh_chains, train_simplified)
from toymodels.induction.data import MarkovConfig, bayes_optimal_loss, sample_markov_icl
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import Checkpointer, History

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InductionExperimentConfig:
    """Every setting; ``mechprobe toy induction --set key=value`` overrides fields.

    Simplified / full model: ``schedule`` joint (``n_steps``) or staged (``steps_c``, ``steps_w``,
    ``steps_a``), SGD rates ``lr_c``, ``lr_w``, ``lr_a``, ``batch_size`` 0 = full batch, ``loss``
    ``"nll"`` or the reference code's ``"probs_as_logits"``; layer-1 ``window`` per head and
    ``head_windows`` (``"shared"`` 1 .. window, ``"shifted"`` h+1 .. h+window), ``empty_subset`` and
    ``token_subsets`` (the reference's extra candidate subsets), ``qk_init`` (full model's W_Q, W_K
    scale). ``trajectory_dense_until`` / ``trajectory_per_decade`` choose the recorded steps.
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
    head_windows: Literal["shared", "shifted"] = "shared"
    empty_subset: bool = False
    token_subsets: bool = False
    c_init: float = 1.0
    a_init: float = 1.0
    qk_init: float = 0.1
    loss: Literal["nll", "probs_as_logits"] = "nll"
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
    trajectory_dense_until: int = 100
    trajectory_per_decade: int = 20
    checkpoint_every: int = 0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        MarkovConfig(self.n_states, self.order, self.seq_len, self.alpha)  # validates the data settings
        for name in ("n_train", "n_val", "probe_sequences", "eval_every", "early_step", "trajectory_dense_until",
                     "trajectory_per_decade"):
            if getattr(self, name) < 1:
                raise ToyConfigError(f"{name} must be >= 1; got {getattr(self, name)}.")
        if self.checkpoint_every < 0 or self.n_steps < 0 or min(self.steps_c, self.steps_w, self.steps_a) < 0:
            raise ToyConfigError("checkpoint_every, n_steps and steps_c/w/a must be >= 0.")
        if self.model == "standard" and self.batch_size < 0:
            raise ToyConfigError(f"batch_size must be >= 1 for the standard model; got {self.batch_size}.")
        if self.model == "standard" and self.d_model % self.n_heads:
            raise ToyConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}).")
        if self.model not in ("simplified", "full", "standard"):
            raise ToyConfigError(f"model must be 'simplified', 'full' or 'standard'; got {self.model!r}.")
        if self.loss not in LOSSES:
            raise ToyConfigError(f"loss must be one of {', '.join(LOSSES)}; got {self.loss!r}.")
        if self.model != "standard":  # validates the simplified/full model's settings
            self.model_config()
            SimplifiedTraining(schedule=self.schedule, n_steps=self.n_steps, lr_c=self.lr_c, lr_w=self.lr_w,
                               lr_a=self.lr_a, batch_size=self.batch_size, loss=self.loss)
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

    def model_config(self) -> SimplifiedInductionConfig:
        """The simplified / full model's settings."""
        return SimplifiedInductionConfig(
            n_states=self.n_states, n_heads=self.n_heads, max_subset=self.max_subset, window=self.window,
            n_ctx=max((self.seq_len,) + tuple(self.eval_seq_lens)) + 1, w_plus=self.w_plus, w_minus=self.w_minus,
            c_init=self.c_init, a_init=self.a_init, head_windows=self.head_windows, empty_subset=self.empty_subset,
            token_subsets=self.token_subsets, qk_init=self.qk_init, seed=self.seed, model_name=f"chen-{self.model}")

    @property
    def true_heads(self) -> tuple[int, ...]:
        """The layer-1 heads initialised on a parent distance (head h starts peaked at distance h + 1)."""
        return tuple(d - 1 for d in self.true_parents if d - 1 < self.n_heads)


_STAGED = dict(model="simplified", schedule="staged", n_states=3, order=3, seq_len=100, alpha=0.1, n_heads=3,
               max_subset=2, window=8, head_windows="shared", empty_subset=False, token_subsets=False, w_plus=3.0,
               w_minus=0.1, c_init=1.0, a_init=1.0, lr_c=100.0, lr_w=10.0, lr_a=10.0, loss="nll", batch_size=0)
_PAPER = dict(model="simplified", schedule="joint", n_states=3, order=3, seq_len=100, alpha=0.1, n_train=9000,
              n_val=1000, n_heads=3, max_subset=2, window=3, head_windows="shifted", empty_subset=True,
              token_subsets=True, w_plus=3.0, w_minus=0.1, c_init=0.01, a_init=0.01, lr_c=1.0, lr_w=1.0, lr_a=1.0,
              loss="probs_as_logits", batch_size=0, n_steps=1000, eval_every=100)

PRESETS: dict[str, InductionExperimentConfig] = {
    # the reference code's main-text run (joint SGD); `--set n_steps=50000` for its full length
    "paper": InductionExperimentConfig(**_PAPER),
    # the staged c -> w -> a schedule (formerly `paper`)
    "staged": InductionExperimentConfig(**_STAGED, n_train=9000, n_val=1000, steps_c=50, steps_w=50, steps_a=200),
    # appendix B: the full model, joint SGD at the reference's lr 0.01 for 10,000 steps
    "full": InductionExperimentConfig(**{**_PAPER, "model": "full", "w_minus": 0.01, "lr_c": 0.01, "lr_w": 0.01,
                                         "lr_a": 0.01, "qk_init": 0.01, "n_steps": 10_000, "eval_every": 1000}),
    # small and quick (the report trains it): staged, 500 chains, a sparser trajectory
    "fast": InductionExperimentConfig(**_STAGED, n_train=500, n_val=500, steps_c=20, steps_w=20, steps_a=60,
                                      probe_sequences=64, eval_seq_lens=(50, 200), eval_alphas=(0.05, 1.0),
                                      trajectory_dense_until=20, trajectory_per_decade=10),
    "standard": InductionExperimentConfig(model="standard", n_heads=4, n_steps=800, batch_size=32, n_train=2000,
                                          n_val=256, eval_every=100, probe_sequences=128),
}
PRESET_REFERENCES = {name: induction_reference(config) for name, config in PRESETS.items()}
"""What each preset reproduces of the paper and where it differs (``summary.json["reference"]``)."""


# -- building and training ----------------------------------------------------------------------
def _simplified(config: InductionExperimentConfig) -> SimplifiedInductionModel:
    model_class = FullInductionModel if config.model == "full" else SimplifiedInductionModel
    return model_class(config.model_config(), device=config.device)


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
        training = SimplifiedTraining(schedule=config.schedule, n_steps=config.n_steps,
                                      stage_steps=(config.steps_c, config.steps_w, config.steps_a),
                                      lr_c=config.lr_c, lr_w=config.lr_w, lr_a=config.lr_a,
                                      batch_size=config.batch_size, loss=config.loss)
        recorded = set(trajectory_steps(training.total_steps, dense_until=config.trajectory_dense_until,
                                        per_decade=config.trajectory_per_decade))
        point = _trajectory_recorder(model, config, train_tokens, val_tokens)

        def record(step: int, m: torch.nn.Module, history: History) -> None:
            if step in recorded:
                history.log(step, **point())
            if step % config.eval_every == 0:
                history.log(step, val_loss=last_token_loss(m, val_tokens))

        initial = History()
        initial.log(0, **point())
        history = train_simplified(model, train_tokens, training, generator=generator, callbacks=[record],
                                   checkpointer=checkpointer, progress=progress)
        merged = History()
        for source in (initial, history):
            columns = {key: source.column(key) for key in source.values}
            for i, step in enumerate(source.steps):
                merged.log(step, **{key: column[i] for key, column in columns.items() if not math.isnan(column[i])})
        return model, merged
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


def _trajectory_recorder(model: SimplifiedInductionModel, config: InductionExperimentConfig,
                         train_tokens: torch.Tensor, val_tokens: torch.Tensor):
    """A function returning the trajectory values of ``model`` now (``traj ...`` keys) and every subset share."""
    device = model_device(model)
    train_tokens, val_tokens = train_tokens.to(device), val_tokens.to(device)
    train_windows, val_windows = model.window_batch(train_tokens[:, :-1]), model.window_batch(val_tokens[:, :-1])
    true_index = model.subsets.index(config.true_heads) if config.true_heads in model.subsets else None

    def point() -> dict[str, float]:
        with torch.no_grad():
            shares = model.subset_weights()
            values = {f"share {label}": float(w) for label, w in zip(model.subset_labels, shares)}
            values["traj true_parent_share"] = float(shares[true_index]) if true_index is not None else 0.0
            values["traj a"] = float(model.a)
            for split, tokens, windows in (("train", train_tokens, train_windows), ("val", val_tokens, val_windows)):
                p, target = model.final_probs(windows), tokens[:, -1]
                values[f"traj {split}_loss"] = float(loss_from_probs(p, target, config.loss, eps=model.cfg.eps))
                values[f"traj {split}_nll"] = float(loss_from_probs(p, target, "nll", eps=model.cfg.eps))
        return values

    return point


def trajectory_of(history: History) -> dict[str, list[Any]]:
    """``{"step": [...], "true_parent_share": [...], "a": [...], "train_loss": [...], ...}`` from the history."""
    key = "traj true_parent_share"
    if key not in history.values:
        return {}
    rows = [(s, i) for i, (s, v) in enumerate(zip(history.steps, history.column(key))) if not math.isnan(v)]
    out: dict[str, list[Any]] = {"step": [s for s, _ in rows]}
    for name in TRAJECTORY_KEYS:
        column = history.column(f"traj {name}")
        out[name] = [column[i] for _, i in rows]
    return out


# -- probing ------------------------------------------------------------------------------------
def true_head_subset(copier: CopierProfile, parents: list[int]) -> tuple[int, ...]:
    """The layer-1 heads that copy the parents: for each parent distance, the head with most mass there."""
    return tuple(sorted({int(copier.mass[0, :, d].argmax()) for d in parents}))


def probe_model(model: torch.nn.Module, config: InductionExperimentConfig, tokens: torch.Tensor) -> dict[str, Any]:
    """Run the copier, generalized-induction, parent-subset and (simplified) selector probes."""
    batches = list(tokens.split(32))
    max_distance = max(8 if config.model == "standard" else config.model_config().max_distance, config.order)
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
    train_batch = sample_markov_icl(data, config.n_train, config.seed)
    train_tokens = train_batch.tokens
    val_tokens = sample_markov_icl(data, config.n_val, config.seed + 10_000).tokens
    model, history = train_model(config, train_tokens, val_tokens, out_dir, progress=progress)
    trained = time.perf_counter()
    save_toy_model(model, out_dir, "induction")  # loadable again: mechprobe probe-linear --model OUT
    model.eval()
    probe_tokens = val_tokens[: config.probe_sequences, :-1]
    found = probe_model(model, config, probe_tokens)
    criterion = chi_square_parent_criterion(train_tokens[: min(2000, config.n_train)], config.n_states,
                                            max_distance=max(3, config.order), max_subset=config.order - 1)
    population = population_parent_criterion(train_batch.kernels[: min(2000, config.n_train)], config.n_states,
                                             config.order - 1, max_distance=max(3, config.order),
                                             max_subset=config.order - 1)
    val_loss, optimal = last_token_loss(model, val_tokens), bayes_optimal_loss(val_tokens, data)
    if config.model == "standard":
        optimal_train = bayes_optimal_loss(val_tokens, data, positions="all")
    else:
        optimal_train = bayes_optimal_loss(train_tokens, data)
    trajectory = trajectory_of(history)
    early = None
    if trajectory and config.early_step in trajectory["step"]:
        early = trajectory["true_parent_share"][trajectory["step"].index(config.early_step)]
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
        "parent_criterion_population": population.as_dict(),
        "parent_criterion_population_selected": population.labels[population.subsets.index(population.selected)],
        "parent_criterion_population_chains": population.n_chains,
        "generalisation": generalisation(model, config),
        "final_a": float(model.a.detach()) if isinstance(model, SimplifiedInductionModel) else None,
        "final_train_loss": history.column("loss")[-1] if history.steps else None,
        "steps": history.steps[-1] if history.steps else 0,
        "settings": dataclasses.asdict(config),
        "trajectory": trajectory or None,
        "reference": induction_reference(config).to_dict(),
    }
    if trajectory:
        summary["objective"] = config.loss
        summary["train_loss_objective"] = trajectory["train_loss"][-1]
        summary["val_loss_objective"] = trajectory["val_loss"][-1]
        # the paper: a grows ~ log(step) once the parents are selected (joint training; staged trains a last)
        summary["a_log_growth"] = log_growth_fit(trajectory["step"], trajectory["a"],
                                                 from_step=config.trajectory_dense_until) \
            if config.schedule == "joint" else None
        summary["first_step_share_above_half"] = next(
            (s for s, v in zip(trajectory["step"], trajectory["true_parent_share"]) if v > 0.5), None)
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
    if trajectory:
        plot_trajectory(trajectory, out_dir / "trajectory.png", true_label=found["true_parent_subset"],
                        objective=config.loss)
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
