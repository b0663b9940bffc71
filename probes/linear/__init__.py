"""Linear probes on the residual stream: the reservoir probe, its label makers, grouped
cross-validated fitting with a control task, and which hooks hold the residual stream.

Modules: fit, labels, probe, residual_hooks.
"""

from probes.linear.labels import (
    CombinedLabels,
    LabelMaker,
    PreviousTokenLabels,
    RowLabels,
    TokenClassLabels,
    most_frequent_tokens,
)
from probes.linear.probe import LinearProbe, LinearProbeScores
from probes.linear.residual_hooks import residual_hooks

__all__ = [
    "CombinedLabels", "LabelMaker", "LinearProbe", "LinearProbeScores", "PreviousTokenLabels", "RowLabels",
    "TokenClassLabels", "most_frequent_tokens", "residual_hooks",
]
