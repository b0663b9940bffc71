"""The induction toy's copier -> classifier edge (Chen et al. 2024), by path patching, on the standard toy.

On the TransformerLens toy (``model="standard"``: a 2-layer bridge with TransformerLens's hooks; the simplified and
full models have no residual stream to patch through), on chains of order 2 (one parent, at distance 1), the layer-1
copier writes each token's parent into the residual stream and the layer-2 classifier's keys read it. Measured here
like the pretrained models' K-composition edge (:mod:`analyses.pretrained.circuit_edge`), on the toy's own text: the
held-out chains, split into batches whose even ones choose the heads and odd ones measure the edge.

- sender: the layer-1 head with the most attention mass at distance 1 (:class:`probes.attention.copier.CopierProbe`)
  on the even batches; receiver: the layer-2 head with the highest generalized induction score
  (:class:`probes.attention.generalized_induction.GeneralizedInductionProbe`, the data's order) on them;
- the sender's output mean-replaced in the receiver's keys only (:func:`probes.causal.edge_effect`); statistic: the
  receiver's score drop (how much of its induction attention, ``score="induction"``, it loses over every predicted
  position of the odd batches), with a 95% bootstrap interval over chains; the loss change (nats per token) is
  measured beside it; null: random layer-1 -> layer-2 edges through the keys sharing no head with it (the other
  ``(n_heads - 1)**2``), drawn sequentially up to ``draws``; control: the toy at initialisation (same seed), its
  same edge on the same chains. The toy at initialisation's own edge is judged against its null only (it should be
  absent).

The finding reads the receiver's score, not the loss: the toy's one copier feeds the keys of every layer-2 head, so
with one classifier's keys patched the others still predict, and the loss moves by a few hundredths of a nat
(0.004 to 0.059 per token over 5 seeds of the small standard toy, below the 0.1-nat threshold) while that
classifier loses 0.15 to 0.37 of its induction attention (interval ends).

Example: ``toy_edge(trained, init, config).finding.verdict``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analyses.induction.config import InductionExperimentConfig
from analyses.induction.findings import held_out_chains
from analyses.pretrained.held_out import halves
from probes import feed_probes
from probes.attention.copier import CopierProbe
from probes.attention.generalized_induction import GeneralizedInductionProbe
from probes.causal import EdgeEffect, edge_effect, predicted_positions
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError
from probes.core.model_kind import HookedModel
from probes.stats.findings import ALPHA, Finding

EFFECT = "score_drop"


@dataclass(frozen=True)
class ToyEdge:
    """One seed's edge on the trained toy and on the toy at initialisation (the same heads, the same chains):
    ``finding`` judges the trained edge beside the initialised one; ``control_finding`` the initialised edge
    against its null alone."""

    trained: EdgeEffect
    init: EdgeEffect

    @property
    def finding(self) -> Finding:
        return self.trained.finding(EFFECT, self.init)

    @property
    def control_finding(self) -> Finding:
        return self.init.finding(EFFECT)


def toy_batches(config: InductionExperimentConfig, n_batches: int) -> list[TokenBatch]:
    """The first ``probe_sequences`` held-out chains (inputs) in ``n_batches`` batches."""
    chains = held_out_chains(config)[: config.probe_sequences, :-1]
    if chains.shape[0] < n_batches or n_batches < 4:
        raise ConfigError(f"The toy's edge needs at least 4 batches of at least one chain each (two halves: heads "
                          f"chosen, edge measured); got {n_batches} batches of {chains.shape[0]} chains.")
    return [TokenBatch(part, torch.ones_like(part, dtype=torch.bool)) for part in chains.tensor_split(n_batches)]


def copier_and_classifier(model: HookedModel, batches: Sequence[TokenBatch | Tensor], order: int
                          ) -> tuple[tuple[int, int], tuple[int, int]]:
    """The layer-1 head with the most mass at distance 1 and the layer-2 head with the highest generalized
    induction score (order ``order``) on ``batches``."""
    copier, classifier = CopierProbe(max(1, order - 1)), GeneralizedInductionProbe(order)
    feed_probes(model, [copier, classifier], batches, data="held-out chains of the induction toy", progress=False)
    mass, scores = copier.compute().mass, classifier.compute().scores
    layer2 = torch.nan_to_num(scores[-1].double(), nan=float("-inf"))
    return (0, int(mass[0, :, 1].argmax())), (scores.shape[0] - 1, int(layer2.argmax()))


def toy_edge(trained: HookedModel, init: HookedModel, config: InductionExperimentConfig, *, n_batches: int = 8,
             draws: int = 100, n_boot: int = 1000) -> ToyEdge:
    """The copier -> classifier K-edge of the trained standard toy and of the same toy at initialisation (module
    docstring); the heads are the trained toy's, chosen on the even batches."""
    if config.model != "standard":
        raise ConfigError(f"The copier -> classifier edge is path-patched on the standard toy (model='standard', "
                          f"preset standard); the {config.model} model has no residual stream to patch through.")
    if config.data.order != 2:
        raise ConfigError(f"The copier -> classifier edge reads the classifier's induction attention, the pattern of "
                          f"one parent at distance 1; the toy's data has order {config.data.order} "
                          f"({config.data.order - 1} parents). Set data.order=2.")
    choose, measure = halves(toy_batches(config, n_batches))
    sender, receiver = copier_and_classifier(trained, choose, config.data.order)
    data = f"{sum(b.shape[0] for b in measure)} held-out chains of the induction toy (seed {config.seed})"

    def edge(model: HookedModel) -> EdgeEffect:
        return edge_effect(model, sender, receiver, measure, slice_fn=predicted_positions, input="k", method="mean",
                           n_draws=draws, seed=config.seed, n_boot=n_boot, stop_at=ALPHA, data=data)

    return ToyEdge(edge(trained), edge(init))
