"""Every error a user can cause, in one hierarchy. Each message says what was expected, what was got and how to fix it.

``probes`` re-exports the probe errors from :mod:`probes.core.errors` and ``toymodels`` the training errors
from :mod:`toymodels.errors`; catching :class:`MechprobeError` catches all of them.
"""

from __future__ import annotations


class MechprobeError(Exception):
    """Base class of every error mechprobe raises for bad user input or environment."""


class ConfigError(MechprobeError, ValueError):
    """A setting is missing, unknown or out of range."""


class InputError(MechprobeError, ValueError):
    """Tokens, batches, corpora or labels have the wrong type, shape or content."""


class ModelError(MechprobeError):
    """A model cannot be loaded, or it lacks what a probe needs (hooks, config fields)."""


class ProbeStateError(MechprobeError, RuntimeError):
    """A probe was used out of order: computed before any data, merged with an incompatible probe."""


class ToyConfigError(ConfigError):
    """A toy-model or data setting is out of range; the message says the allowed range."""


class CheckpointError(MechprobeError, RuntimeError):
    """A checkpoint is missing, truncated, corrupted or belongs to another configuration."""


class TrainingDiverged(MechprobeError, RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint (if any) is kept. ``cause`` is what happened
    (``"the loss became nan at step 3"``), for a command that words its own advice around it."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


class TrainingInterrupted(MechprobeError, RuntimeError):
    """SIGTERM stopped training after the current step was saved; the same command resumes it."""


class RecordError(InputError):
    """A saved document does not hold the record it should: a key unknown or missing, a value of the wrong type."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, ``timeout``, a job scheduler) taken as a Ctrl-C while a ``mechprobe`` command runs
    (:func:`terminate_as_interrupt`): what the command was writing is cleaned up or kept to resume as after a Ctrl-C,
    and it exits 143 in one line."""


def terminate_as_interrupt(signum: int, frame: object) -> None:
    """The SIGTERM handler of a running command: raise :class:`Terminated`. Toy training replaces it while it
    trains, to save the current step first (:class:`toymodels.training.Checkpointer`), and puts it back."""
    raise Terminated
