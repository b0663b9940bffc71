"""Statistics that make a finding fail when it should: bootstrap intervals, permutation and sign-flip nulls,
sequential nulls, power, confidence sequences, verdicts, random-weight control models.

Modules: bootstrap, confidence_sequence (intervals valid however often they are looked at), control_model,
findings (three verdicts: holds, absent, inconclusive), nulls, power (the units a design needs), sequential
(Monte Carlo p-values that stop drawing once the decision is known). ``__all__`` is the public API; the modules'
other names are the pieces these are built from.
"""

from probes.stats.bootstrap import BatchStateRecorder, bootstrap_draws, bootstrap_interval, percentile_interval
from probes.stats.confidence_sequence import mean_sequence, sequence_from_interval
from probes.stats.control_model import random_weight_control
from probes.stats.findings import Finding, adjust_family
from probes.stats.nulls import (
    fixed_sequence_adjust,
    holm_adjust,
    label_permutations,
    permutation_p_value,
    sign_flip_p_value,
)
from probes.stats.power import detectable_distance, units_for_power
from probes.stats.sequential import SequentialNull, SequentialRule, sequential_null

__all__ = [
    "BatchStateRecorder", "Finding", "SequentialNull", "SequentialRule", "adjust_family", "bootstrap_draws",
    "bootstrap_interval", "detectable_distance", "fixed_sequence_adjust", "holm_adjust", "label_permutations",
    "mean_sequence", "percentile_interval", "permutation_p_value", "random_weight_control", "sequence_from_interval",
    "sequential_null", "sign_flip_p_value", "units_for_power",
]
