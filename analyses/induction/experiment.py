"""The run of ``mechprobe toy induction`` (train, probe, evaluate, plot): Chen et al. 2024, "Unveiling induction heads".

Data: in-context n-gram Markov chains (a fresh Dirichlet(alpha) kernel per sequence; paper:
S = 3, n = 3, L = 100, alpha = 0.1, 9,000 / 1,000 sequences). Models:

- ``model="simplified"``: the paper's simplified model, trained by full-batch gradient descent on
  the last token. Preset ``paper``: the main-text run of the reference code (joint SGD, lr 1,
  ``c = a = 0.01``, per-head windows, the reference's candidate subsets and loss; 1,000 steps,
  ``--set train.n_steps=50000`` for the whole run). Preset ``staged``: c -> w -> a in stages; ``fast``:
  a small staged run for the report. ``model="full"`` (preset ``full``): the appendix's full model
  (layer-1 ``W_Q``, ``W_K``, ``W_OV`` + relative position bias + normalisation), joint SGD.
  ``result.trajectory`` holds the true-parent share, ``a`` and the losses at every step up to
  100 and log-spaced steps after (:mod:`analyses.induction.trajectory`), and
  ``result.reference`` the paper, experiment and deviations (:mod:`analyses.induction.reference`).
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
``result.findings``: the toy's findings in the pretrained schema (induction scores on X X and on
chains, the previous-token score, the paper's generalized induction score), the trained model beside
itself at initialisation (:mod:`analyses.induction.findings`; ``seed_findings`` measures more seeds).
Settings: :mod:`analyses.induction.config`; the result: :class:`~analyses.induction.result.InductionResult`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from analyses.induction.config import PRESETS, InductionExperimentConfig
from analyses.induction.figures import write_figures
from analyses.induction.findings import (
    FINDINGS,
    build_model,
    check_findings_data,
    held_out_chains,
    judge_trained,
    seed_findings,
)
from analyses.induction.reference import PRESET_REFERENCES, induction_reference
from analyses.induction.result import GeneralisationRow, InductionResult, Trajectory
from analyses.induction.trajectory import TRAJECTORY_KEYS, log_growth_fit, trajectory_steps
from analyses.series_writer import (
    INDUCTION_TOY_MEASURE,
    STATES_FOLDER,
    checkpoint_steps,
    saved_steps,
    write_manifest,
)
from analyses.timings import write_timings
from analyses.torch_threads import torch_threads
from analyses.toy_findings import aggregate_seeds
from analyses.toy_model_store import save_standard_model, save_toy_model
from mechprobe import records
from mechprobe.errors import RecordError
from mechprobe.forward import model_device
from probes.attention.copier import CopierProbe, CopierProfile
from probes.attention.generalized_induction import GeneralizedInductionProbe, GeneralizedInductionScores
from probes.attention.selector import ParentSubsetAttention, ParentSubsetAttentionProbe, SelectorWeightProbe
from probes.core.checkpoint_series import MANIFEST
from probes.core.model_kind import as_hooked_model
from probes.core.probe import Probe
from probes.core.runner import feed_probes, run_probes
from probes.text.parent_criterion import chi_square_parent_criterion, population_parent_criterion
from toymodels.errors import ToyConfigError
from toymodels.induction.data import bayes_optimal_loss, sample_markov_icl
from toymodels.induction.simplified import SUBSET_WEIGHTS_HOOK, SimplifiedInductionModel
from toymodels.induction.training import (
    all_token_loss,
    last_token_loss,
    loss_from_probs,
    train_on_fresh_chains,
    train_simplified,
)
from toymodels.step_states import StepStates
from toymodels.training import Checkpointer, History

__all__ = ["FINDINGS", "PRESETS", "PRESET_REFERENCES", "InductionExperimentConfig", "InductionResult",
           "induction_reference", "result_from_summary", "run", "seed_findings"]

log = logging.getLogger(__name__)

SERIES_FOLDER = "series"

result_from_summary = InductionResult.from_document  # the report's way back from summary.json


# -- building and training ----------------------------------------------------------------------
def run_fingerprint(config: InductionExperimentConfig) -> str:
    """The settings that make a training run what it is (how often it is checkpointed and where it runs do not):
    a saved state with another fingerprint is refused on resuming."""
    settings = dataclasses.asdict(config)
    for name in ("checkpoint_every", "device"):  # how often and where do not change the run; a resume may change them
        del settings[name]
    return json.dumps(settings, sort_keys=True)


def _checkpointer(config: InductionExperimentConfig, out_dir: Path) -> Checkpointer | None:
    if not config.checkpoint_every:
        return None
    return Checkpointer(out_dir / "checkpoint", every=config.checkpoint_every, fingerprint=run_fingerprint(config))


def train_model(config: InductionExperimentConfig, train_tokens: torch.Tensor, val_tokens: torch.Tensor,
                out_dir: Path, *, progress: bool) -> tuple[torch.nn.Module, History]:
    """Build and train the configured model; per-step records go into the history."""
    checkpointer = _checkpointer(config, out_dir)
    model = build_model(config)
    if isinstance(model, SimplifiedInductionModel):
        training = config.training()
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
        history = train_simplified(model, train_tokens, training, callbacks=[record], checkpointer=checkpointer,
                                   progress=progress)
        merged = History()
        for source in (initial, history):
            columns = {key: source.column(key) for key in source.values}
            for i, step in enumerate(source.steps):
                merged.log(step, **{key: column[i] for key, column in columns.items() if not math.isnan(column[i])})
        return model, merged
    probe_tokens = val_tokens[: min(64, val_tokens.shape[0]), :-1]

    def evaluate(step: int, m: torch.nn.Module, history: History) -> None:
        if step % config.eval_every:
            return
        (scores,) = run_probes(as_hooked_model(m), [GeneralizedInductionProbe(config.data.order)], [probe_tokens],
                               progress=False)
        m.train()
        history.log(step, val_loss=last_token_loss(m, val_tokens), induction_score=float(scores.scores[-1].max()))

    callbacks: list[Callable[[int, torch.nn.Module, History], None]] = [evaluate]
    states: list[StepStates] = []
    if config.series_checkpoints:
        callbacks.append(_series_saver(model, config, out_dir / SERIES_FOLDER))
        states.append(StepStates(out_dir / SERIES_FOLDER / STATES_FOLDER, fingerprint=run_fingerprint(config),
                                 steps=checkpoint_steps(config.standard_train.n_steps, config.series_checkpoints)))
    history = train_on_fresh_chains(model, config.data, config.standard_training(), callbacks=callbacks,
                                    checkpointer=checkpointer, progress=progress, state_callbacks=states)
    return model, history


def _series_saver(model: torch.nn.Module, config: InductionExperimentConfig, out: Path
                  ) -> Callable[[int, torch.nn.Module, History], None]:
    """Save ``model`` now (step 0, unless a resumed run saved it) and return the callback that saves it at the
    log-spaced steps of ``config.series_checkpoints`` (:mod:`analyses.series_writer`)."""
    wanted = set(checkpoint_steps(config.standard_train.n_steps, config.series_checkpoints))
    standard = config.standard_model_config()
    fix = f"Delete {out.parent} (the unfinished run) to train the toy again."
    saved = saved_steps(out, fix=fix)
    if saved:
        _check_series_settings(out, config, fix=fix)
    extra = {"measure": INDUCTION_TOY_MEASURE, "settings": dataclasses.asdict(config)}
    tokens_per_step = config.standard_train.batch_size * config.data.seq_len

    def save(step: int) -> None:
        save_standard_model(model, standard, out / f"step_{step}", "induction")
        saved.add(step)
        write_manifest(out, saved, tokens_per_step=tokens_per_step, extra=extra)

    if 0 not in saved:
        save(0)

    def on_step(step: int, m: torch.nn.Module, history: History) -> None:
        if step in wanted:
            save(step)

    return on_step


def _check_series_settings(out: Path, config: InductionExperimentConfig, *, fix: str) -> None:
    """The unfinished run's series in ``out`` was saved with ``config``'s settings (:func:`run_fingerprint`): a run
    with others would add its steps to the first run's (3000 steps' 0, 10, 42, 173 beside 300 steps' 23, 55, ...)."""
    kept = records.read_json(out / MANIFEST, rerun=fix).get("settings")
    if not isinstance(kept, dict):
        raise RecordError(f"{out / MANIFEST} holds no settings (an object), as this command writes them: it is "
                          f"damaged. {fix}")
    here = json.loads(run_fingerprint(config))
    there = {key: value for key, value in kept.items() if key in here}
    if there == here:
        return
    flat_there, flat_here = _flat(there), _flat(here)
    key = next(k for k in sorted({*flat_there, *flat_here}) if flat_there.get(k) != flat_here.get(k))
    raise ToyConfigError(f"{out.parent} holds an unfinished run with other settings ({key} {flat_there.get(key)} "
                         f"there, {flat_here.get(key)} here), whose series this run would mix with its own; run "
                         f"the command with its settings to resume it, or give another --out (or delete "
                         f"{out.parent}) to train with these.")


def _flat(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"standard_train.n_steps": 300, ...}`` from nested settings."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        flat.update(_flat(value, f"{prefix}{key}.") if isinstance(value, Mapping) else {f"{prefix}{key}": value})
    return flat


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
                values[f"traj {split}_loss"] = float(loss_from_probs(p, target, config.train.loss, eps=model.cfg.eps))
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


@dataclass(frozen=True)
class InductionProbes:
    """What :func:`probe_model` measured: the copier, generalized-induction and parent-subset results, the best
    layer-2 head (``best_head``) and the numbers :class:`InductionResult` keeps (see its docstring)."""

    copier: CopierProfile
    induction: GeneralizedInductionScores
    subsets: ParentSubsetAttention
    best_head: int
    copier_distance: tuple[int, ...]
    copier_mass: tuple[tuple[float, ...], ...]
    generalized_induction_score: float
    generalized_induction_chance: float
    last_token_only_mass: float
    last_token_only_chance: float
    parent_subset_attention: Mapping[str, float]
    parent_subset_chance: Mapping[str, float]
    parent_share: Mapping[str, float]
    true_parent_subset: str
    true_parent_share: float


def probe_model(model: torch.nn.Module, config: InductionExperimentConfig, tokens: torch.Tensor) -> InductionProbes:
    """Run the copier, generalized-induction, parent-subset and (simplified) selector probes."""
    batches = list(tokens.split(32))
    order = config.data.order
    max_distance = max(8 if config.model == "standard" else config.model_config().max_distance, order)
    copier_probe, induction_probe = CopierProbe(max_distance), GeneralizedInductionProbe(order)
    subsets_probe = ParentSubsetAttentionProbe(1, max_distance=order, max_subset=order - 1)  # up to the true set
    selector_probe = (SelectorWeightProbe(SUBSET_WEIGHTS_HOOK, labels=model.subset_labels)
                      if isinstance(model, SimplifiedInductionModel) else None)
    probes_: list[Probe[Any]] = [copier_probe, induction_probe, subsets_probe]
    if selector_probe is not None:
        probes_.append(selector_probe)
    feed_probes(as_hooked_model(model), probes_, batches, data=f"{tokens.shape[0]} held-out chains", seed=config.seed,
                progress=False)
    copier, induction, subsets = copier_probe.compute(), induction_probe.compute(), subsets_probe.compute()
    layer2 = induction.scores[-1]
    best = int(layer2.argmax())
    if selector_probe is not None:  # the simplified model's selector
        share = selector_probe.compute().as_dict()
        label = "{" + ",".join(map(str, true_head_subset(copier, config.true_parents))) + "}"
        true_share = share.get(label, 0.0)
    else:
        share = {label: float(v) for label, v in zip(subsets.labels, subsets.excess[:, best])}
        label = "{" + ",".join(map(str, config.true_parents)) + "}"
        true_share = share[label]
    return InductionProbes(
        copier, induction, subsets, best, tuple(int(d) for d in copier.copied_distance[0]),
        tuple(tuple(row) for row in copier.mass[0].tolist()), float(layer2[best]), induction.chance,
        float(induction.last_token_only[-1, best]), induction.last_token_only_chance,
        {label: float(v) for label, v in zip(subsets.labels, subsets.scores[:, best])},
        {label: float(v) for label, v in zip(subsets.labels, subsets.chance[:, best])}, share, label, true_share)


def generalisation(model: torch.nn.Module, config: InductionExperimentConfig) -> tuple[GeneralisationRow, ...]:
    """Last-token loss of the trained model vs the optimal estimator at other L and alpha."""
    rows = []
    settings = [(length, config.data.alpha) for length in config.eval_seq_lens]
    settings += [(config.data.seq_len, alpha) for alpha in config.eval_alphas]
    for i, (length, alpha) in enumerate(settings):
        data = dataclasses.replace(config.data, seq_len=length, alpha=alpha)
        tokens = sample_markov_icl(data, config.n_val, config.seed + 100 + i).tokens
        loss, optimal = last_token_loss(model, tokens), bayes_optimal_loss(tokens, data)
        rows.append(GeneralisationRow(seq_len=length, alpha=alpha, loss=loss, optimal_loss=optimal, gap=loss - optimal))
    return tuple(rows)


# -- the experiment -----------------------------------------------------------------------------
def run(config: InductionExperimentConfig, out_dir: str | Path, *, progress: bool = True) -> InductionResult:
    """Train, probe, evaluate, plot; write ``out_dir/summary.json`` (``result.save``) and return the result.

    Runs on one CPU thread (these small tensors train several times faster without intra-op
    threading, especially on a shared machine); the thread count is restored afterwards.
    Example: ``result = run(PRESETS["fast"], "runs/induction")``; ``result.true_parent_share``.
    """
    with torch_threads(1):
        return _run(config, Path(out_dir), progress=progress)


def _run(config: InductionExperimentConfig, out_dir: Path, *, progress: bool) -> InductionResult:
    started = time.perf_counter()
    check_findings_data(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    data, n_states, order = config.data, config.data.n_states, config.data.order
    train_batch = sample_markov_icl(data, config.n_train, config.seed)
    train_tokens = train_batch.tokens
    val_tokens = held_out_chains(config)
    model, history = train_model(config, train_tokens, val_tokens, out_dir, progress=progress)
    trained = time.perf_counter()
    save_toy_model(model, out_dir, "induction")  # loadable again: mechprobe probe-linear --model OUT
    model.eval()
    probe_tokens = val_tokens[: config.probe_sequences, :-1]
    found = probe_model(model, config, probe_tokens)
    findings = aggregate_seeds("induction", [judge_trained(model, build_model(config), config, probe_tokens)])
    criterion = chi_square_parent_criterion(train_tokens[: min(2000, config.n_train)], n_states,
                                            max_distance=max(3, order), max_subset=order - 1)
    population = population_parent_criterion(train_batch.kernels[: min(2000, config.n_train)], n_states, order - 1,
                                             max_distance=max(3, order), max_subset=order - 1)
    val_loss, optimal = last_token_loss(model, val_tokens), bayes_optimal_loss(val_tokens, data)
    if config.model == "standard":
        optimal_train = bayes_optimal_loss(val_tokens, data, positions="all")
    else:
        optimal_train = bayes_optimal_loss(train_tokens, data)
    trajectory = trajectory_of(history)
    early = None
    if trajectory and config.early_step in trajectory["step"]:
        early = trajectory["true_parent_share"][trajectory["step"].index(config.early_step)]
    extra: dict[str, Any] = {}
    if trajectory:
        # the paper: a grows ~ log(step) once the parents are selected (joint training; staged trains a last)
        growth = log_growth_fit(trajectory["step"], trajectory["a"], from_step=config.trajectory_dense_until) \
            if config.train.schedule == "joint" else None
        extra.update(objective=config.train.loss, train_loss_objective=trajectory["train_loss"][-1],
                     val_loss_objective=trajectory["val_loss"][-1], a_log_growth=growth,
                     first_step_share_above_half=next(
                         (s for s, v in zip(trajectory["step"], trajectory["true_parent_share"]) if v > 0.5), None))
    if config.model == "standard":
        onset = [s for s, v in zip(history.steps, history.column("induction_score")) if v >= 0.8]
        extra.update(induction_onset_step=onset[0] if onset else None,  # first eval with score >= 0.8
                     val_loss_all_positions=all_token_loss(model, val_tokens[:128]),
                     optimal_loss_all_positions=bayes_optimal_loss(val_tokens, data, positions="all"))
    result = InductionResult(
        model=config.model, val_loss=val_loss, optimal_loss=optimal, loss_gap=val_loss - optimal,
        parent_share=found.parent_share, true_parent_subset=found.true_parent_subset,
        true_parent_share=found.true_parent_share, true_parent_share_early=early, early_step=config.early_step,
        copier_distance=found.copier_distance, copier_mass=found.copier_mass,
        generalized_induction_score=found.generalized_induction_score,
        generalized_induction_chance=found.generalized_induction_chance,
        last_token_only_mass=found.last_token_only_mass, last_token_only_chance=found.last_token_only_chance,
        generalized_induction_head=found.best_head, parent_subset_attention=found.parent_subset_attention,
        parent_subset_chance=found.parent_subset_chance, parent_criterion=criterion.as_dict(),
        parent_criterion_selected=criterion.labels[criterion.subsets.index(criterion.selected)],
        parent_criterion_population=population.as_dict(),
        parent_criterion_population_selected=population.labels[population.subsets.index(population.selected)],
        parent_criterion_population_chains=population.n_chains, generalisation=generalisation(model, config),
        final_a=float(model.a.detach()) if isinstance(model, SimplifiedInductionModel) else None,
        final_train_loss=history.column("loss")[-1] if history.steps else None,
        steps=history.steps[-1] if history.steps else 0, config=config,
        trajectory=Trajectory(**{k: tuple(v) for k, v in trajectory.items()}) if trajectory else None,
        reference=induction_reference(config), findings=findings, **extra)
    write_figures(model, history, trajectory or None, example=probe_tokens[:1], true_label=found.true_parent_subset,
                  copier_mass=found.copier_mass, best_head=found.best_head, order=order,
                  objective=config.train.loss, optimal_train=optimal_train, optimal_val=optimal, out_dir=out_dir)
    history.save(out_dir / "history.json")
    write_timings(out_dir, {"train": trained - started, "total": time.perf_counter() - started})
    result.save(out_dir)
    log.info("induction toy: val %.4f vs optimal %.4f", val_loss, optimal)
    return result
