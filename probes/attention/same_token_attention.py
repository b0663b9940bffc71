"""Same-token attention counted as Li, Li & Risteski's (2023) reference code counts it: the position itself included.

:class:`~probes.attention.topic_attention.TopicAttentionProbe` counts a ``same_token`` pair only between two
*different* positions holding the same token. The paper's reference code (its topic-attention
statistics) puts a pair ``(q, k)`` into the same-token category when ``q == k`` *or*
``tok[q] == tok[k]``, so a query's attention to itself is part of the number. This probe reports
both parts and their union:

- ``self``: pairs ``(q, q)`` of a labelled position with itself;
- ``other``: pairs ``q != k`` of two labelled positions with the same token (TopicAttention's
  ``same_token``);
- ``mean`` (the reference's number): the mean attention weight over the union of both kinds::

    mean[l, h] = sum_{(b, q, k) in self or other} A[b, l, h, q, k] / (#self + #other)

Labelled positions, visible keys and labels (-1 = no topic, e.g. ``[MASK]``/``[PAD]``, which the
reference lists as stop tokens) are exactly those of TopicAttentionProbe. ``chance*`` are the same
means for a head that attends uniformly to the keys its query can see. Running sums only, so
batches stream and probes merge exactly.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from probes.attention.topic_pairs import check_pattern_batch, check_token_topics, visible_pairs
from probes.core.batch import TokenBatch
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.pattern_sums import KeyMask
from probes.core.probe import LayerwiseProbe
from probes.core.result import ProbeResult, Provenance
from probes.core.runner import run_probes
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd

SAME_TOKEN_KINDS = ("self", "other")


@dataclass(frozen=True)
class SameTokenAttention(ProbeResult, HeadMapDisplay):
    """Same-token attention per head [n_layers, n_heads]: ``mean`` (self included, the reference's count),
    ``mean_self`` and ``mean_other`` (the two parts); ``pairs``/``chance`` per kind (``"all"``, ``"self"``,
    ``"other"``)."""

    mean: Tensor
    mean_self: Tensor
    mean_other: Tensor
    pairs: dict[str, int]
    chance: dict[str, float]

    def head_maps(self) -> list[HeadMap]:
        """Same-token attention (self included), its self and other parts, each with its chance."""
        return [HeadMap("same token", self.mean, self.chance["all"], "attention"),
                HeadMap("self", self.mean_self, self.chance["self"], "attention"),
                HeadMap("other same-token keys", self.mean_other, self.chance["other"], "attention")]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head) with the three means and their uniform-attention values."""
        import pandas as pd

        n_layers, n_heads = self.mean.shape
        rows = []
        for layer in range(n_layers):
            for head in range(n_heads):
                rows.append({"layer": layer, "head": head, "same_token": float(self.mean[layer, head]),
                             "self": float(self.mean_self[layer, head]),
                             "other": float(self.mean_other[layer, head]),
                             "same_token_chance": self.chance["all"], "self_chance": self.chance["self"],
                             "other_chance": self.chance["other"]})
        return pd.DataFrame(rows)


class SameTokenAttentionProbe(LayerwiseProbe[SameTokenAttention]):
    """Accumulates attention to the same token, the query's own position included (module docstring).

    Example::

        probe = SameTokenAttentionProbe(token_topics)      # [d_vocab], -1 = no topic
        (result,) = probes.run_probes(model, [probe], batches)
        result.mean                                         # [n_layers, n_heads]
    """

    def __init__(self, token_topics: Tensor, has_topic: Tensor | None = None) -> None:
        super().__init__()
        self.token_topics = check_token_topics(token_topics, has_topic)
        self.has_topic = has_topic


    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> dict[str, KeyMask]:
        causal = check_pattern_batch(self.info, self.token_topics, first, batch)
        tokens = batch.tokens
        n_pos = tokens.shape[1]
        labels = self.token_topics.to(tokens.device)
        labelled = batch.valid & (labels[tokens] >= 0)
        visible = visible_pairs(batch, causal)
        same = (tokens[:, :, None] == tokens[:, None, :]) & labelled[:, :, None] & labelled[:, None, :] & visible
        diagonal = torch.eye(n_pos, dtype=torch.bool, device=tokens.device)
        masks = {"self": same & diagonal, "other": same & ~diagonal}
        inverse_visible = 1.0 / visible.sum(-1).clamp(min=1).to(torch.float64)  # [batch q]
        for kind, mask in masks.items():  # [batch q_pos k_pos] stays bool; only per-row counts are float
            per_row = mask.sum(-1).to(torch.float64)
            self._add(f"{kind}/pairs", per_row.sum())
            self._add(f"{kind}/chance_mass", (per_row * inverse_visible).sum())
        return {kind: KeyMask.of(mask) for kind, mask in masks.items()}

    def _update_rows(self, index: int, rows: Tensor, start: int, batch: TokenBatch,
                     context: dict[str, KeyMask]) -> None:
        for kind, mask in context.items():  # reduced over keys in float32 (or gathered), summed in float64
            self._add_at(f"{kind}/mass", index, self.info.n_layers, mask.pattern_sum(rows, start))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> SameTokenAttention:
        pairs = {kind: float(state[f"{kind}/pairs"]) for kind in SAME_TOKEN_KINDS}
        mass = {kind: state[f"{kind}/mass"] for kind in SAME_TOKEN_KINDS}
        chance_mass = {kind: float(state[f"{kind}/chance_mass"]) for kind in SAME_TOKEN_KINDS}
        pairs["all"], mass["all"] = pairs["self"] + pairs["other"], mass["self"] + mass["other"]
        chance_mass["all"] = chance_mass["self"] + chance_mass["other"]

        def mean(kind: str) -> Tensor:
            if not pairs[kind]:
                return torch.full_like(mass[kind], float("nan")).float()
            return (mass[kind] / pairs[kind]).float()

        return SameTokenAttention(
            provenance=provenance, mean=mean("all"), mean_self=mean("self"), mean_other=mean("other"),
            pairs={kind: int(n) for kind, n in pairs.items()},
            chance={kind: chance_mass[kind] / pairs[kind] if pairs[kind] else float("nan") for kind in pairs},
        )


def same_token_attention(model: HookedModel, batches: Iterable[Tensor | TokenBatch], token_topics: Tensor, *,
                         has_topic: Tensor | None = None, data: str = "given tokens",
                         progress: bool = False) -> SameTokenAttention:
    """Run :class:`SameTokenAttentionProbe` over ``batches`` on ``model``.

    Example: ``same_token_attention(model, [tokens], token_topics).mean[0, 0]``.
    """
    (result,) = run_probes(model, [SameTokenAttentionProbe(token_topics, has_topic)], batches, data=data,
                           progress=progress)
    return result
