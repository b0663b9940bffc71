"""Many Y/Z models trained at once: one stacked ``[run, d_vocab, d_vocab]`` tensor per weight.

A learning-rate sweep (Scan and Snap's Figure 6: 16 learning-rate pairs x 10 seeds per data setting)
trains hundreds of tiny, independent Y/Z models. Stacking them turns hundreds of small steps into one
batched step. Run ``r`` keeps everything it would have alone: its initialisation (``YZTransformer``
with ``seed = runs[r].seed``), its own data stream (a generator seeded with ``runs[r].seed``, one
``data.sample`` per step, exactly as :func:`toymodels.scansnap.training.train_on_cooccurrence` draws),
its own learning rates, and its own optimiser state (momentum SGD and Adam are elementwise). The loss
is the sum over runs of each run's mean cross-entropy, so each slice's gradient is that run's own
gradient; the batched runs match separate runs up to float rounding (tested).

Recorded per step (step 0 = initialisation): the long-context composition ``c_l ~ P(l | m, n)
exp(Z[m, l])`` of every run and fact over the fact's support (common tokens, then its distinct tokens).

Example::

    data = CooccurrenceData(CooccurrenceConfig(num_last=3, num_next_per_last=2))
    runs = [YZRun(seed=s, eta_y=2.0, eta_z=1.0) for s in range(10)]
    result = train_yz_runs(data, runs, n_steps=100)
    result.support_trajectory.shape  # [101, 10, 6, 20]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from mechprobe.validation import integer
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer

_EPS = 1e-12
ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


@dataclass(frozen=True)
class YZRun:
    """One run of a batch: its seed (initialisation and data) and its two learning rates."""

    seed: int
    eta_y: float
    eta_z: float

    def __post_init__(self) -> None:
        integer("YZRun.seed", self.seed, 0, error=ToyConfigError)
        for name in ("eta_y", "eta_z"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value > 0):
                raise ToyConfigError(f"YZRun.{name} must be a finite number > 0; got {value!r}.")


@dataclass(frozen=True)
class YZRunsResult:
    """``Y``, ``Z``: final weights [run d_vocab d_vocab]; ``loss``: [step run] training-batch loss of steps
    1..n (before each update); ``support_trajectory``: [step run fact support] compositions, step 0 first."""

    Y: Float[Tensor, "run d_vocab d_vocab"]
    Z: Float[Tensor, "run d_vocab d_vocab"]
    loss: Float[Tensor, "step run"]
    support_trajectory: Float[Tensor, "step run fact support"]


def support_compositions(Z: Tensor, data: CooccurrenceData) -> Float[Tensor, "run fact support"]:
    """``c`` over each fact's support (common tokens, then its distinct tokens) for stacked ``Z`` [run V V]."""
    supports = torch.stack([data.support(f) for f in range(data.n_facts)]).to(Z.device)  # fact support
    logits = Z.detach().double()[:, data.fact_last.to(Z.device)]  # run fact V
    logits = torch.gather(logits, 2, supports.expand(Z.shape[0], -1, -1))
    prior = torch.gather(data.context_probs.to(Z.device), 1, supports)[None]  # 1 fact support
    weights = prior * torch.exp(logits - logits.max(-1, keepdim=True).values)
    return weights / weights.sum(-1, keepdim=True)


def train_yz_runs(
    data: CooccurrenceData,
    runs: Sequence[YZRun],
    *,
    n_steps: int = 100,
    batch_size: int = 128,
    optimizer: Literal["sgd", "adam"] = "sgd",
    momentum: float = 0.9,
    init: Literal["zero", "linear"] = "linear",
    device: str | torch.device = "cpu",
) -> YZRunsResult:
    """Train one Y/Z model per entry of ``runs`` together (module docstring); batches are drawn on the CPU."""
    if not isinstance(data, CooccurrenceData):
        raise ToyConfigError(f"data must be a CooccurrenceData; got {type(data).__name__}.")
    runs = list(runs)
    if not runs or not all(isinstance(r, YZRun) for r in runs):
        raise ToyConfigError("runs must be a non-empty sequence of YZRun.")
    for name, value, low in (("n_steps", n_steps, 0), ("batch_size", batch_size, 1)):
        integer(name, value, low, error=ToyConfigError)
    if optimizer not in ("sgd", "adam"):
        raise ToyConfigError(f"optimizer must be 'sgd' or 'adam'; got {optimizer!r}.")
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum < 1:
        raise ToyConfigError(f"momentum must lie in [0, 1); got {momentum!r}.")
    models = [YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=data.config.seq_len, init=init, seed=r.seed))
              for r in runs]
    Y = torch.stack([m.Y.detach() for m in models]).to(device).requires_grad_(True)
    Z = torch.stack([m.Z.detach() for m in models]).to(device).requires_grad_(True)
    lr = {"Y": torch.tensor([r.eta_y for r in runs], dtype=Y.dtype, device=Y.device)[:, None, None],
          "Z": torch.tensor([r.eta_z for r in runs], dtype=Z.dtype, device=Z.device)[:, None, None]}
    state: dict[str, dict[str, Tensor]] = {"Y": {}, "Z": {}}
    generators = [torch.Generator().manual_seed(r.seed) for r in runs]
    run_index = torch.arange(len(runs), device=Y.device)[:, None, None]
    trajectory = [support_compositions(Z, data).float().cpu()]
    losses = []
    for step in range(1, n_steps + 1):
        samples = [data.sample(batch_size, g) for g in generators]
        tokens = torch.stack([s[0] for s in samples]).to(Y.device)  # run batch pos
        labels = torch.stack([s[1] for s in samples]).to(Y.device)  # run batch
        context, query = tokens[..., :-1], tokens[..., -1:]
        attention = Z[run_index, query, context].softmax(-1)  # run batch pos-1
        pooled = torch.zeros(*tokens.shape[:2], data.d_vocab, dtype=Y.dtype, device=Y.device)
        pooled = pooled.scatter_add(2, context, attention)
        pooled = pooled / pooled.norm(dim=-1, keepdim=True).clamp_min(_EPS)
        logits = torch.einsum("rbv,rov->rbo", pooled, Y)
        per_run = F.cross_entropy(logits.reshape(-1, data.d_vocab), labels.reshape(-1), reduction="none")
        per_run = per_run.reshape(len(runs), batch_size).mean(1)
        if not bool(torch.isfinite(per_run).all()):
            bad = [runs[i] for i in torch.nonzero(~torch.isfinite(per_run)).flatten().tolist()]
            raise ToyConfigError(f"Training diverged at step {step} (non-finite loss) for {bad}; lower the "
                                 f"learning rates.")
        grad_y, grad_z = torch.autograd.grad(per_run.sum(), (Y, Z))
        with torch.no_grad():
            for name, weight, grad in (("Y", Y, grad_y), ("Z", Z, grad_z)):
                _update(weight, grad, lr[name], state[name], optimizer, momentum, step)
            finite = torch.isfinite(Y).flatten(1).all(1) & torch.isfinite(Z).flatten(1).all(1)
        if not bool(finite.all()):
            bad = [runs[i] for i in torch.nonzero(~finite).flatten().tolist()]
            raise ToyConfigError(f"Training diverged at step {step} (non-finite weights) for {bad}; lower the "
                                 f"learning rates.")
        losses.append(per_run.detach().cpu())
        trajectory.append(support_compositions(Z, data).float().cpu())
    return YZRunsResult(Y=Y.detach().cpu(), Z=Z.detach().cpu(),
                        loss=torch.stack(losses) if losses else torch.zeros(0, len(runs)),
                        support_trajectory=torch.stack(trajectory))


def _update(weight: Tensor, grad: Tensor, lr: Tensor, state: dict[str, Tensor], optimizer: str, momentum: float,
            step: int) -> None:
    """One step of ``torch.optim.SGD(momentum)`` or ``torch.optim.Adam`` (defaults) with a learning rate per run."""
    if optimizer == "sgd":
        if momentum:
            if "buffer" not in state:
                state["buffer"] = grad.clone()
            else:
                state["buffer"].mul_(momentum).add_(grad)
            grad = state["buffer"]
        weight.sub_(lr * grad)
        return
    beta1, beta2 = ADAM_BETAS
    if "m" not in state:
        state["m"], state["v"] = torch.zeros_like(weight), torch.zeros_like(weight)
    state["m"].mul_(beta1).add_(grad, alpha=1 - beta1)
    state["v"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    denominator = (state["v"].sqrt() / math.sqrt(bias2)).add_(ADAM_EPS)
    weight.sub_((lr / bias1) * state["m"] / denominator)
