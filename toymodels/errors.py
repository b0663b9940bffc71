"""Errors a user can cause in the toy models (bad settings, bad checkpoints)."""

from __future__ import annotations


class ToyConfigError(ValueError):
    """A toy-model or data setting is out of range; the message says the allowed range."""


class CheckpointError(RuntimeError):
    """A checkpoint is missing, truncated, corrupted or belongs to another configuration."""


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good checkpoint (if any) is kept."""


class TrainingInterrupted(RuntimeError):
    """SIGTERM stopped training after the current step was saved; the same command resumes it."""
