"""Statistics that make a finding fail when it should: bootstrap intervals, permutation nulls,
verdicts, random-weight control models.

Modules: bootstrap, control_model, findings (three verdicts: holds, absent, inconclusive), nulls, sequential
(Monte Carlo p-values that stop drawing once the decision is known).
"""

from probes.stats.control_model import random_weight_control
from probes.stats.findings import Finding, adjust_family
from probes.stats.nulls import holm_adjust, label_permutations, permutation_p_value
from probes.stats.sequential import SequentialNull, SequentialRule, sequential_null

__all__ = [
    "Finding", "SequentialNull", "SequentialRule", "adjust_family", "holm_adjust", "label_permutations",
    "permutation_p_value", "random_weight_control", "sequential_null",
]
