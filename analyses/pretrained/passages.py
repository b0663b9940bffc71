"""The data of the attention views in report.html and ``mechprobe heads --html``: the patterns of chosen heads on
one passage (:func:`passage_patterns`) and its tokens as text (:func:`token_strings`). The views themselves (the
layer x head map, the pattern view, the page) are drawn by :mod:`probes.display.views`, which results shown in a
notebook use too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from probes.core.batch import TokenBatch, as_token_batch
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.runner import capture


def token_strings(model: HookedModel, ids: Sequence[int]) -> list[str]:
    """Readable text of each token id (the tokenizer's own piece, whitespace markers shown as spaces)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return [str(i) for i in ids]
    return [tokenizer.decode([int(i)]) or tokenizer.convert_ids_to_tokens(int(i)) for i in ids]


@dataclass(frozen=True)
class PassagePatterns:
    """The attention of named heads on one passage: its ``tokens`` (text), each head's ``(layer, head)`` and its
    pattern ``patterns[name][query][key]`` over the passage's tokens."""

    tokens: list[str]
    patterns: Mapping[str, list[list[float]]]
    heads: Mapping[str, tuple[int, int]]


def passage_patterns(model: HookedModel, batch: Any, heads: Mapping[str, tuple[int, int]], *, max_tokens: int = 48
                     ) -> PassagePatterns:
    """The :class:`PassagePatterns` of each head in ``heads`` (name -> (layer, head)) on the first sequence of
    ``batch``, cut to its first ``max_tokens`` valid tokens."""
    batch = as_token_batch(batch, ModelInfo.of(model))
    keep = batch.attention_mask[0].bool() if batch.attention_mask is not None else torch.ones_like(batch.valid[0])
    positions = keep.nonzero().flatten()[:max_tokens]
    end = int(positions[-1]) + 1 if len(positions) else 0
    mask = None if batch.attention_mask is None else batch.attention_mask[:1, :end]
    row = TokenBatch(batch.tokens[:1, :end], batch.valid[:1, :end], None if mask is None or bool(mask.all()) else mask)
    layers = sorted({layer for layer, _ in heads.values()})
    activations = capture(model, row, [pattern_hook(layer) for layer in layers])
    index = positions.tolist()
    patterns = {}
    for name, (layer, head) in heads.items():
        full = activations[pattern_hook(layer)][0, head].float().cpu()
        patterns[name] = full[index][:, index].tolist()
    return PassagePatterns(token_strings(model, row.tokens[0, index].tolist()), patterns,
                           {name: (int(layer), int(h)) for name, (layer, h) in heads.items()})
