"""Training on the co-occurrence task with two learning rates: ``eta_Y`` (decoder) and ``eta_Z`` (attention).

Both the Y/Z model and a standard TL model split their parameters into two groups, each with its
own optimiser (the paper's reference uses SGD with momentum 0.9 for both):

- Y/Z model: ``Y`` gets ``eta_y``, ``Z`` gets ``eta_z``;
- standard model: the query/key weights (``W_Q``, ``W_K`` and biases) get ``eta_z``, everything
  else (embeddings, ``W_V``, ``W_O``, layer norms, unembedding) gets ``eta_y``.

Every step draws a fresh batch from the data generator; the loss is the cross-entropy of the
prediction at the last position (the query) against the next token.

Example::

    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab))
    history = train_on_cooccurrence(model, data, TwoRateConfig(eta_y=1.0, eta_z=1.0))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mechprobe.forward import model_device
from mechprobe.validation import integer
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZTransformer
from toymodels.training import Callback, Checkpointer, History, make_optimizer, train


@dataclass(frozen=True)
class TwoRateConfig:
    """Optimisation settings: one learning rate per parameter group, fresh batches every step."""

    eta_y: float = 1.0
    eta_z: float = 1.0
    optimizer: Literal["sgd", "adam"] = "sgd"
    momentum: float = 0.9
    batch_size: int = 128
    n_steps: int = 100
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("eta_y", "eta_z"):
            value = getattr(self, name)
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or not (math.isfinite(value) and value > 0)):
                raise ToyConfigError(f"TwoRateConfig.{name} must be a finite number > 0; got {value!r}.")
        if self.optimizer not in ("sgd", "adam"):
            raise ToyConfigError(f"TwoRateConfig.optimizer must be 'sgd' or 'adam'; got {self.optimizer!r}.")
        if isinstance(self.momentum, bool) or not isinstance(self.momentum, (int, float)) or not 0 <= self.momentum < 1:
            raise ToyConfigError(f"TwoRateConfig.momentum must lie in [0, 1); got {self.momentum!r}.")
        for name, low in (("batch_size", 1), ("n_steps", 0)):
            value = getattr(self, name)
            integer(f"TwoRateConfig.{name}", value, low, error=ToyConfigError)


def parameter_groups(model: nn.Module) -> dict[str, list[nn.Parameter]]:
    """``{"Y": decoder-side parameters, "Z": attention query/key parameters}`` (trainable ones only)."""
    if isinstance(model, YZTransformer):
        return {"Y": [model.Y], "Z": [model.Z]}
    groups: dict[str, list[nn.Parameter]] = {"Y": [], "Z": []}
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        parts = name.split(".")
        is_query_key = "attn" in parts and any(p in ("q", "k", "W_Q", "W_K", "b_Q", "b_K") for p in parts)
        groups["Z" if is_query_key else "Y"].append(parameter)
    if not groups["Z"]:
        raise ToyConfigError(
            f"Found no attention query/key parameters in {type(model).__name__}; expected names with "
            f"'attn' and 'q'/'k' (or W_Q/W_K). Use a YZTransformer or a TransformerLens model."
        )
    return groups


class MomentumSGD:
    """SGD with heavy-ball momentum, step for step the update of ``torch.optim.SGD(params, lr, momentum)``.

    ``buf = grad`` on the first step, then ``buf = momentum * buf + grad``; ``param -= lr * buf``
    (no dampening, weight decay or Nesterov). Building any ``torch.optim`` optimiser imports
    ``torch._dynamo`` (about as long as importing torch itself), which would dominate a short
    Scan and Snap run; this class offers what the training loop and the checkpointer use
    (``param_groups``, ``zero_grad``, ``step``, ``state_dict``, ``load_state_dict``) without it.
    Its ``state_dict`` has the layout of ``torch.optim.SGD``'s, so either loads the other's.
    """

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, momentum: float = 0.0) -> None:
        params = [p for p in params if p.requires_grad]
        if not params:
            raise ToyConfigError(
                "An optimiser needs at least one trainable parameter; all given parameters are frozen."
            )
        self.param_groups: list[dict[str, Any]] = [
            {"params": params, "lr": lr, "momentum": momentum, "dampening": 0, "weight_decay": 0, "nesterov": False,
             "maximize": False, "foreach": None, "differentiable": False, "fused": None}]
        self.buffers: list[Tensor | None] = [None] * len(params)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.param_groups[0]["params"]:
            if set_to_none:
                param.grad = None
            elif param.grad is not None:
                param.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        group = self.param_groups[0]
        for i, param in enumerate(group["params"]):
            if param.grad is None:
                continue
            update = param.grad
            if group["momentum"] != 0:
                buffer = self.buffers[i]
                if buffer is None:
                    buffer = self.buffers[i] = update.detach().clone()
                else:
                    buffer.mul_(group["momentum"]).add_(update)
                update = buffer
            param.add_(update, alpha=-group["lr"])

    def state_dict(self) -> dict[str, Any]:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.buffers)))
        state = {i: {"momentum_buffer": b} for i, b in enumerate(self.buffers) if b is not None}
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.buffers):
            raise ToyConfigError(f"The saved optimiser state holds {len(group['params'])} parameters; this "
                                 f"optimiser has {len(self.buffers)}.")
        self.param_groups[0].update({k: v for k, v in group.items() if k != "params"})
        saved = state_dict["state"]
        params = self.param_groups[0]["params"]
        self.buffers = [saved[i]["momentum_buffer"].to(params[i].device, copy=True) if i in saved
                        and saved[i].get("momentum_buffer") is not None else None for i in range(len(self.buffers))]


def make_two_rate_optimizers(model: nn.Module, config: TwoRateConfig) -> list[Any]:
    """``[optimiser of Y (eta_y), optimiser of Z (eta_z)]`` built from :func:`parameter_groups`.

    SGD uses :class:`MomentumSGD` (the same updates as ``torch.optim.SGD``), Adam ``torch.optim.Adam``.
    """
    groups = parameter_groups(model)
    if config.optimizer == "sgd":
        return [MomentumSGD(groups["Y"], lr=float(config.eta_y), momentum=config.momentum),
                MomentumSGD(groups["Z"], lr=float(config.eta_z), momentum=config.momentum)]
    return [
        make_optimizer(groups["Y"], lr=float(config.eta_y), kind=config.optimizer),
        make_optimizer(groups["Z"], lr=float(config.eta_z), kind=config.optimizer),
    ]


def query_logits(model: nn.Module, tokens: Tensor) -> Tensor:
    """The logits at the last position [batch d_vocab] (the Y/Z model's fast path, else ``model(tokens)[:, -1]``)."""
    if isinstance(model, YZTransformer):
        return model.query_logits(tokens)
    return model(tokens)[:, -1]


def train_on_cooccurrence(
    model: nn.Module,
    data: CooccurrenceData,
    config: TwoRateConfig,
    *,
    callbacks: Sequence[Callback] = (),
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
) -> History:
    """Train ``model`` for ``config.n_steps`` steps; batches come from a generator seeded by ``config.seed``.

    Batches are drawn on the CPU and moved to the model's device. ``callbacks`` run after every step as
    ``callback(step, model, history)``; ``checkpointer`` saves and resumes the run (model, both optimisers,
    the batch generator, the history); ``progress`` shows a bar.

    ``history.values["loss"][i]`` is the loss of the batch drawn at step ``history.steps[i]``
    (before that step's update), so step 1 holds the loss at initialisation.
    """
    if not isinstance(data, CooccurrenceData):
        raise ToyConfigError(f"data must be a CooccurrenceData; got {type(data).__name__}.")
    d_vocab = getattr(getattr(model, "cfg", None), "d_vocab", None)
    if d_vocab != data.d_vocab:
        raise ToyConfigError(
            f"The model's vocabulary ({d_vocab}) differs from the data's ({data.d_vocab}); build the model "
            f"with d_vocab=data.d_vocab."
        )
    optimizers = make_two_rate_optimizers(model, config)
    device = model_device(model)

    def loss_fn(step: int, generator: torch.Generator) -> Tensor:
        tokens, labels, _ = data.sample(config.batch_size, generator)
        return F.cross_entropy(query_logits(model, tokens.to(device)), labels.to(device))

    return train(model, loss_fn, optimizers, n_steps=config.n_steps,
                 generator=torch.Generator().manual_seed(config.seed), callbacks=callbacks,
                 checkpointer=checkpointer, progress=progress,
                 desc="Y/Z model" if isinstance(model, YZTransformer) else "standard model")
