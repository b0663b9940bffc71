"""The whole training state kept at chosen steps, so that a later run can start again from any of them.

A checkpoint series saves only the model at its steps; to put more checkpoints between two of them (where a curve
rises) the training between them is run again from the earlier one's state. :class:`StepStates` keeps that state
(weights, optimisers, the data generator, the loss history) at each chosen step in ``folder/step_N/``, one
:class:`toymodels.training.Checkpointer` folder each, and :meth:`StepStates.resume_from` copies one of them to a
scratch folder whose checkpointer resumes :func:`toymodels.training.train` there. The loop then draws the same
batches from the same generator state, so the re-run follows the first run's trajectory step for step on the same
machine and thread count; :meth:`StepStates.weights` gives the weights a later step had, for the caller to check
that it does.

Example::

    states = StepStates(out / "states", steps={0, 100, 1000}, fingerprint=settings_json)
    train(model, loss_fn, [optimizer], n_steps=1000, generator=generator, state_callbacks=[states])
    checkpointer = states.resume_from(100, out / "rerun")  # train(..., n_steps=400, checkpointer=checkpointer)
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

import torch
from torch import Tensor, nn

from mechprobe.validation import is_integer
from toymodels.errors import CheckpointError
from toymodels.training import Checkpointer, History, OptimizerLike

THREADS_FILE = "threads.json"


class StepStates:
    """The training state at ``steps`` (module docstring), each in ``folder/step_N`` with ``fingerprint`` (the
    run's settings: a state made with other settings is refused on resuming). An instance is a state callback of
    :func:`toymodels.training.train`; :meth:`save` keeps a state at any other step (step 0, before training)."""

    def __init__(self, folder: str | Path, *, steps: Collection[int], fingerprint: str) -> None:
        self.folder = Path(folder)
        self.steps = frozenset(steps)
        self.fingerprint = fingerprint

    def _checkpointer(self, step: int) -> Checkpointer:
        return Checkpointer(self.folder / f"step_{step}", every=1, fingerprint=self.fingerprint,
                            fix="The series' kept training states are damaged: train the series again with the "
                                "command that made it to refine it, or leave --refine out.")

    def __call__(self, step: int, model: nn.Module, optimizers: Sequence[OptimizerLike], generator: torch.Generator,
                 history: History) -> None:
        if step in self.steps:
            self.save(step, model, optimizers, generator, history)

    def save(self, step: int, model: nn.Module, optimizers: Sequence[OptimizerLike], generator: torch.Generator,
             history: History) -> None:
        """Keep the state of ``step`` (replacing one kept before), and the torch thread count it was made with."""
        self._checkpointer(step).save(step, model, optimizers, generator, history)
        (self.folder / THREADS_FILE).write_text(json.dumps({"torch_threads": torch.get_num_threads()}))

    def threads(self) -> int | None:
        """The torch thread count the states were made with (None: not recorded); a re-run uses it, since the sums
        of a matrix product may round differently on another count."""
        path = self.folder / THREADS_FILE
        if not path.is_file():
            return None
        try:
            value = json.loads(path.read_text(encoding="utf-8")).get("torch_threads")
        except (ValueError, AttributeError):
            value = None
        if not is_integer(value) or value < 1:
            raise CheckpointError(f"{path} does not hold a thread count (torch_threads >= 1); delete it to re-run "
                                  f"with this process's thread count.")
        return value

    def saved(self) -> tuple[int, ...]:
        """The steps whose state is kept, in order."""
        if not self.folder.is_dir():
            return ()
        steps = (int(p.name.removeprefix("step_")) for p in self.folder.glob("step_*")
                 if p.name.removeprefix("step_").isdigit() and (p / "checkpoint.json").is_file())
        return tuple(sorted(steps))

    def _require(self, step: int) -> Checkpointer:
        if step not in self.saved():
            raise CheckpointError(f"No training state of step {step} is kept in {self.folder / f'step_{step}'} "
                                  f"(kept: {list(self.saved()) or 'none'}). Train the series again with this "
                                  f"version to keep the state at every saved step.")
        return self._checkpointer(step)

    def check(self, steps: Collection[int]) -> None:
        """Every file of the states of ``steps`` read and checked (and the thread count), changing nothing: a
        missing or damaged one raises :class:`CheckpointError` naming it, before any re-run starts."""
        self.threads()
        for step in sorted(steps):
            checkpointer = self._require(step)
            if checkpointer.verify() != step:
                raise CheckpointError(f"{checkpointer.meta_path} holds the state of another step than {step}; "
                                      f"train the series again with the command that made it to refine it.")

    def weights(self, step: int) -> dict[str, Tensor]:
        """The model weights kept for ``step``."""
        weights = self._require(step).saved_weights()
        assert weights is not None  # _require found its checkpoint.json
        return weights

    def resume_from(self, step: int, scratch: str | Path) -> Checkpointer:
        """A checkpointer in ``scratch`` (emptied first) holding the state of ``step``: :func:`train` with it
        resumes from that step, and saves there only at its end (or when stopped by SIGTERM)."""
        source = self._require(step).folder
        scratch = Path(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.copytree(source, scratch)
        return Checkpointer(scratch, every=sys.maxsize, fingerprint=self.fingerprint)
