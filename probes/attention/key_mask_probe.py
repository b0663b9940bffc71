"""Probes whose per-batch context is a list of named key masks and whose state sums each mask's attention mass per
layer and head (``{name}/mass``): the head scores and the generalized induction scores."""

from __future__ import annotations

from torch import Tensor

from probes.core.attention_rows import LayerAttention
from probes.core.attention_terms import AttentionTerms, TermSums, key_mask_terms
from probes.core.batch import TokenBatch
from probes.core.pattern_sums import KeyMask
from probes.core.probe import LayerwiseProbe, ResultT

NamedMasks = list[tuple[str, KeyMask]]


class KeyMaskProbe(LayerwiseProbe[ResultT]):
    """Folds a layer (whole rows, reductions or attention terms) into ``{name}/mass`` ``[layer head]`` for each
    ``(name, mask)`` of the context ``_batch_context`` returns; queries without a target add 0."""

    def _update_rows(self, index: int, rows: Tensor, start: int, batch: TokenBatch, context: NamedMasks) -> None:
        # reduced over keys in float32 (half-precision models too), rows summed in float64
        for name, mask in context:
            self._add_at(f"{name}/mass", index, self.info.n_layers, mask.pattern_sum(rows, start))

    def _update_attention(self, index: int, attention: LayerAttention, batch: TokenBatch,
                          context: NamedMasks) -> None:
        for name, mask in context:
            self._add_at(f"{name}/mass", index, self.info.n_layers, mask.attention_sum(attention))

    def _folds_terms(self) -> bool:
        return True

    def _terms(self, batch: TokenBatch, context: NamedMasks) -> AttentionTerms | None:
        return key_mask_terms([mask for _, mask in context])

    def _fold_terms(self, sums: TermSums, context: NamedMasks) -> None:
        for i, (name, _) in enumerate(context):
            self._add(f"{name}/mass", sums.entries[:, i])
