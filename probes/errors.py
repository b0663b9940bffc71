"""Exceptions a user can cause. Each message says what was expected, what was got and how to fix it."""

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
