"""Training the induction toy models on in-context n-gram Markov chains (uses toymodels.training).

- The simplified and full models (Chen et al. 2024): full-batch (or mini-batch) gradient descent on
  a loss of the last token, jointly or in stages (``c`` -> ``w`` -> ``a``: the selector weights,
  then the layer-1 relative-position weights, then the layer-2 scale), with SGD learning rates
  per part. The loss (:func:`simplified_loss`) is ``"nll"``, the negative log-likelihood of the
  model's smoothed prediction, or ``"probs_as_logits"``, the reference code's objective: a
  cross-entropy that treats the mixture ``p`` as logits, ``-log softmax(p)[y]``.
- Any TransformerLens model (e.g. ``toymodels.standard.build_standard_model``): Adam on fresh
  sequences each step, NLL of every next token (language-model style).

Both entry points share one signature, ``train_<what>(model, data, config, *, callbacks=(),
checkpointer=None, progress=False) -> History``: the config holds the steps, rates and the seed of
the CPU generator that draws batches. Both go through :func:`toymodels.training.train`, so
callbacks run after every step and a :class:`~toymodels.training.Checkpointer` makes runs resumable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn

from mechprobe import forward
from mechprobe.forward import model_device
from mechprobe.validation import at_least, one_of, positive
from toymodels.errors import ToyConfigError
from toymodels.induction.data import MarkovConfig, sample_markov_icl
from toymodels.induction.simplified import SimplifiedInductionModel
from toymodels.induction.windows import WindowBatch
from toymodels.training import Callback, Checkpointer, History, StateCallback, train

STAGES = ("c", "w", "a")
LOSSES = ("nll", "probs_as_logits")


def simplified_loss(model: SimplifiedInductionModel, tokens: Int[Tensor, "batch pos"], loss: str = "nll", *,
                    windows: WindowBatch | None = None) -> Tensor:
    """Mean last-token loss of ``tokens`` [n, L + 1] (inputs ``tokens[:, :-1]``, target ``tokens[:, -1]``).

    ``"nll"``: ``-log((1 - eps) p_y + eps / S)``; ``"probs_as_logits"``: ``-log softmax(p)_y`` (the
    reference code's ``CrossEntropyLoss`` applied to the probability vector ``p``). ``windows``: the
    inputs' precomputed ``model.window_batch(tokens[:, :-1])`` (saves the grouping on a fixed set).
    """
    if loss not in LOSSES:
        raise ToyConfigError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}.")
    p = model.final_probs(windows if windows is not None else tokens[:, :-1])
    return loss_from_probs(p, tokens[:, -1], loss, eps=model.cfg.eps)


def loss_from_probs(p: Float[Tensor, "batch d_vocab"], target: Int[Tensor, " batch"], loss: str, *,
                    eps: float = 1e-3) -> Tensor:
    """The mean ``loss`` (see :func:`simplified_loss`) of the classifier mixtures ``p`` for ``target``."""
    if loss == "nll":
        return -((1 - eps) * p + eps / p.shape[-1]).log().gather(-1, target[:, None]).mean()
    if loss == "probs_as_logits":
        return F.cross_entropy(p, target)
    raise ToyConfigError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}.")


@dataclass(frozen=True)
class SimplifiedTraining:
    """How to train the simplified model.

    ``schedule="joint"`` trains ``c``, ``w`` and ``a`` together for ``n_steps``;
    ``"staged"`` trains only ``c`` for ``stage_steps[0]`` steps, then only ``w`` for
    ``stage_steps[1]``, then only ``a`` for ``stage_steps[2]`` (``n_steps`` = their sum).
    ``batch_size=0`` means full batch (the paper); otherwise mini-batches drawn by a CPU generator
    seeded with ``seed``. ``loss``: see :func:`simplified_loss`.
    """

    schedule: Literal["joint", "staged"] = "joint"
    n_steps: int = 300
    stage_steps: tuple[int, int, int] = (100, 100, 100)
    lr_c: float = 1.0
    lr_w: float = 1.0
    lr_a: float = 1.0
    batch_size: int = 0
    loss: Literal["nll", "probs_as_logits"] = "nll"
    seed: int = 0

    def __post_init__(self) -> None:
        one_of("loss", self.loss, LOSSES, error=ToyConfigError)
        one_of("schedule", self.schedule, ("joint", "staged"), error=ToyConfigError)
        if self.schedule == "staged":
            if len(self.stage_steps) != 3 or any(s < 0 for s in self.stage_steps):
                raise ToyConfigError(f"stage_steps must be three step counts >= 0 (c, w, a); got {self.stage_steps!r}.")
        else:
            at_least("n_steps", self.n_steps, 0, error=ToyConfigError)
        for name in ("lr_c", "lr_w", "lr_a"):
            positive(name, getattr(self, name), error=ToyConfigError)
        at_least("batch_size (0 = full batch)", self.batch_size, 0, error=ToyConfigError)

    @property
    def total_steps(self) -> int:
        return sum(self.stage_steps) if self.schedule == "staged" else self.n_steps

    def stage_at(self, step: int) -> str | None:
        """The part trained at ``step`` (1-based) under the staged schedule; None when joint."""
        if self.schedule == "joint":
            return None
        bound = 0
        for stage, steps in zip(STAGES, self.stage_steps):
            bound += steps
            if step <= bound:
                return stage
        return STAGES[-1]


def last_token_log_probs(model: nn.Module, tokens: Int[Tensor, "batch pos"]) -> Tensor:
    """Log-probabilities [batch, d_vocab] of the token after ``tokens`` under ``model``."""
    if isinstance(model, SimplifiedInductionModel):
        return model.final_log_probs(tokens)
    return F.log_softmax(model(tokens)[:, -1].float(), dim=-1)


def last_token_loss(model: nn.Module, tokens: Int[Tensor, "batch pos"], *, batch_size: int = 512) -> float:
    """Mean NLL (nats) of ``tokens[:, -1]`` given ``tokens[:, :-1]``, averaged over sequences.

    ``tokens`` may be on any device; chunks of ``batch_size`` are moved to the model's.
    """
    total, count = 0.0, 0
    device = model_device(model)
    with forward.measuring(model):
        for chunk in tokens.split(batch_size):
            chunk = chunk.to(device)
            logp = last_token_log_probs(model, chunk[:, :-1])
            total += float(-logp.gather(-1, chunk[:, -1:]).sum())
            count += chunk.shape[0]
    return total / count


def all_token_loss(model: nn.Module, tokens: Int[Tensor, "batch pos"], *, batch_size: int = 256) -> float:
    """Mean NLL (nats) of every token ``1 .. L`` given its prefix, over sequences and positions.

    ``tokens`` may be on any device; chunks of ``batch_size`` are moved to the model's.
    """
    total, count = 0.0, 0
    device = model_device(model)
    with forward.measuring(model):
        for chunk in tokens.split(batch_size):
            chunk = chunk.to(device)
            logp = F.log_softmax(model(chunk[:, :-1]).float(), dim=-1)
            total += float(-logp.gather(-1, chunk[:, 1:, None]).sum())
            count += chunk[:, 1:].numel()
    return total / count


def train_simplified(
    model: SimplifiedInductionModel,
    train_tokens: Int[Tensor, "batch pos"],
    config: SimplifiedTraining,
    *,
    callbacks: Sequence[Callback] = (),
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
) -> History:
    """Gradient descent on the last-token loss of ``train_tokens`` [n, L + 1] (see :class:`SimplifiedTraining`).

    Works for the simplified and the full model (``w`` = all layer-1 parameters). SGD with one
    learning rate per part; in the staged schedule the parts not being trained get
    no gradient. Logs ``loss`` every step (then the callbacks run). ``train_tokens`` are copied to
    the model's device once; mini-batch indices are drawn on the CPU from ``config.seed``.

    Example: ``history = train_simplified(model, tokens, SimplifiedTraining(n_steps=100))``.
    """
    if train_tokens.ndim != 2 or train_tokens.shape[1] < 3:
        raise ToyConfigError(f"train_tokens must be [n, L + 1] with L >= 2; got {tuple(train_tokens.shape)}.")
    parts = {"c": [model.c, model.c_token], "w": model.layer1_parameters(), "a": [model.a]}
    lrs = {"c": config.lr_c, "w": config.lr_w, "a": config.lr_a}
    optimizer = torch.optim.SGD([{"params": parts[stage], "lr": lrs[stage]} for stage in STAGES])
    n_train = train_tokens.shape[0]
    train_tokens = train_tokens.to(model_device(model))
    full_batch = not (config.batch_size and config.batch_size < n_train)
    windows = model.window_batch(train_tokens[:, :-1]) if full_batch else None

    def loss_fn(step: int, gen: torch.Generator) -> Tensor:
        stage = config.stage_at(step)
        for name, params in parts.items():
            for param in params:
                param.requires_grad_(stage is None or stage == name)
        if full_batch:
            return simplified_loss(model, train_tokens, config.loss, windows=windows)
        index = torch.randint(0, n_train, (config.batch_size,), generator=gen)
        return simplified_loss(model, train_tokens[index.to(train_tokens.device)], config.loss)

    try:
        generator = torch.Generator().manual_seed(config.seed)
        return train(model, loss_fn, [optimizer], n_steps=config.total_steps, generator=generator,
                     callbacks=callbacks, checkpointer=checkpointer, progress=progress, desc="simplified model")
    finally:
        for param in model.parameters():
            param.requires_grad_(True)


@dataclass(frozen=True)
class FreshChainTraining:
    """How to train a standard model on fresh chains: ``n_steps`` Adam steps at ``lr``, each on
    ``batch_size`` chains drawn by a CPU generator seeded with ``seed``."""

    n_steps: int = 300
    batch_size: int = 32
    lr: float = 3e-3
    seed: int = 0

    def __post_init__(self) -> None:
        at_least("n_steps", self.n_steps, 0, error=ToyConfigError)
        at_least("batch_size", self.batch_size, 1, error=ToyConfigError)
        positive("lr", self.lr, error=ToyConfigError)


def train_on_fresh_chains(
    model: nn.Module,
    data: MarkovConfig,
    config: FreshChainTraining,
    *,
    callbacks: Sequence[Callback] = (),
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
    state_callbacks: Sequence[StateCallback] = (),
) -> History:
    """Adam on the next-token NLL at every position of ``config.batch_size`` fresh chains of ``data`` per step.

    Works for any model mapping tokens [batch, L] to logits [batch, L, d_vocab] (e.g. a
    TransformerBridge from ``build_standard_model``). Chains are sampled on the CPU and moved to
    the model's device. ``state_callbacks`` see the whole state after each step (:func:`toymodels.training.train`).

    Example: ``train_on_fresh_chains(model, MarkovConfig(), FreshChainTraining(n_steps=500))``.
    """
    batch_size, lr = config.batch_size, config.lr
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    device = model_device(model)

    def loss_fn(step: int, gen: torch.Generator) -> Tensor:
        tokens = sample_markov_icl(data, batch_size, gen).tokens.to(device)
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))

    generator = torch.Generator().manual_seed(config.seed)
    return train(model, loss_fn, [optimizer], n_steps=config.n_steps, generator=generator, callbacks=callbacks,
                 checkpointer=checkpointer, progress=progress, desc="standard model", state_callbacks=state_callbacks)
