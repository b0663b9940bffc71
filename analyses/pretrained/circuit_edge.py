"""The report's circuit finding, ``previous_token_to_induction_k_composition``: does the top previous-token head
feed the top induction head's keys (K-composition, Elhage et al. 2021; Olsson et al. 2022)?

The receiver is the best induction head on the even protocol batches ([BOS] X X), the sender the best
previous-token head on the even text batches in a layer below the receiver's (the heads the report's other findings
chose, on data this one does not measure). On ``sequences`` fresh repeated random sequences (``seq_len`` tokens
repeated once, drawn from ``seed + 1`` like the head ablations' sequences) the sender's output is mean-replaced in
the receiver's keys only, everything else clean (path patching, :func:`probes.causal.edge_effect`); the statistic is
the receiver's induction score drop: its attention mass on the induction targets (the token after an earlier copy
of the query's token), clean minus patched, per query of the repeated half, with a 95% bootstrap interval over
sequences. The null is the same drop for random edges at the same layer distance through the receiver's keys
(sharing no head with the measured edge), drawn ten at a time up to ``draws`` and stopped once the decision at 0.01
is known (:func:`probes.causal.edge_with_null`); the control is the random-weight model's same edge, measured on the
same sequences. The finding is a family of its own (one test, so its adjusted p is its p). Threshold
(:data:`analyses.pretrained.findings.THRESHOLDS_TEXT`, :data:`probes.causal.edge_null.MIN_EFFECT`): 0.1 of
attention mass above the larger of the null's 99th percentile and the control, as for the head scores.

The edge's own loss change on the repeated half (nats per token, with its interval) is measured beside it and
reported as a number, not judged: the null's edges are measured on the receiver's score alone (``null_loss=False``),
which skips, per random edge, the pass from its receiver's layer to the loss. Why the score and not the loss: the
question is whether the sender feeds the receiver's keys, which the receiver's own attention answers directly; how
much of the model's loss rides on that one connection is another question (other heads may carry the same
information, as the induction toy's one copier feeds every layer-2 head, :mod:`analyses.induction.edge`).

Cost: the edge runs its receiver's layer to the loss once; each random edge runs its sender's and its receiver's
attention only, and each edge pays a fixed few forwards (the sender's means, the clean pass, the route's check). On
SmolLM2-135M, one thread, the edge and its 100 draws cost 7.6 forwards of the 6 measured sequences in FLOPs (10.8 in
time) and the control's edge (its null stopped after 10 draws) 6.6 (7.9): 14.1 forwards in FLOPs, 18.7 in time,
where a null of both effects alone cost 59.7 (71.3) (``benchmarks/edge_cost.py``, benchmarks/RESULTS.md section
22). So the finding is on by default; ``--set pretrained.circuit.enabled=false`` turns it off (``mechprobe
circuit`` measures more edges).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from analyses.pretrained.findings import CIRCUIT_FINDING, finding_from_spec
from mechprobe.validation import integer
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.causal import EdgeEffect, edge_effect, repeated_half
from probes.causal.ablation import ABLATION_METHODS
from probes.causal.edge_plan import EdgePlan
from probes.causal.edges import check_edge_hooks
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.stats.findings import ALPHA, Finding

Head = tuple[int, int]
EFFECT = "score_drop"
"""The effect the finding judges (:data:`probes.causal.EFFECTS`): the receiver's induction score drop; the edge's
loss change is kept beside it, with its interval, unjudged (module docstring)."""


@dataclass(frozen=True)
class CircuitConfig:
    """Whether (``enabled``: on by default; its cost is in the module docstring) and how the circuit finding is
    measured: ``sequences`` rows of [BOS] X X (|X| = ``seq_len``), the sender
    replaced by ``method`` in the receiver's keys, beside up to ``draws`` random edges (at least 100: the fewest
    whose p-value, ``1 / (draws + 1)`` at best, can fall below 0.01); ``max_rows`` rows per forward pass."""

    enabled: bool = True
    draws: int = 100
    method: str = "mean"
    seq_len: int = 16
    sequences: int = 6
    max_rows: int = 256

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"circuit.enabled must be true or false; got {self.enabled!r}.")
        if self.method not in ABLATION_METHODS:
            raise ConfigError(f"circuit.method must be one of {', '.join(ABLATION_METHODS)}; got {self.method!r}.")
        for name, low in (("draws", 100), ("seq_len", 4), ("sequences", 2), ("max_rows", 1)):
            integer(f"circuit.{name}", getattr(self, name), low)


@dataclass(frozen=True)
class CircuitMeasurement:
    """The measured edge (:class:`probes.causal.EdgeEffect`: both effects, their intervals, the null's draws and
    edges) and how its heads were chosen: ``chosen_by`` and the sender's and receiver's ``selection_scores``."""

    edge: EdgeEffect
    chosen_by: str
    selection_scores: tuple[float, float]

    def heads(self) -> tuple[Head, Head, tuple[float, float]]:
        """``(sender, receiver, selection scores)``, as :func:`circuit_heads` gave them."""
        (ls, hs), (lr, hr) = self.edge.sender, self.edge.receiver
        return (ls, hs), (lr, hr), self.selection_scores

    def finding(self, control: CircuitMeasurement | None = None) -> Finding:
        """The finding on the receiver's score drop, beside ``control``'s same edge when given (a control's own
        finding is judged against its null only)."""
        own = self.edge.finding(EFFECT, None if control is None else control.edge)
        spec = finding_from_spec(CIRCUIT_FINDING, own.value, own.ci, own.null_value, own.p_value,
                                 n_units=own.n_units)
        statistic = spec.statistic.replace("mean-replaced", f"{self.edge.method}-replaced")
        return replace(own, statistic=f"{statistic} ({self.edge.name.removesuffix(' (k)')})",
                       null_kind=spec.null_kind, selection=spec.selection, min_effect=spec.min_effect,
                       p_adjusted=own.p_value)


def circuit_heads(previous_token: Sequence[tuple[int, int, float]], induction: Sequence[tuple[int, int, float]]
                  ) -> tuple[Head, Head, tuple[float, float]] | None:
    """``(sender, receiver, (sender score, receiver score))``: the best induction head and the best
    previous-token head in a layer below it (each list best first, as ``top_heads`` gives them); None when no
    previous-token head of the list lies below the receiver."""
    if not induction or not math.isfinite(induction[0][2]):
        return None
    layer, head, score = induction[0]
    below = [top for top in previous_token if top[0] < layer and math.isfinite(top[2])]
    if not below:
        return None
    return (below[0][0], below[0][1]), (layer, head), (float(below[0][2]), float(score))


def circuit_unavailable(model: HookedModel, info: ModelInfo, config: CircuitConfig,
                        heads: tuple[Head, Head, tuple[float, float]] | None) -> str:
    """Why the circuit finding is not measured on ``model`` (``""`` when it is)."""
    if not config.enabled:
        return ("not measured: turned off (--set pretrained.circuit.enabled=false); --set "
                "pretrained.circuit.enabled=true measures it")
    if not info.causal:
        return ("not measured: the edge is measured on next-token [BOS] X X sequences, its loss change beside "
                "the score, and this model is an encoder (its masked-token loss says nothing here)")
    if heads is None:
        return "not measured: no previous-token head lies in a layer below the best induction head"
    sender, receiver, _ = heads
    try:
        check_edge_hooks(model, EdgePlan.build(info, sender, receiver, input="k", method=config.method))
    except ModelError as error:
        return f"not measured: {error}"
    return ""


def circuit_protocol(info: ModelInfo, config: CircuitConfig, seed: int) -> list[TokenBatch]:
    """``config.sequences`` rows of [BOS] X X in one batch (the rows are the bootstrap's units), drawn from
    ``seed + 1``: apart from the protocol batches the receiver was chosen on."""
    generator = torch.Generator().manual_seed(seed + 1)
    return [repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=config.sequences, generator=generator)]


def measure_circuit(model: HookedModel, heads: tuple[Head, Head, tuple[float, float]], config: CircuitConfig, *,
                    n_boot: int, seed: int) -> CircuitMeasurement:
    """The edge ``heads`` names (:func:`circuit_heads`) on ``model`` through the receiver's keys, beside its null
    of random edges' score drops (module docstring)."""
    sender, receiver, scores = heads
    info = ModelInfo.of(model)
    edge = edge_effect(model, sender, receiver, circuit_protocol(info, config, seed),
                       slice_fn=repeated_half(config.seq_len), input="k", method=config.method, n_draws=config.draws,
                       seed=seed, n_boot=n_boot, max_rows=config.max_rows, stop_at=ALPHA, null_loss=False,
                       data=f"{config.sequences} repeated random sequences (seq_len={config.seq_len}, "
                            f"seed={seed + 1})")
    return CircuitMeasurement(edge, "previous-token score on the even text batches (sender, in a layer below the "
                              "receiver); induction score on the even protocol batches (receiver)", scores)


def circuit_of(model: HookedModel, config: CircuitConfig, heads: tuple[Head, Head, tuple[float, float]] | None, *,
               n_boot: int, seed: int) -> tuple[CircuitMeasurement | None, str]:
    """``(the measured edge, "")``, or ``(None, why not)`` (:func:`circuit_unavailable`)."""
    note = circuit_unavailable(model, ModelInfo.of(model), config, heads)
    if note or heads is None:
        return None, note
    return measure_circuit(model, heads, config, n_boot=n_boot, seed=seed), ""


def circuit_findings(measured: CircuitMeasurement | None, control: CircuitMeasurement | None
                     ) -> tuple[dict[str, Finding], dict[str, Finding]]:
    """``(findings, control_findings)``: the model's finding beside the control's same edge, and the control's own
    finding against its null only; empty where the edge was not measured."""
    if measured is None:
        return {}, {}
    control_findings = {} if control is None else {CIRCUIT_FINDING: control.finding()}
    return {CIRCUIT_FINDING: measured.finding(control)}, control_findings
