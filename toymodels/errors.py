"""The errors toy models and their training raise (defined in :mod:`mechprobe.errors`, so each is a MechprobeError)."""

from mechprobe.errors import CheckpointError, ToyConfigError, TrainingDiverged, TrainingInterrupted

__all__ = ["CheckpointError", "ToyConfigError", "TrainingDiverged", "TrainingInterrupted"]
