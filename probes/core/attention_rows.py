"""Attention in query chunks for long sequences: each layer's pattern arrives a block of query rows at a time.

TransformerLens's bridge computes every layer's full ``[batch, head, T, T]`` scores and pattern (it
forces eager attention so ``hook_pattern`` exists), which at 32k tokens is tens of GiB per layer.
:func:`query_chunked_attention` instead runs the Hugging Face attention modules themselves with an
attention function registered in ``transformers`` (``AttentionInterface``) that, for each block of
``rows`` queries, computes the scores from the layer's own ``q`` and ``k`` (after its position
handling: RoPE is applied by the module before the call), with the module's own ``scaling``,
soft-capping and mask (causal, sliding window, padding, built by the model as for SDPA), softmaxes
them in float32 like eager attention, hands the rows to a callback and multiplies them by ``v``. A
layer then needs O(rows x T) memory besides the boolean mask.

It is only as exact as the model's attention module is standard, so :func:`rows_match_hook_pattern`
compares it once per model with ``hook_pattern`` on a short input; the runner falls back to
``hook_pattern`` where they disagree (attention sinks, relative position biases, ALiBi, models whose
attention bypasses ``AttentionInterface``).
"""

from __future__ import annotations

import contextlib
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor

from probes.core.model_kind import HookedModel, ModelKind, model_kind, wrapped_model

log = logging.getLogger(__name__)

IMPLEMENTATION = "mechprobe_query_chunks"
RowSink = Callable[[int, Tensor, int], None]  # (layer, rows [batch head rows k_pos], first row)

_sink: RowSink | None = None
_rows_per_chunk = 256


def _repeat_kv(states: Tensor, groups: int) -> Tensor:
    if groups == 1:
        return states
    batch, heads, n_pos, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, n_pos, dim).reshape(batch, heads * groups, n_pos, dim)


def chunked_attention_forward(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                              dropout: float = 0.0, scaling: float | None = None, softcap: float | None = None,
                              **kwargs: Any) -> tuple[Tensor, None]:
    """Eager attention (scores, soft-cap, mask, float32 softmax, weights @ v) a block of queries at a time;
    the signature of ``transformers``' attention functions. Each block's weights go to the active sink."""
    if getattr(module, "sinks", None) is not None:
        raise NotImplementedError("attention sinks are not supported by query-chunked attention")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    n_pos = query.shape[2]
    output = torch.empty(*query.shape[:3], value.shape[-1], dtype=query.dtype, device=query.device)
    layer = getattr(module, "layer_idx", None)
    for start in range(0, n_pos, _rows_per_chunk):
        rows = slice(start, start + _rows_per_chunk)
        scores = torch.matmul(query[:, :, rows], key.transpose(2, 3)) * scaling
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        if attention_mask is not None:
            mask = attention_mask[:, :, rows, : key.shape[2]]
            if mask.dtype == torch.bool:
                scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
            else:
                scores = scores + mask
        weights = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        del scores
        if _sink is not None and layer is not None:
            _sink(layer, weights, start)
        output[:, :, rows] = torch.matmul(weights, value)
    return output.transpose(1, 2).contiguous(), None


def _bool_mask(*args: Any, **kwargs: Any) -> Tensor | None:
    from transformers.masking_utils import sdpa_mask

    kwargs["allow_is_causal_skip"] = False  # always a mask: the chunks need it explicitly
    return sdpa_mask(*args, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(IMPLEMENTATION, chunked_attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, _bool_mask)


def _configs(hf_model: Any) -> list[Any]:
    config = hf_model.config
    found = [config]
    for name in ("text_config", "decoder", "encoder"):
        sub = getattr(config, name, None)
        if sub is not None and hasattr(sub, "_attn_implementation"):
            found.append(sub)
    return found


def _attention_bridges(model: HookedModel) -> list[Any]:
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    return [block.attn for block in getattr(model, "blocks", [])
            if isinstance(getattr(block, "attn", None), AttentionBridge)]


def supports_query_chunks(model: HookedModel) -> bool:
    """Whether ``model`` is a TransformerBridge over a Hugging Face model whose every layer has an attention
    bridge (the structure :func:`query_chunked_attention` needs; exactness is checked separately)."""
    if model_kind(model) is not ModelKind.HF_BRIDGE or not hasattr(wrapped_model(model), "config"):
        return False
    return bool(len(_attention_bridges(model)) == model.cfg.n_layers)


@contextlib.contextmanager
def query_chunked_attention(model: HookedModel, sink: RowSink, *, rows: int = 256) -> Iterator[None]:
    """Within the block, ``model``'s forward runs its attention in blocks of ``rows`` queries and calls
    ``sink(layer, weights, first_row)`` with each block's weights ``[batch head rows k_pos]``; the model's
    output is eager attention's. Hooks inside the attention bridges (``hook_pattern``, ``hook_q`` of the
    bridge's own implementation) do not fire; ``hook_in``/``hook_out`` and every other hook do.

    Example::

        with query_chunked_attention(bridge, lambda layer, w, start: print(layer, start, w.shape)):
            bridge(tokens)
    """
    global _sink, _rows_per_chunk
    if not supports_query_chunks(model):
        raise TypeError("query-chunked attention needs a TransformerBridge over a Hugging Face model")
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    _register()
    configs = _configs(model.original_model)
    before = [config._attn_implementation for config in configs]
    bridges = _attention_bridges(model)
    previous = (_sink, _rows_per_chunk)
    try:
        for config in configs:
            config._attn_implementation = IMPLEMENTATION
        for bridge in bridges:  # delegate to the wrapped HF module, which calls the registered function
            # bridges redirect setattr
            object.__setattr__(bridge, "forward", types.MethodType(AttentionBridge.forward, bridge))
        _sink, _rows_per_chunk = sink, max(1, int(rows))
        yield
    finally:
        _sink, _rows_per_chunk = previous
        for bridge in bridges:
            bridge.__dict__.pop("forward", None)
        for config, implementation in zip(configs, before):
            config._attn_implementation = implementation


def rows_match_hook_pattern(model: HookedModel, tokens: Tensor, *, rows: int = 3, atol: float | None = None) -> bool:
    """Whether query-chunked attention reproduces every layer's ``hook_pattern`` on ``tokens`` (a short input;
    blocks of ``rows`` queries so several blocks are checked). ``atol`` defaults to 1e-4 (float32) or 1e-2."""
    from probes.core.model_info import pattern_hook

    n_layers = model.cfg.n_layers
    names = [pattern_hook(layer) for layer in range(n_layers)]
    with torch.inference_mode():
        _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
        got: dict[int, list[tuple[int, Tensor]]] = {}
        try:
            with query_chunked_attention(
                    model, lambda layer, w, start: got.setdefault(layer, []).append((start, w.clone())), rows=rows):
                model(tokens)
        except Exception as error:  # any failure means: not this model
            log.info("query-chunked attention does not run on %s: %s", model.cfg.model_name, error)
            return False
    if sorted(got) != list(range(n_layers)):
        return False
    for layer in range(n_layers):
        chunks = sorted(got[layer], key=lambda item: item[0])
        rebuilt = torch.cat([w for _, w in chunks], dim=2)
        expected = cache[names[layer]]
        tolerance = atol if atol is not None else (1e-4 if expected.dtype == torch.float32 else 1e-2)
        if rebuilt.shape != expected.shape or not torch.allclose(rebuilt.float(), expected.float(), atol=tolerance):
            log.info("query-chunked attention differs from hook_pattern at layer %d on %s", layer, model.cfg.model_name)
            return False
    return True
