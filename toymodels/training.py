"""A small training loop shared by the toy models: per-step callbacks, history, resumable checkpoints.

The loop owns one ``torch.Generator`` for data sampling; its state is checkpointed with the model
and the optimisers, so a run resumed from a checkpoint ends with the same weights and history as
an uninterrupted one.

The generator is a CPU generator: data is sampled on the CPU (so a run is the same on every
device up to float rounding) and each loss function moves its batch to :func:`model_device`.

Example::

    history = train(model, loss_fn, optimizers, n_steps=100, generator=torch.Generator().manual_seed(0))
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import pickle
import secrets
import signal
import threading
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors.torch import load_file
from safetensors.torch import save as save_safetensors
from torch import Tensor, nn
from tqdm.auto import tqdm

from mechprobe import records
from mechprobe.atomic import atomic_file
from mechprobe.errors import RecordError, terminate_as_interrupt
from toymodels.errors import CheckpointError, ToyConfigError, TrainingDiverged, TrainingInterrupted

log = logging.getLogger(__name__)

LossFn = Callable[[int, torch.Generator], Tensor]
"""``loss_fn(step, generator) -> scalar loss``: draws its batch from ``generator``."""

Callback = Callable[[int, nn.Module, "History"], None]
"""``callback(step, model, history)`` runs after every optimiser step (``step`` counts from 1)."""

StateCallback = Callable[[int, nn.Module, Sequence["OptimizerLike"], torch.Generator, "History"], None]
"""``state_callback(step, model, optimizers, generator, history)`` runs after the callbacks of every step and sees
the whole training state (e.g. :class:`toymodels.step_states.StepStates`, which keeps it at chosen steps)."""


class OptimizerLike(Protocol):
    """What :func:`train` and :class:`Checkpointer` use of an optimiser: a ``torch.optim.Optimizer``, or an
    object with the same methods (e.g. :class:`toymodels.scansnap.word_lm.TutorialSGD`)."""

    def zero_grad(self, set_to_none: bool = True) -> None: ...

    def step(self) -> object: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


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

    def save(self, path: str | os.PathLike) -> None:
        """Write the history as strict JSON (:mod:`mechprobe.records`; a NaN value as null)."""
        _atomic_write_bytes(Path(path), records.to_json(self, indent=None).encode())

    @classmethod
    def load(cls, path: str | os.PathLike) -> History:
        return records.load(cls, records.strict_json(Path(path).read_text()), where=str(path))


def _atomic_write_bytes(path: Path, payload: bytes) -> None:
    """Write ``payload`` to a temporary file beside ``path``, fsync it, rename it over ``path``.

    A crash (or SIGKILL) at any point leaves either the old file or the new one under ``path``,
    never a partial one; the temporary ``.NAME.*.tmp`` (:func:`mechprobe.atomic.atomic_file`) is removed on
    errors and interrupts raised here.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path, fsync=True, keep_suffix=False) as tmp:  # .NAME.XXXX.tmp: _OWNED's pattern
        tmp.write_bytes(payload)
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


_META = "checkpoint.json"
_OWNED = ("weights-*.safetensors", "state-*.pt", ".*.tmp")
"""Files a checkpoint folder may hold besides ``checkpoint.json``; those it does not name are removed."""


class Checkpointer:
    """Saves and restores model, optimisers, data generator, history and step in one folder.

    Files: ``weights-STEP-TAG.safetensors`` (the model's state dict), ``state-STEP-TAG.pt`` (the
    optimisers' states and the generator's state: tensors and numbers only, read back with
    ``torch.load(weights_only=True)``) and ``checkpoint.json`` (step, the two file names, history,
    fingerprint). Each file is written under a temporary name, fsynced and renamed;
    ``checkpoint.json`` is renamed last, so a crash or kill at any moment leaves the previous
    complete checkpoint in force. Files the new ``checkpoint.json`` does not name (the previous
    checkpoint, temporaries of a killed run) are removed after it is in place. A damaged
    checkpoint raises :class:`CheckpointError` naming the bad file.
    """

    def __init__(self, folder: str | os.PathLike, *, every: int, fingerprint: str = "", fix: str = "") -> None:
        if every < 1:
            raise ToyConfigError(f"checkpoint every must be >= 1 step; got {every}.")
        self.folder = Path(folder)
        self.every = every
        self.fingerprint = fingerprint
        self.fix = fix or f"Delete the folder {self.folder} to start training from scratch."

    @property
    def meta_path(self) -> Path:
        return self.folder / _META

    def save(self, step: int, model: nn.Module, optimizers: Sequence[OptimizerLike],
             generator: torch.Generator, history: History) -> None:
        """Write a checkpoint of ``step``; it replaces the previous one only once complete."""
        tag = f"{step}-{secrets.token_hex(4)}"
        weights, state = f"weights-{tag}.safetensors", f"state-{tag}.pt"
        tensors = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
        buffer = io.BytesIO()
        torch.save({"optimizers": [o.state_dict() for o in optimizers], "generator": generator.get_state()}, buffer)
        meta = {"step": step, "weights": weights, "state": state, "fingerprint": self.fingerprint,
                "history": records.dump(history)}
        try:
            _atomic_write_bytes(self.folder / weights, save_safetensors(tensors))
            _atomic_write_bytes(self.folder / state, buffer.getvalue())
            _atomic_write_bytes(self.meta_path, json.dumps(meta).encode())
        except BaseException:  # the previous checkpoint stays in force; drop the new files it does not name
            if not self._names(weights):  # stopped after checkpoint.json was renamed: the new one is in force
                for name in (weights, state):
                    (self.folder / name).unlink(missing_ok=True)
            raise
        for pattern in _OWNED:
            for path in self.folder.glob(pattern):
                if path.name not in (weights, state):
                    path.unlink(missing_ok=True)

    def _names(self, weights: str) -> bool:
        """The ``checkpoint.json`` in force names the weights file ``weights`` (an interrupt after its rename,
        while the folder was synced, left the new checkpoint in force: its files are kept)."""
        try:
            return json.loads(self.meta_path.read_text(encoding="utf-8")).get("weights") == weights
        except (OSError, ValueError, AttributeError):
            return False

    def _bad(self, path: Path, problem: str) -> CheckpointError:
        return CheckpointError(f"Checkpoint file {path} {problem}. {self.fix}")

    def _read_meta(self) -> dict[str, Any] | None:
        path = self.meta_path
        if not path.is_file():
            return None
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except ValueError as error:  # JSONDecodeError and UnicodeDecodeError
            raise self._bad(path, f"is not valid JSON ({_one_line(error)})") from error
        names_ok = isinstance(meta, dict) and all(
            isinstance(meta.get(key), str) and Path(meta[key]).name == meta[key] and meta[key].startswith(key)
            for key in ("weights", "state"))
        step = meta.get("step") if isinstance(meta, dict) else None
        if not (names_ok and type(step) is int and step >= 0 and isinstance(meta.get("history"), dict)):
            raise self._bad(path, "does not hold a step, the weights and state file names and a history")
        return meta

    def _load_weights(self, path: Path, model: nn.Module) -> dict[str, Tensor]:
        if not path.is_file():
            raise self._bad(path, "(the model weights) is missing")
        try:
            tensors = load_file(str(path))
        except Exception as error:  # safetensors raises SafetensorError for every malformed file
            raise self._bad(path, f"is not a readable safetensors file ({_one_line(error)})") from error
        expected = model.state_dict()
        missing = sorted(expected.keys() - tensors.keys())
        unexpected = sorted(tensors.keys() - expected.keys())
        reshaped = sorted(k for k in expected.keys() & tensors.keys() if tensors[k].shape != expected[k].shape)
        if missing or unexpected or reshaped:
            problems = [f"{label}: {', '.join(keys[:3])}" for label, keys in
                        (("missing", missing), ("unexpected", unexpected), ("other shape", reshaped)) if keys]
            raise self._bad(path, f"holds weights that do not fit this model ({'; '.join(problems)})")
        return tensors

    def _load_state(self, path: Path, n_optimizers: int | None) -> dict[str, Any]:
        """The state file read and checked (``n_optimizers`` states; None: any number)."""
        if not path.is_file():
            raise self._bad(path, "(the optimiser and data-generator state) is missing")
        if not zipfile.is_zipfile(path):
            raise self._bad(path, "is truncated or corrupted (not a complete torch.save archive)")
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as error:
            if "GLOBAL" in str(error):  # a class or function reference, which weights_only refuses to import
                raise self._bad(path, "holds Python objects that safe loading (torch.load with weights_only=True) "
                                      "refuses") from error
            raise self._bad(path, f"is truncated or corrupted ({_one_line(error)})") from error
        except Exception as error:  # truncated zip archives and garbage raise RuntimeError and others
            raise self._bad(path, f"is truncated or corrupted ({_one_line(error)})") from error
        ok = (isinstance(state, dict) and isinstance(state.get("optimizers"), list)
              and len(state["optimizers"]) == (n_optimizers if n_optimizers is not None else len(state["optimizers"]))
              and all(isinstance(s, dict) for s in state["optimizers"])
              and isinstance(state.get("generator"), Tensor) and state["generator"].dtype == torch.uint8)
        if not ok:
            raise self._bad(path, f"does not hold {n_optimizers or 'its'} optimiser state(s) and a data-generator "
                                  f"state")
        return state

    def verify(self) -> int | None:
        """Read every file of the checkpoint in force and check it is whole, changing nothing; its step (None when
        there is none). A damaged file raises :class:`CheckpointError` naming it."""
        meta = self._read_meta()
        if meta is None:
            return None
        self.saved_weights()
        self._load_state(self.folder / meta["state"], None)
        try:
            records.load(History, meta["history"], where="history")
        except RecordError as error:
            raise self._bad(self.meta_path, f"holds a malformed history ({_one_line(error)})") from error
        return int(meta["step"])

    def saved_weights(self) -> dict[str, Tensor] | None:
        """The model weights of the checkpoint in force, as saved (None when there is none); changes nothing."""
        meta = self._read_meta()
        if meta is None:
            return None
        path = self.folder / meta["weights"]
        if not path.is_file():
            raise self._bad(path, "(the model weights) is missing")
        try:
            return load_file(str(path))
        except Exception as error:  # safetensors raises SafetensorError for every malformed file
            raise self._bad(path, f"is not a readable safetensors file ({_one_line(error)})") from error

    def restore(self, model: nn.Module, optimizers: Sequence[OptimizerLike],
                generator: torch.Generator) -> tuple[int, History] | None:
        """Load the latest checkpoint into the objects; return ``(step, history)``, or None if there is none.

        Every file is read and checked before any object is changed. Files are read on the CPU;
        the weights and optimiser states land on the device of the model's parameters.
        """
        meta = self._read_meta()
        if meta is None:
            return None
        if meta.get("fingerprint") != self.fingerprint:
            raise CheckpointError(
                f"The checkpoint in {self.folder} was made with other settings; write the run to another "
                f"folder or delete this one to start over."
            )
        tensors = self._load_weights(self.folder / meta["weights"], model)
        state = self._load_state(self.folder / meta["state"], len(optimizers))
        try:
            history = records.load(History, meta["history"], where="history")
        except RecordError as error:
            raise self._bad(self.meta_path, f"holds a malformed history ({_one_line(error)})") from error
        for optimizer, saved in zip(optimizers, state["optimizers"]):
            try:
                optimizer.load_state_dict(saved)
            except (KeyError, TypeError, ValueError, RuntimeError) as error:
                raise self._bad(self.folder / meta["state"], f"holds optimiser states that do not fit these "
                                f"optimisers ({_one_line(error)})") from error
        try:
            generator.set_state(state["generator"])
        except (RuntimeError, TypeError) as error:
            raise self._bad(self.folder / meta["state"],
                            f"holds a bad data-generator state ({_one_line(error)})") from error
        model.load_state_dict(tensors)
        return meta["step"], history


def _one_line(error: BaseException) -> str:
    """The first sentence of an error's message (library messages can run over many lines)."""
    lines = str(error).strip().splitlines()
    text = lines[0] if lines else type(error).__name__
    return text.split(". ")[0].rstrip(".")[:200]


class _SigtermStop:
    """While active, SIGTERM only sets ``requested``; the loop then saves, and stops.

    Installed only in the main thread and only where SIGTERM still has its default action or the ``mechprobe``
    command's (:func:`mechprobe.errors.terminate_as_interrupt`; another application's own handler is left alone).
    A SIGTERM that arrives after the loop's last check
    is re-delivered with the default action on exit, so the process still ends.
    """

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.requested = False
        self._previous: Any = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True

    def __enter__(self) -> _SigtermStop:
        if (self.enabled and threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, terminate_as_interrupt)):
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, kind: Any, error: Any, traceback: Any) -> None:
        if self._previous is None:
            return
        signal.signal(signal.SIGTERM, self._previous)
        if self.requested and kind is None:
            signal.raise_signal(signal.SIGTERM)


def _all_finite(params: Sequence[Tensor]) -> bool:
    """Whether every entry of ``params`` is finite: whether each tensor's smallest and largest entries are (a NaN
    makes both NaN, an infinity one of them), one ``aminmax`` a tensor, several times quicker than ``isfinite``."""
    return all(math.isfinite(float(extreme)) for p in params if p.numel() for extreme in torch.aminmax(p.detach()))


def _diverged(what: str, step: int, checkpointer: Checkpointer | None, saved_step: int | None) -> TrainingDiverged:
    if checkpointer is None:
        kept = ""
    elif saved_step is None:
        kept = f" No checkpoint was saved before it (one is saved every {checkpointer.every} steps)."
    else:
        kept = (f" The last good checkpoint (step {saved_step}) is kept in {checkpointer.folder}; delete that "
                f"folder before running with other settings.")
    return TrainingDiverged(f"Training diverged: {what} at step {step}.{kept} Lower the learning rates and run again.",
                            cause=f"{what} at step {step}")


def train(
    model: nn.Module,
    loss_fn: LossFn,
    optimizers: Sequence[OptimizerLike],
    *,
    n_steps: int,
    generator: torch.Generator,
    callbacks: Sequence[Callback] = (),
    history: History | None = None,
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
    desc: str = "training",
    state_callbacks: Sequence[StateCallback] = (),
) -> History:
    """Run ``n_steps`` optimiser steps; log ``loss`` each step, then call each callback, then each state callback.

    With a ``checkpointer`` the run first resumes from its latest checkpoint and saves every
    ``checkpointer.every`` steps and at the end. Divergence raises :class:`TrainingDiverged`:
    a NaN/inf loss before the bad step is applied, non-finite weights right after it; nothing
    non-finite is ever saved, so the folder keeps the last good checkpoint. With a checkpointer,
    SIGTERM (e.g. from a job scheduler) lets the current step finish, saves it and raises
    :class:`TrainingInterrupted`; SIGKILL loses at most the steps since the last checkpoint.
    """
    if n_steps < 0:
        raise ToyConfigError(f"n_steps must be >= 0; got {n_steps}.")
    history = history if history is not None else History()
    start, saved_step = 0, None
    if checkpointer is not None:
        restored = checkpointer.restore(model, optimizers, generator)
        if restored is not None:
            start, history = restored
            saved_step = start
            log.info("resumed from step %d in %s", start, checkpointer.folder)
    params = list(model.parameters())
    model.train()
    with _SigtermStop(enabled=checkpointer is not None) as stop:
        for step in tqdm(range(start + 1, n_steps + 1), initial=start, total=n_steps, desc=desc,
                         disable=not progress):
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(step, generator)
            value = loss.item()
            if not math.isfinite(value):
                raise _diverged(f"the loss became {value}", step, checkpointer, saved_step)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
            if not _all_finite(params):
                raise _diverged(f"the weights became non-finite (the loss was {value:.4g})", step, checkpointer,
                                saved_step)
            history.log(step, loss=value)
            for callback in callbacks:
                callback(step, model, history)
            for state_callback in state_callbacks:
                state_callback(step, model, optimizers, generator, history)
            if checkpointer is not None and (step % checkpointer.every == 0 or step == n_steps or stop.requested):
                checkpointer.save(step, model, optimizers, generator, history)
                saved_step = step
                if stop.requested:  # only ever set with a checkpointer
                    raise TrainingInterrupted(
                        f"Training stopped by SIGTERM after step {step} of {n_steps}; the checkpoint in "
                        f"{checkpointer.folder} holds it. Run the same command again to resume."
                    )
    model.eval()
    return history
