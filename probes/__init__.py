"""mechprobe's probes: model-agnostic analysis of any hooked TransformerLens model.

Public API::

    model = probes.load_model("smollm2-135m")
    scores = probes.head_scores(model)                 # repeated-random-token protocol
    results = probes.run_probes(model, [probes.HeadScoreProbe()], batches)
"""

from probes.batch import TokenBatch, as_token_batch
from probes.errors import ConfigError, InputError, MechprobeError, ModelError, ProbeStateError
from probes.head_scores import HEAD_SCORE_KINDS, HeadScoreProbe, HeadScores, head_scores, target_mask
from probes.loading import PACKAGED_MODELS, load_model
from probes.model_info import ModelInfo, pattern_hook
from probes.probe import Probe
from probes.repeated_tokens import repeated_random_tokens
from probes.result import ProbeResult, Provenance
from probes.runner import capture, feed_probes, run_probes

__all__ = [
    "HEAD_SCORE_KINDS",
    "PACKAGED_MODELS",
    "ConfigError",
    "HeadScoreProbe",
    "HeadScores",
    "InputError",
    "MechprobeError",
    "ModelError",
    "ModelInfo",
    "Probe",
    "ProbeResult",
    "ProbeStateError",
    "Provenance",
    "TokenBatch",
    "as_token_batch",
    "capture",
    "feed_probes",
    "head_scores",
    "load_model",
    "pattern_hook",
    "repeated_random_tokens",
    "run_probes",
    "target_mask",
]
