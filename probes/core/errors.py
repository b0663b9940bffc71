"""The errors probes raise (defined in :mod:`mechprobe.errors`, shared with toymodels and analyses)."""

from mechprobe.errors import ConfigError, InputError, MechprobeError, ModelError, ProbeStateError

__all__ = ["ConfigError", "InputError", "MechprobeError", "ModelError", "ProbeStateError"]
