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
    """Write ``payload`` to a temporary file beside ``path``, fsync it, rename it over ``path``.

    A crash (or SIGKILL) at any point leaves either the old file or the new one under ``path``,
    never a partial one; the temporary ``.NAME.*.tmp`` is removed on errors raised here.
    """
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
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened, e.g. Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


#CHECKPOINTER
