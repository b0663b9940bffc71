"""Plain SDPA as it runs on CUDA, for models on ``meta`` weights.

``torch.nn.functional.scaled_dot_product_attention`` picks its kernel from the tensors' device: on ``meta`` it
runs the math path (the ``[T, T]`` scores and softmax), where a CUDA GPU runs the flash kernel. Within
:func:`cuda_sdpa` the function is replaced by one that makes CUDA's choice (torch's ``sdp_utils``, in its default
order) and calls that kernel's aten operator, whose ``meta`` kernel gives the output's shape:

- flash (``aten._scaled_dot_product_flash_attention``): no mask, float16 / bfloat16, one head size that is a
  multiple of 8 and at most 256, queries and keys of one length when causal; grouped key heads allowed;
- else memory-efficient (``aten._scaled_dot_product_efficient_attention``): any mask (a boolean one made additive,
  as SDPA does), key heads repeated to the query heads;
- else the original function (the math path).

The choice is what a recent GPU (sm80 and later) makes; cuDNN attention, which torch ranks after these by
default, is not modelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import Tensor

_HALF = (torch.float16, torch.bfloat16)


def flash_runs(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None, is_causal: bool) -> bool:
    """Whether CUDA's flash kernel takes these inputs."""
    head = query.shape[-1]
    return (attn_mask is None and query.dtype in _HALF and head == value.shape[-1] and head % 8 == 0 and head <= 256
            and (not is_causal or query.shape[-2] == key.shape[-2]))


def cuda_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                   dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None,
                   enable_gqa: bool = False, original: Any = None) -> Tensor:
    """``scaled_dot_product_attention``'s output through the kernel CUDA would pick (see the module docstring)."""
    if flash_runs(query, key, value, attn_mask, is_causal):
        return torch.ops.aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                                  scale=scale)[0]
    if query.dtype in (*_HALF, torch.float32):
        groups = query.shape[-3] // key.shape[-3]
        if groups > 1:
            key = key.repeat_interleave(groups, dim=-3)
            value = value.repeat_interleave(groups, dim=-3)
        bias = attn_mask
        if bias is not None and bias.dtype == torch.bool:
            bias = torch.zeros(bias.shape, dtype=query.dtype, device=bias.device).masked_fill(~bias, float("-inf"))
        if bias is not None:
            bias = bias.expand(query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        return torch.ops.aten._scaled_dot_product_efficient_attention(query, key, value, bias, False, dropout_p,
                                                                      is_causal, scale=scale)[0]
    return original(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                    enable_gqa=enable_gqa)


@contextlib.contextmanager
def cuda_sdpa() -> Iterator[None]:
    """Within the block, ``torch.nn.functional.scaled_dot_product_attention`` runs CUDA's kernel choice."""
    original = torch.nn.functional.scaled_dot_product_attention

    def attention(*args: Any, **kwargs: Any) -> Tensor:
        return cuda_attention(*args, **{**kwargs, "original": original})

    torch.nn.functional.scaled_dot_product_attention = attention
    try:
        yield
    finally:
        torch.nn.functional.scaled_dot_product_attention = original
