"""The probe contract and the machinery that runs it: batches, the runner, results, model loading,
the kind of model held (TransformerLens 3.9 or 4.x), sharding, query-block attention for long sequences, errors.

Modules: atomic, attention_rows, batch, checkpoint_series, distributed, errors, loading, model_info, model_kind,
out_of_memory (halving work that ran out of memory), pattern_sums, probe, result, runner.
"""

from probes.core.batch import TokenBatch, as_token_batch
from probes.core.checkpoint_series import Checkpoint, CheckpointSeries, checkpoint_series
from probes.core.errors import ConfigError, InputError, MechprobeError, ModelError, ProbeStateError
from probes.core.loading import PACKAGED_MODELS, load_model
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.probe import LayerwiseProbe, Probe
from probes.core.result import ProbeResult, Provenance
from probes.core.runner import capture, feed_probes, run_probes

__all__ = [
    "PACKAGED_MODELS", "Checkpoint", "CheckpointSeries", "ConfigError", "InputError", "LayerwiseProbe",
    "MechprobeError", "ModelError", "ModelInfo",
    "Probe", "ProbeResult", "ProbeStateError", "Provenance", "TokenBatch", "as_token_batch", "capture",
    "checkpoint_series", "feed_probes", "load_model", "pattern_hook", "run_probes",
]
