"""Selector: which parent positions a model's induction features use.

Two views:

- :class:`SelectorWeightProbe` reads a model's own selector weights from a named hook
  [batch subset] (e.g. ``blocks.0.mlp.hook_subset_weights`` of the simplified Chen et al.
  model) and averages them over sequences: the share of weight on each parent subset.
- :class:`ParentSubsetAttentionProbe` works on any hooked model: for every subset ``D`` of
  parent distances ``{1 .. max_distance}`` with ``|D| <= max_subset`` it measures a layer's
  attention mass on keys whose tokens at distances ``D`` match the query's parents (the
  generalized induction target ``T_D(q)`` of :mod:`probes.attention.generalized_induction`), averaged
  over the queries that have such a key, with its uniform-attention chance. The *excess*
  ``(score - chance) / (1 - chance)`` is highest for the parent set the head's query/key
  features depend on.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from mechprobe.validation import integer
from probes.attention.generalized_induction import parent_match_mask
from probes.attention.head_scores import visible_keys
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.probe import Probe
from probes.core.result import ProbeResult, Provenance

if TYPE_CHECKING:
    import pandas as pd


def distance_subset_label(subset: Sequence[int]) -> str:
    """``(1, 2) -> "{1,2}"``."""
    return "{" + ",".join(str(d) for d in subset) + "}"


@dataclass(frozen=True)
class SelectorShares(ProbeResult):
    """``share`` [subset]: the selector weights averaged over sequences; ``labels`` name the subsets."""

    share: Tensor
    labels: list[str]
    hook: str

    def as_dict(self) -> dict[str, float]:
        return {label: float(value) for label, value in zip(self.labels, self.share)}

    def to_dataframe(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([{"subset": k, "share": v} for k, v in self.as_dict().items()])


class SelectorWeightProbe(Probe[SelectorShares]):
    """Averages the weights at hook ``hook`` [batch subset] over sequences.

    Example: ``probes.run_probes(model, [SelectorWeightProbe(labels=model.subset_labels)], batches)``.
    """

    def __init__(self, hook: str = "blocks.0.mlp.hook_subset_weights", labels: Sequence[str] | None = None) -> None:
        super().__init__()
        if not isinstance(hook, str) or not hook:
            raise ConfigError(f"hook must be a hook name; got {hook!r}.")
        self.hook = hook
        self.labels = None if labels is None else [str(label) for label in labels]

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return (self.hook,)

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        weights = activations[self.hook]
        if weights.ndim != 2 or weights.shape[0] != batch.tokens.shape[0]:
            raise InputError(f"{self.hook} must hold [batch subset] weights; got shape {tuple(weights.shape)}.")
        if self.labels is not None and weights.shape[1] != len(self.labels):
            raise InputError(f"{len(self.labels)} labels were given for {weights.shape[1]} subsets at {self.hook}.")
        self._add("sum", weights.sum(0))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> SelectorShares:
        share = (state["sum"] / float(state["_n_sequences"])).float()
        labels = self.labels if self.labels is not None else [str(i) for i in range(share.shape[0])]
        return SelectorShares(provenance=provenance, share=share, labels=labels, hook=self.hook)


def distance_subsets(max_distance: int, max_subset: int) -> list[tuple[int, ...]]:
    """Non-empty subsets of ``{1 .. max_distance}`` with at most ``max_subset`` members, by size."""
    return [s for size in range(1, max_subset + 1) for s in itertools.combinations(range(1, max_distance + 1), size)]


@dataclass(frozen=True)
class ParentSubsetAttention(ProbeResult):
    """``scores`` / ``chance`` [subset, head] at ``layer``; ``subsets`` lists the distance sets."""

    scores: Tensor
    chance: Tensor
    rows_with_target: list[int]
    subsets: list[list[int]]
    layer: int

    @property
    def labels(self) -> list[str]:
        return [distance_subset_label(s) for s in self.subsets]

    @property
    def excess(self) -> Tensor:
        """``(score - chance) / (1 - chance)`` [subset, head]: 1 = all mass on matching keys."""
        return (self.scores - self.chance) / (1 - self.chance).clamp(min=1e-12)

    def best_subset(self, head: int) -> list[int]:
        """The distance set with the largest excess for ``head``."""
        return self.subsets[int(self.excess[:, head].nan_to_num(-1e9).argmax())]

    def to_dataframe(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [
                {"layer": self.layer, "subset": label, "head": h, "score": float(self.scores[i, h]),
                 "chance": float(self.chance[i, h]), "excess": float(self.excess[i, h])}
                for i, label in enumerate(self.labels)
                for h in range(self.scores.shape[1])
            ]
        )


class ParentSubsetAttentionProbe(Probe[ParentSubsetAttention]):
    """Attention mass of ``layer`` on keys matching the query's parents at each distance subset.

    Example::

        (found,) = probes.run_probes(model, [ParentSubsetAttentionProbe(1, max_distance=3)], batches)
        found.best_subset(head=0)         # [1, 2] for a trigram induction head
    """

    def __init__(self, layer: int = 1, *, max_distance: int = 3, max_subset: int = 2) -> None:
        super().__init__()
        for name, value in (("layer", layer), ("max_distance", max_distance), ("max_subset", max_subset)):
            low = 0 if name == "layer" else 1
            integer(name, value, low)
        if max_subset > max_distance:
            raise ConfigError(f"max_subset ({max_subset}) must be <= max_distance ({max_distance}).")
        self.layer, self.max_distance, self.max_subset = layer, max_distance, max_subset
        self.subsets = distance_subsets(max_distance, max_subset)

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        if self.layer >= info.n_layers:
            raise ConfigError(f"layer must be < n_layers = {info.n_layers}; got {self.layer}.")
        return (pattern_hook(self.layer),)

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        pattern = activations[pattern_hook(self.layer)]
        causal = self.info.is_causal(pattern)
        visible = visible_keys(batch.valid, causal, batch.attention_mask)
        masses, chances, rows = [], [], []
        for subset in self.subsets:
            mask = parent_match_mask(batch.tokens, batch.valid, subset)
            has = mask.any(-1)
            masses.append(torch.einsum("bhqk,bqk->h", pattern, mask.to(pattern.dtype)))
            chances.append((mask.sum(-1) / visible)[has].sum())
            rows.append(has.sum())
        self._add("mass", torch.stack(masses))
        self._add("chance_mass", torch.stack(chances))
        self._add("rows", torch.stack(rows))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> ParentSubsetAttention:
        rows = state["rows"]
        denom = rows.clamp(min=1)[:, None]
        nan = torch.tensor(float("nan"), dtype=torch.float64)
        scores = torch.where(rows[:, None] > 0, state["mass"] / denom, nan)
        chance = torch.where(rows[:, None] > 0, (state["chance_mass"] / rows.clamp(min=1))[:, None], nan)
        return ParentSubsetAttention(
            provenance=provenance,
            scores=scores.float(),
            chance=chance.expand_as(scores).float().contiguous(),
            rows_with_target=[int(r) for r in rows],
            subsets=[list(s) for s in self.subsets],
            layer=self.layer,
        )
