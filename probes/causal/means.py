"""The first pass of mean ablation: each head's mean output per position over the probed batches."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from mechprobe.forward import model_device
from probes.core.attention_rows import reduced_attention, supports_reductions
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import InputError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.runner import MAX_PATTERN_BYTES, capture

log = logging.getLogger(__name__)


def z_hook(layer: int) -> str:
    """TransformerLens's name of layer ``layer``'s per-head attention output before ``W_O`` [batch pos head d_head]."""
    return f"blocks.{layer}.attn.hook_z"


@dataclass(frozen=True)
class HeadMeans:
    """Running sums of every head's output in ``layers``, per position: ``sums[i]`` is ``[pos head d_head]`` for
    layer ``layers[i]`` (float32: as large as the layer's output, not a small sum), summed over the rows where that
    position is attended (not padding); ``counts`` ``[pos]`` the number of rows.
    Additive: ``a.merge(b)`` is what one pass over both batch streams gives."""

    layers: tuple[int, ...]
    sums: tuple[Tensor, ...]
    counts: Tensor

    def merge(self, other: HeadMeans) -> HeadMeans:
        if other.layers != self.layers:
            raise InputError(f"Cannot merge head means of layers {self.layers} and {other.layers}; use the same "
                             f"layers.")
        n = max(self.counts.shape[0], other.counts.shape[0])
        return HeadMeans(self.layers, tuple(_pad(a, n) + _pad(b, n) for a, b in zip(self.sums, other.sums)),
                         _pad(self.counts, n) + _pad(other.counts, n))

    def mean(self, layer: int, n_pos: int) -> Float[Tensor, "pos head d_head"]:
        """Layer ``layer``'s per-position mean output over the first ``n_pos`` positions."""
        if layer not in self.layers:
            raise InputError(f"These head means cover layers {self.layers}, not {layer}. Compute them for the layers "
                             f"you ablate (head_output_means(model, layers, batches)).")
        if n_pos > self.counts.shape[0] or bool((self.counts[:n_pos] == 0).any()):
            raise InputError(f"The head means cover {int((self.counts > 0).sum())} positions; this batch has {n_pos}. "
                             f"Compute the means on batches at least as long as the ones ablated.")
        sums = self.sums[self.layers.index(layer)][:n_pos]
        return sums / self.counts[:n_pos, None, None].to(sums.dtype)


def check_z_hooks(model: HookedModel, layers: Iterable[int]) -> None:
    """Raise :class:`ModelError` naming the first ``blocks.{l}.attn.hook_z`` the model lacks."""
    missing = [z_hook(layer) for layer in layers if z_hook(layer) not in model.hook_dict]
    if missing:
        raise ModelError(
            f"Head ablation needs each head's output before W_O at {missing[0]} [batch pos head d_head]; this model "
            f"has no such hook{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}. On a "
            f"HookedRootModule put a HookPoint named {missing[0]} on the per-head output; on a bridge, the "
            f"architecture's attention has no separate output projection to hook."
        )


def _pad(tensor: Tensor, n: int) -> Tensor:
    if tensor.shape[0] >= n:
        return tensor
    return torch.cat([tensor, tensor.new_zeros((n - tensor.shape[0], *tensor.shape[1:]))])


def _head_outputs(model: HookedModel, batch: TokenBatch, layers: tuple[int, ...]) -> dict[str, Tensor]:
    """Each layer's ``hook_z`` on ``batch``: where one layer's pattern would exceed the runner's
    ``MAX_PATTERN_BYTES``, through the fused attention kernel (no ``[T, T]`` pattern; ``hook_z`` fires there), else
    (or where it does not fire) through the model's own attention."""
    names = [z_hook(layer) for layer in layers]
    n_batch, n_pos = batch.shape
    pattern_bytes = n_batch * int(model.cfg.n_heads) * n_pos * n_pos * 4
    if pattern_bytes > MAX_PATTERN_BYTES and supports_reductions(model):
        try:
            with reduced_attention(model, lambda layer: None):
                return capture(model, batch, names)
        except ModelError:
            log.info("hook_z does not fire under fused attention on %s: the head means read whole patterns",
                     ModelInfo.of(model).name)
    return capture(model, batch, names)


def batch_head_sums(model: HookedModel, batch: TokenBatch, layers: tuple[int, ...]) -> HeadMeans:
    """The :class:`HeadMeans` of one batch (the forward pass stops after the last layer read)."""
    z = _head_outputs(model, batch, layers)
    mask = batch.attention_mask
    if mask is None:
        sums = tuple(z[z_hook(layer)].sum(0, dtype=torch.float32) for layer in layers)
        counts = torch.full(batch.shape[1:], float(batch.shape[0]), dtype=torch.float64, device=batch.tokens.device)
        return HeadMeans(layers, sums, counts)
    # 0 / 1 weights are exact in the model's dtype; the sum over rows is float32 without a float32 copy of z
    sums = tuple((z[z_hook(layer)] * mask[:, :, None, None].to(z[z_hook(layer)].dtype)).sum(0, dtype=torch.float32)
                 for layer in layers)
    return HeadMeans(layers, sums, mask.double().sum(0))


def head_output_means(model: HookedModel, layers: tuple[int, ...], batches: Iterable[Any]) -> HeadMeans:
    """Every head's mean output per position in ``layers`` over ``batches`` (the first pass of ``method="mean"``).

    Example: ``means = head_output_means(model, (1,), batches); means.mean(1, n_pos)`` is ``[pos head d_head]``.
    """
    check_z_hooks(model, layers)
    info = ModelInfo.of(model)
    device = model_device(model)
    total: HeadMeans | None = None
    with torch.inference_mode():
        for raw in batches:
            part = batch_head_sums(model, as_token_batch(raw, info).to(device), layers)
            total = part if total is None else total.merge(part)
    if total is None:
        raise InputError("No batches were given: the batch iterable was empty.")
    return total
