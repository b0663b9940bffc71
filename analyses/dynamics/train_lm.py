"""``mechprobe train-lm``: a small attention-only TransformerLens model trained on real text, saved at log-spaced
steps as a checkpoint series (``OUT/series.json`` + ``OUT/step_N/``) that ``mechprobe dynamics --model OUT`` reads.

The model is :func:`toymodels.standard.build_standard_model` (``boot_native``: attention only, LayerNorm,
learned positions), trained with AdamW on next-token loss over rows of :class:`analyses.lm_data.LmData`
(the corpus in SmolLM2 tokens, vocabulary cut to the ``vocab`` most frequent; a ``repeat`` fraction of rows repeat
a ``span``-token piece of their first half later in the row). Step 0 (the initialisation) is always saved: it is
the series' control. ``series.json`` is rewritten after each saved step, so a stopped run leaves a usable series, and
the training state (weights, AdamW, the row generator, the loss history) is checkpointed in ``OUT/checkpoint/`` every
``resume_every`` steps (:class:`toymodels.training.Checkpointer`): the same command resumes a killed run and ends
with the same weights as an uninterrupted one. A run stopped anywhere, before its first checkpoint or during
start-up included, is resumed by the same command (:mod:`analyses.dynamics.lm_run_folder`); a diverged one keeps its
steps, and is trained again with a lower ``lr`` into a new folder.
The state at every saved step is kept in ``OUT/states/step_N/``
(:class:`toymodels.step_states.StepStates`), so that ``mechprobe dynamics --refine`` can re-run the stretch between
two saved steps and save more checkpoints there (:mod:`analyses.dynamics.bracket_rerun`).

Example: ``train_lm(TrainLmConfig(n_steps=200), "runs/lm")`` then ``run_dynamics("runs/lm", "runs/lm-dyn")``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from analyses.dynamics.lm_run_folder import absolute_corpus, check_rerun, check_vocabulary, mark_run
from analyses.lm_data import VOCAB_FILE, LmData
from analyses.series_writer import (
    CHECKPOINT_FOLDER,
    STATES_FOLDER,
    check_saved_weights,
    checkpoint_steps,
    checkpoints_refusal,
    start_over,
    write_manifest,
)
from analyses.toy_model_store import save_standard_model
from mechprobe import records, validation
from probes.core.atomic import atomic_write_text
from probes.core.errors import ConfigError
from toymodels.errors import TrainingDiverged
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.step_states import StepStates
from toymodels.training import Checkpointer, History, LossFn, train

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrainLmConfig:
    """Settings of ``mechprobe train-lm`` (validated on construction). The defaults make a previous-token head and
    then an induction head form on the packaged Wikipedia excerpt in under 10 minutes on 2 CPU cores."""

    corpus: str = "wikipedia-excerpt"
    vocab: int = 2000
    seq_len: int = 128
    batch_size: int = 32
    d_model: int = 128
    n_heads: int = 4
    n_layers: int = 2
    lr: float = 3e-3
    weight_decay: float = 0.01
    n_steps: int = 2500
    n_checkpoints: int = 16
    repeat: float = 1.0
    span: int = 24
    seed: int = 0
    resume_every: int = 100

    def __post_init__(self) -> None:
        for name, low in (("vocab", 3), ("seq_len", 8), ("batch_size", 1), ("d_model", 1), ("n_heads", 1),
                          ("n_layers", 1), ("n_steps", 1), ("n_checkpoints", 2), ("span", 1),
                          ("resume_every", 1)):
            validation.integer(name, getattr(self, name), low)
        validation.seed("seed", self.seed)
        validation.fraction("repeat", self.repeat)
        validation.positive("lr", self.lr)
        validation.at_least("weight_decay", self.weight_decay, 0.0)
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}); set d_model "
                              f"to {self.n_heads * max(1, self.d_model // self.n_heads)} or another multiple of "
                              f"{self.n_heads}.")
        if self.span > self.seq_len // 2:
            raise ConfigError(f"span ({self.span}) must fit in the first half of a row (seq_len // 2 = "
                              f"{self.seq_len // 2}); set span to {self.seq_len // 2} or less, or seq_len to "
                              f"{2 * self.span} or more.")

    def check_checkpoint_count(self) -> None:
        """``n_checkpoints`` distinct log-spaced steps fit in ``n_steps`` (refused, not saved at fewer steps than
        asked); checked once every setting is given, since either may be set after the other."""
        refusal = checkpoints_refusal("n_checkpoints", self.n_checkpoints, "n_steps", self.n_steps)
        if refusal is not None:
            raise ConfigError(refusal)

    def check_size(self, memory: int | None) -> None:
        """Training fits in ``memory`` bytes (None: not known, not checked), judged by a lower bound: the attention
        weights alone (4 x d_model x d_model per layer) with their gradients and AdamW's two moments in float32, and
        one step's rows (int64) with each layer's attention pattern (float32, kept for the backward pass)."""
        if memory is None:
            return
        weights = 16 * 4 * self.n_layers * self.d_model**2
        step = 8 * self.batch_size * self.seq_len + 4 * self.batch_size * self.n_layers * self.n_heads * self.seq_len**2
        if weights > memory:
            raise ConfigError(f"n_layers {self.n_layers} x d_model {self.d_model}: training holds at least "
                              f"{weights / 2**30:,.0f} GiB (the attention weights with their gradients and AdamW's "
                              f"moments), more than this machine's {memory / 2**30:,.0f} GiB; lower n_layers or "
                              f"d_model.")
        if weights + step > memory:
            raise ConfigError(f"batch_size {self.batch_size} x seq_len {self.seq_len}: one training step holds at "
                              f"least {(weights + step) / 2**30:,.0f} GiB (the weights, the rows and each layer's "
                              f"attention pattern over seq_len x seq_len positions), more than this machine's "
                              f"{memory / 2**30:,.0f} GiB; lower batch_size or seq_len.")

    def model_config(self, d_vocab: int) -> StandardModelConfig:
        return StandardModelConfig(n_layers=self.n_layers, d_model=self.d_model, n_heads=self.n_heads,
                                   d_vocab=d_vocab, n_ctx=self.seq_len, attn_only=True, seed=self.seed)


@dataclass(frozen=True)
class TrainLmSummary:
    """``OUT/summary.json`` of ``train-lm``: its settings, the saved steps, the loss history's first and last
    values, the kept vocabulary's size and the wall-clock seconds of training (of this invocation, when resumed)."""

    settings: TrainLmConfig
    steps: tuple[int, ...]
    first_loss: float
    final_loss: float
    vocab: int
    corpus_tokens: int
    seconds: float


@dataclass(frozen=True)
class LmTraining:
    """What one ``train-lm`` run trains: the model (of ``model_config``), its AdamW, the row generator (seeded by
    ``config.seed``) and the loss of one step's rows; built the same way for the first run and for a re-run of a
    stretch of it (:mod:`analyses.dynamics.bracket_rerun`)."""

    model_config: StandardModelConfig
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    generator: torch.Generator
    loss_fn: LossFn


def lm_training(config: TrainLmConfig, data: LmData, *, device: str | torch.device = "cpu") -> LmTraining:
    """The :class:`LmTraining` of ``config`` on ``data``, at step 0."""
    model_config = config.model_config(data.vocab)
    model = build_standard_model(model_config, device=device)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr,
                                  weight_decay=config.weight_decay)

    def loss_fn(step: int, generator: torch.Generator) -> torch.Tensor:
        rows = data.rows(config.batch_size, config.seq_len, repeat=config.repeat, span=config.span,
                         generator=generator).to(device)
        logits = model(rows)
        return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                 rows[:, 1:].reshape(-1))

    return LmTraining(model_config, model, optimizer, torch.Generator().manual_seed(config.seed), loss_fn)


def train_lm(config: TrainLmConfig, out: str | Path, *, device: str | torch.device = "cpu",
             progress: bool = True) -> TrainLmSummary:
    """Train the model of ``config`` and save it at :func:`checkpoint_steps` into ``out`` (module docstring)."""
    config.check_checkpoint_count()
    config = dataclasses.replace(config, corpus=absolute_corpus(config.corpus))  # the same text from any folder
    out = Path(out)
    settings = records.dump(config)
    saved = check_rerun(out, settings)  # a resumed run: the steps saved before it stopped
    data = LmData.from_corpus(config.corpus, vocab=config.vocab)
    data.check_rows(config.seq_len)
    check_vocabulary(out, config.corpus, data.kept_ids)
    run = lm_training(config, data, device=device)  # (seeded: built here or later, the same model)
    check_saved_weights(out, saved, run.model, fix=start_over(out))
    mark_run(out, settings)  # nothing is written before: a run stopped earlier leaves no trace but an empty folder
    atomic_write_text(out / VOCAB_FILE, json.dumps({"smollm2_ids": list(data.kept_ids), "other": data.vocab - 1}))
    model, model_config = run.model, run.model_config
    wanted = set(checkpoint_steps(config.n_steps, config.n_checkpoints))
    fingerprint = records.to_json(config, indent=None)
    states = StepStates(out / STATES_FOLDER, steps=wanted, fingerprint=fingerprint)

    def save(step: int) -> None:
        save_standard_model(model, model_config, out / f"step_{step}", "train-lm")
        saved.add(step)
        write_manifest(out, saved, tokens_per_step=config.batch_size * config.seq_len)

    def on_step(step: int, model_: torch.nn.Module, history: History) -> None:
        if step in wanted:
            save(step)

    if 0 not in saved:
        save(0)  # its training state is the fresh build of lm_training: no state to keep
    checkpointer = Checkpointer(out / CHECKPOINT_FOLDER, every=config.resume_every, fingerprint=fingerprint)
    started = time.perf_counter()
    try:
        history = train(model, run.loss_fn, [run.optimizer], n_steps=config.n_steps, generator=run.generator,
                        callbacks=[on_step], checkpointer=checkpointer, progress=progress, desc="train-lm",
                        state_callbacks=[states])
    except TrainingDiverged as error:  # its advice is the training loop's; a train-lm folder takes one setting
        raise TrainingDiverged(
            f"Training diverged: {error.cause}. {out} keeps the steps saved before it "
            f"({', '.join(str(s) for s in sorted(saved))}). Lower the learning rate "
            f"(lr {config.lr:g}; e.g. --set lr={config.lr / 3:g}) and give a new --out.", cause=error.cause) from None
    seconds = time.perf_counter() - started
    losses = history.column("loss")
    summary = TrainLmSummary(config, tuple(sorted(saved)), float(losses[0]), float(losses[-1]), data.vocab,
                             int(data.stream.shape[0]), seconds)
    atomic_write_text(out / "summary.json", records.to_json(summary))
    return summary
