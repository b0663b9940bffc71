"""A small training loop shared by the toy models: per-step callbacks, history, resumable checkpoints.

The loop owns one ``torch.Generator`` for data sampling; its state is checkpointed with the model
and the optimisers, so a run resumed from a checkpoint ends with the same weights and history as
an uninterrupted one.

Example::

    history = train(model, loss_fn, optimizers, n_steps=100, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import Tensor, nn
from tqdm.auto import tqdm

from toymodels.errors import CheckpointError, ToyConfigError, TrainingDiverged

log = logging.getLogger(__name__)

LossFn = Callable[[int, torch.Generator], Tensor]
"""``loss_fn(step, generator) -> scalar loss``: draws its batch from ``generator``."""

Callback = Callable[[int, nn.Module, "History"], None]
"""``callback(step, model, history)`` runs after every optimiser step (``step`` counts from 1)."""


@dataclass
class History:
    """Per-step records: ``history.values["loss"][i]`` is the value logged at ``history.steps[i]``."""

    steps: list[int] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)

    def log(self, step: int, **values: float) -> None:
        """Record ``values`` at ``step`` (a new step appends; the same step adds columns)."""
        if not self.steps or self.steps[-1] != step:
            self.steps.append(step)
        index = len(self.steps) - 1
        for key, value in values.items():
            column = self.values.setdefault(key, [])
            column.extend([math.nan] * (index - len(column)))
            if len(column) == index:
                column.append(float(value))
            else:
                column[index] = float(value)

    def column(self, key: str) -> list[float]:
        column = self.values.get(key, [])
        return column + [math.nan] * (len(self.steps) - len(column))

    def to_dict(self) -> dict[str, Any]:
        return {"steps": list(self.steps), "values": {k: self.column(k) for k in self.values}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "History":
        return cls(steps=[int(s) for s in data["steps"]], values={k: [float(x) for x in v] for k, v in data["values"].items()})

    def save(self, path: str | os.PathLike) -> None:
        _atomic_write_bytes(Path(path), json.dumps(self.to_dict()).encode())

    @classmethod
    def load(cls, path: str | os.PathLike) -> "History":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _atomic_write_bytes(path: Path, payload: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def make_optimizer(params: Sequence[nn.Parameter], *, lr: float, kind: str = "sgd", momentum: float = 0.0,
                   weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """An SGD (optionally with momentum) or Adam optimiser over ``params``."""
    params = [p for p in params if p.requires_grad]
    if not params:
        raise ToyConfigError("An optimiser needs at least one trainable parameter; all given parameters are frozen.")
    if not lr > 0:
        raise ToyConfigError(f"Learning rates must be > 0; got {lr}.")
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    raise ToyConfigError(f"Optimiser kind must be 'sgd' or 'adam'; got {kind!r}.")


class Checkpointer:
    """Saves and restores model, optimisers, data generator, history and step in one folder.

    Files: ``checkpoint.safetensors`` (weights), ``checkpoint.pt`` (optimiser and generator
    state, loaded with ``weights_only=True``), ``checkpoint.json`` (step, history, fingerprint).
    The JSON is written last and names the step, so a crash mid-save leaves the previous
    complete checkpoint in force.
    """

    def __init__(self, folder: str | os.PathLike, *, every: int, fingerprint: str = "") -> None:
        if every < 1:
            raise ToyConfigError(f"checkpoint every must be >= 1 step; got {every}.")
        self.folder = Path(folder)
        self.every = every
        self.fingerprint = fingerprint

    def save(self, step: int, model: nn.Module, optimizers: Sequence[torch.optim.Optimizer],
             generator: torch.Generator, history: History) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        weights = self.folder / f"weights-{step}.safetensors"
        state = self.folder / f"state-{step}.pt"
        tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        os.close(fd)
        save_file(tensors, tmp)
        os.replace(tmp, weights)
        fd, tmp = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
        os.close(fd)
        torch.save({"optimizers": [o.state_dict() for o in optimizers], "generator": generator.get_state()}, tmp)
        os.replace(tmp, state)
        meta = {"step": step, "weights": weights.name, "state": state.name, "fingerprint": self.fingerprint,
                "history": history.to_dict()}
        previous = self._read_meta()
        _atomic_write_bytes(self.folder / "checkpoint.json", json.dumps(meta).encode())
        if previous is not None and previous["step"] != step:
            for name in (previous["weights"], previous["state"]):
                (self.folder / name).unlink(missing_ok=True)

    def _read_meta(self) -> dict[str, Any] | None:
        path = self.folder / "checkpoint.json"
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CheckpointError(f"{path} is corrupted ({error}); delete {self.folder} to start over.") from error

    def restore(self, model: nn.Module, optimizers: Sequence[torch.optim.Optimizer],
                generator: torch.Generator) -> tuple[int, History] | None:
        """Load the latest checkpoint into the objects; return ``(step, history)``, or None if there is none."""
        meta = self._read_meta()
        if meta is None:
            return None
        if meta.get("fingerprint") != self.fingerprint:
            raise CheckpointError(
                f"The checkpoint in {self.folder} was made with other settings; use another --out "
                f"folder or delete it to start over."
            )
        try:
            tensors = load_file(str(self.folder / meta["weights"]))
            state = torch.load(self.folder / meta["state"], weights_only=True)
            model.load_state_dict(tensors)
            for optimizer, saved in zip(optimizers, state["optimizers"], strict=True):
                optimizer.load_state_dict(saved)
            generator.set_state(state["generator"])
        except Exception as error:
            raise CheckpointError(
                f"The checkpoint in {self.folder} is truncated or corrupted ({type(error).__name__}: {error}); "
                f"delete the folder to start over."
            ) from error
        return int(meta["step"]), History.from_dict(meta["history"])


def train(
    model: nn.Module,
    loss_fn: LossFn,
    optimizers: Sequence[torch.optim.Optimizer],
    *,
    n_steps: int,
    generator: torch.Generator,
    callbacks: Sequence[Callback] = (),
    history: History | None = None,
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
    desc: str = "training",
) -> History:
    """Run ``n_steps`` optimiser steps; log ``loss`` each step, then call each callback.

    With a ``checkpointer`` the run first resumes from its latest checkpoint and saves every
    ``checkpointer.every`` steps and at the end. A NaN/inf loss raises :class:`TrainingDiverged`
    before the bad step is applied.
    """
    if n_steps < 0:
        raise ToyConfigError(f"n_steps must be >= 0; got {n_steps}.")
    history = history if history is not None else History()
    start = 0
    if checkpointer is not None:
        restored = checkpointer.restore(model, optimizers, generator)
        if restored is not None:
            start, history = restored
            log.info("resumed from step %d in %s", start, checkpointer.folder)
    model.train()
    for step in tqdm(range(start + 1, n_steps + 1), initial=start, total=n_steps, desc=desc, disable=not progress):
        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(step, generator)
        if not torch.isfinite(loss):
            where = f"; the last good checkpoint is in {checkpointer.folder}" if checkpointer else ""
            raise TrainingDiverged(
                f"The loss became {loss.item()} at step {step}{where}. Lower the learning rates."
            )
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
        history.log(step, loss=loss.item())
        for callback in callbacks:
            callback(step, model, history)
        if checkpointer is not None and (step % checkpointer.every == 0 or step == n_steps):
            checkpointer.save(step, model, optimizers, generator, history)
    model.eval()
    return history
