"""Attention reductions for the probes without a ``[T, T]`` pattern: a fused kernel's row log-sum-exp, gathered
``q . k`` entries and label sums taken in the model's own attention call.

TransformerLens's bridge computes every layer's full ``[batch, head, T, T]`` scores and pattern (it forces eager
attention so ``hook_pattern`` exists): at 8k tokens that is most of the forward's time and memory, at 32k tens of
GiB per layer. What the attention probes need from a head is far less (docs/ARCHITECTURE.md, "Principles"):

- a few softmax entries per query (previous token, induction target, duplicate, the n-gram-matched keys):
  ``p[q, k] = exp(scale * q . k - lse[q])``, from the layer's own ``q`` and ``k`` and the row's log-sum-exp;
- sums of the softmax over keys grouped by a label (topic, key-token class): one attention call whose values are
  the labels' one-hot columns.

:func:`reduced_attention` runs the Hugging Face attention modules themselves with an attention function registered
in ``transformers`` (``AttentionInterface``) that computes the module's output with a fused kernel returning the
row log-sum-exp. On the CPU that is ``aten._scaled_dot_product_flash_attention_for_cpu`` with the probes' label
columns appended to ``v`` (``q`` and ``k`` zero-padded to the same width, which changes no score), so the label sums
come out of the model's own call. On CUDA it is the kernel plain SDPA would pick, on the unpadded ``q``, ``k``, ``v``:
``aten._scaled_dot_product_flash_attention`` (half precision, no mask) or else
``aten._scaled_dot_product_efficient_attention``; the label sums are a second efficient-attention call whose values
are the label columns, made only when a probe asks for them. The kernel follows the device *type* named by
:func:`kernels_for` when one is (the cost ledger runs the CUDA route on ``meta`` tensors), else the tensors' own.
Each layer's :class:`LayerAttention` (``q``, ``k``, log-sum-exp, label sums, mask) goes to a sink. Where the fused
kernel cannot run (soft-capping, another device, a failing private op) a blocked eager computation gives the same
quantities a block of query rows at a time (logged once). A probe that needs a dense part of the pattern gets it a
block of rows at a time from :meth:`LayerAttention.rows`, never a whole ``[T, T]`` layer.

It is only as exact as the model's attention module is standard, so
:func:`probes.core.reductions_check.reductions_match_hook_pattern`
compares it once per model with ``hook_pattern`` on a short input; the runner falls back to ``hook_pattern``
(the materialising reference every probe is tested against) where they disagree (attention sinks, relative
position biases, ALiBi, models whose attention bypasses ``AttentionInterface``).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import logging
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.model_kind import HookedModel, ModelKind, model_kind, wrapped_model

log = logging.getLogger(__name__)

IMPLEMENTATION = "mechprobe_reductions"
ROW_BLOCK_BYTES = 256 * 2**20
"""Size of one float32 block of query rows ``[batch head rows k_pos]`` wherever rows are materialised."""


@dataclasses.dataclass(frozen=True)
class LayerAttention:
    """One layer's attention as the probes read it, without its ``[batch head q_pos k_pos]`` pattern.

    ``query`` / ``key`` are the scores' operands after the module's position handling (key heads repeated to the
    query heads), ``lse`` the row log-sum-exp of the scaled (soft-capped, masked) scores in float32, ``allowed``
    the boolean ``[batch 1 q_pos k_pos]`` mask (True = may attend) or None when only ``causal`` restricts keys,
    and ``column_mass[b, h, q, c] = sum_k p[b, h, q, k] * columns[b, k, c]`` for the label columns asked for
    (None when none were).
    """

    layer: int
    query: Float[Tensor, "batch head q_pos d_head"]
    key: Float[Tensor, "batch head k_pos d_head"]
    lse: Float[Tensor, "batch head q_pos"]
    scaling: float
    softcap: float | None
    allowed: Tensor | None
    causal: bool
    column_mass: Float[Tensor, "batch head q_pos column"] | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """The pattern's shape ``(batch, head, q_pos, k_pos)``."""
        return (*self.query.shape[:3], self.key.shape[2])

    def _scores(self, scores: Tensor) -> Tensor:
        return _scaled(scores, self.scaling, self.softcap)

    @functools.cached_property
    def _heads_first(self) -> tuple[Tensor, Tensor]:
        """``query`` and ``key`` as ``[head, batch * pos, d_head]``: each gathered row is one contiguous vector
        (a view for one sequence; a copy, once per layer, for several)."""
        n_batch, n_heads, n_pos, d_head = self.query.shape
        return (self.query.transpose(0, 1).reshape(n_heads, n_batch * n_pos, d_head),
                self.key.transpose(0, 1).reshape(n_heads, n_batch * self.key.shape[2], d_head))

    @functools.cached_property
    def _lse_heads_first(self) -> Tensor:
        """``-lse`` as ``[head, batch * q_pos]`` (gathered by flat query rows; once per layer)."""
        n_batch, n_heads, n_pos = self.lse.shape
        lse = self.lse[0] if n_batch == 1 else self.lse.transpose(0, 1).reshape(n_heads, n_batch * n_pos)
        return -lse

    def diagonal(self) -> Float[Tensor, "batch head q_pos"]:
        """``p[b, h, q, q]``, each query's weight on its own position, in float32."""
        n_pos = self.query.shape[2]
        scores = (self.query.float() * self.key[:, :, :n_pos].float()).sum(-1)
        weights = torch.exp(self._scores(scores) - self.lse)
        if self.allowed is not None:  # where, not a product: a row with every key forbidden has an lse near -inf
            weights = torch.where(self.allowed[:, 0].diagonal(dim1=-2, dim2=-1)[:, None, :n_pos], weights, 0.0)
        return weights

    def entries(self, b: Tensor, q: Tensor, k: Tensor) -> Float[Tensor, "entry head"]:
        """``p[b, :, q, k]`` for each ``(b, q, k)`` entry, in float32 (0 where the mask forbids the key)."""
        return self.entry_weights(b * self.query.shape[2] + q, b * self.key.shape[2] + k, b, q, k).T

    def entry_weights(self, query_rows: Tensor, key_rows: Tensor, b: Tensor, q: Tensor, k: Tensor, *,
                      causal_may_forbid: bool = True) -> Float[Tensor, "head entry"]:
        """``p[b, :, q, k]`` for each entry as ``[head entry]`` in float32 (0 where the mask forbids the key), given
        its flat rows ``query_rows = b * q_pos + q`` and ``key_rows = b * k_pos + k``: one gather of ``q . k``
        for every head and entry. ``causal_may_forbid=False`` skips the causal test when no entry has ``k > q``."""
        queries, keys = self._heads_first
        # products in the layer's dtype summed in float32 (a half-precision model's own scores are rounded more)
        scores = (queries.index_select(1, query_rows) * keys.index_select(1, key_rows)).sum(-1, dtype=torch.float32)
        lse = self._lse_heads_first.index_select(1, query_rows)
        if self.softcap is None:  # exp(scaling * s - lse) in one fused step
            weights = torch.exp(torch.add(lse, scores, alpha=self.scaling))
        else:
            weights = torch.exp(self._scores(scores) + lse)
        if self.causal and causal_may_forbid:
            weights = weights * (k <= q)
        if self.allowed is not None:  # where, not a product: a row with every key forbidden has an lse near -inf
            weights = torch.where(self.allowed[b, 0, q, k], weights, 0.0)
        return weights

    def rows(self, start: int, stop: int) -> Float[Tensor, "batch head rows k_pos"]:
        """The pattern's query rows ``start:stop``, in float32 (the materialising path, a block at a time)."""
        scores = self._scores(torch.matmul(self.query[:, :, start:stop].float(), self.key.float().transpose(2, 3)))
        return torch.exp(_masked(scores, start, self.causal, self.allowed) - self.lse[:, :, start:stop, None])

    def row_blocks(self) -> Iterator[tuple[int, Tensor]]:
        """``(start, rows)`` over all query rows, blocks of at most :data:`ROW_BLOCK_BYTES`."""
        n_batch, n_heads, n_pos, n_keys = self.shape
        step = max(1, ROW_BLOCK_BYTES // (4 * n_batch * n_heads * n_keys))
        for start in range(0, n_pos, step):
            yield start, self.rows(start, min(n_pos, start + step))


def float_at_least_32(tensor: Tensor) -> Tensor:
    """``tensor`` in float32, or as it is when already float32/float64 (what a layer is reduced in; no operation
    then)."""
    return tensor if tensor.dtype in (torch.float32, torch.float64) else tensor.float()


def _scaled(scores: Tensor, scaling: float, softcap: float | None) -> Tensor:
    """``q . k`` scores scaled and soft-capped as the module does before its softmax."""
    scores = scores * scaling
    return scores if softcap is None else torch.tanh(scores / softcap) * softcap


def _masked(scores: Tensor, start: int, causal: bool, allowed: Tensor | None) -> Tensor:
    """Float32 ``scores`` of query rows ``start ...`` with forbidden keys at the float32 minimum (as eager attention
    does: a row with every key forbidden becomes uniform, not NaN)."""
    low = torch.finfo(scores.dtype).min
    if causal:
        rows = torch.arange(start, start + scores.shape[2], device=scores.device)
        scores = scores.masked_fill(rows[:, None] < torch.arange(scores.shape[3], device=scores.device), low)
    if allowed is not None:
        scores = scores.masked_fill(~allowed[:, :, start : start + scores.shape[2]], low)
    return scores


LayerSink = Callable[[LayerAttention], None]


@dataclasses.dataclass
class _Active:
    sink: LayerSink
    columns: Tensor | None  # [batch k_pos column] label columns whose attention mass each layer reports
    fused: bool  # try the fused kernel (False: blocked eager, the reference the fused kernel is tested against)
    _values: dict[torch.dtype, Tensor] = dataclasses.field(default_factory=dict)

    def column_values(self, dtype: torch.dtype) -> Tensor:
        """The label columns as padded values in ``dtype`` (:func:`_column_values`), made on first use."""
        if dtype not in self._values:
            if self.columns is None:
                raise ValueError("no label columns were asked for")
            self._values[dtype] = _column_values(self.columns, dtype)
        return self._values[dtype]


_ACTIVE: contextvars.ContextVar[_Active | None] = contextvars.ContextVar("mechprobe_reductions", default=None)
_KERNELS: contextvars.ContextVar[str | None] = contextvars.ContextVar("mechprobe_kernels", default=None)
_fallback_logged: set[str] = set()
KERNEL_DEVICE_TYPES = ("cpu", "cuda")


@contextlib.contextmanager
def kernels_for(device_type: str) -> Iterator[None]:
    """Within the block, attention reductions choose their kernels as on ``device_type`` ("cpu" or "cuda")
    whatever device the tensors sit on: the cost ledger runs the CUDA route on ``meta`` tensors this way.

    Example::

        with torch.device("meta"), kernels_for("cuda"):
            ...  # a forward on meta weights takes the flash / efficient-attention route
    """
    if device_type not in KERNEL_DEVICE_TYPES:
        raise ValueError(f"kernels_for takes one of {KERNEL_DEVICE_TYPES}; got {device_type!r}.")
    token = _KERNELS.set(device_type)
    try:
        yield
    finally:
        _KERNELS.reset(token)


def kernel_device_type(tensor: Tensor) -> str:
    """The device type whose kernels attention on ``tensor`` takes: :func:`kernels_for`'s, else the tensor's."""
    return _KERNELS.get() or tensor.device.type


def _repeat_kv(states: Tensor, groups: int) -> Tensor:
    if groups == 1:
        return states
    batch, heads, n_pos, dim = states.shape
    return states[:, :, None].expand(batch, heads, groups, n_pos, dim).reshape(batch, heads * groups, n_pos, dim)


def _padded(tensors: tuple[Tensor, ...], width: int) -> tuple[Tensor, ...]:
    """Each of ``tensors`` zero-padded on its last axis to ``width`` (one allocation for all; zeros in ``q`` and
    ``k`` change no score)."""
    if all(t.shape[-1] == width for t in tensors):
        return tensors
    out = tensors[0].new_zeros((len(tensors), *tensors[0].shape[:-1], width))
    for slot, tensor in zip(out, tensors):
        slot[..., : tensor.shape[-1]] = tensor
    return tuple(out)


def _additive_mask(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """``allowed`` (True = may attend) as an additive mask in ``dtype`` (min, not -inf: a fully masked row stays
    finite)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(~allowed, torch.finfo(dtype).min)


def _fused_cpu(query: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None, causal: bool,
               scaling: float) -> tuple[Tensor, Tensor]:
    """(output, row log-sum-exp) from the CPU flash kernel; ``value`` may be wider than ``query`` (all three are
    zero-padded to one width, a multiple of 8, which changes no score)."""
    width = -(-max(query.shape[-1], value.shape[-1]) // 8) * 8
    query, key, value = _padded((query, key, value), width)
    bias = None if allowed is None else _additive_mask(allowed, query.dtype)
    output, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, causal, attn_mask=bias, scale=scaling)
    return output, lse[..., : query.shape[2]].float()


def _flash_runs(query: Tensor, value: Tensor, allowed: Tensor | None) -> bool:
    """Whether CUDA's flash kernel takes these inputs: half precision, no mask, one head size up to 256."""
    return (allowed is None and query.dtype in (torch.float16, torch.bfloat16)
            and query.shape[-1] == value.shape[-1] and query.shape[-1] % 8 == 0 and query.shape[-1] <= 256)


def _efficient_cuda(query: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None, causal: bool,
                    scaling: float) -> tuple[Tensor, Tensor]:
    """(output, row log-sum-exp in float32) from CUDA's memory-efficient kernel (any mask; ``value`` of any width)."""
    bias = None
    if allowed is not None:
        bias = _additive_mask(allowed, query.dtype).expand(query.shape[0], query.shape[1], *allowed.shape[2:])
    output, lse, _, _ = torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, bias, True, 0.0, causal, scale=scaling)
    return output, lse[..., : query.shape[2]].float()


def _fused_cuda(query: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None, causal: bool,
                scaling: float) -> tuple[Tensor, Tensor]:
    """(output, row log-sum-exp in float32) from the kernel plain SDPA would pick on CUDA, on the unpadded
    ``q``, ``k``, ``v``: flash where it runs, else memory-efficient attention."""
    if _flash_runs(query, value, allowed):
        output, lse = torch.ops.aten._scaled_dot_product_flash_attention(
            query, key, value, 0.0, causal, False, scale=scaling)[:2]
        return output, lse.float()
    return _efficient_cuda(query, key, value, allowed, causal, scaling)


def _column_values(columns: Tensor, dtype: torch.dtype) -> Tensor:
    """The label columns ``[batch k_pos column]`` as one head's values ``[batch 1 k_pos width]`` in ``dtype``, zero
    padded to a multiple of 8 (made once per forward pass, read by every layer)."""
    n_columns = columns.shape[-1]
    value = torch.zeros((columns.shape[0], 1, columns.shape[1], -(-n_columns // 8) * 8), dtype=dtype,
                        device=columns.device)
    value[:, 0, :, :n_columns] = columns
    return value


def _column_mass_cuda(query: Tensor, key: Tensor, columns: Tensor, allowed: Tensor | None, causal: bool,
                      scaling: float) -> Tensor:
    """``sum_k p[b, h, q, k] * columns[b, k, c]`` in float32 from a second memory-efficient call whose values are
    the label columns (every head reads the same columns)."""
    active = _ACTIVE.get()
    value = (active.column_values(query.dtype) if active is not None and active.columns is columns
             else _column_values(columns, query.dtype))
    mass, _ = _efficient_cuda(query, key, value.expand(query.shape[0], query.shape[1], *value.shape[2:]), allowed,
                              causal, scaling)
    return mass[..., : columns.shape[-1]].float()


def _fused(query: Tensor, key: Tensor, value: Tensor, columns: Tensor | None, allowed: Tensor | None, causal: bool,
           scaling: float) -> tuple[Tensor, Tensor, Tensor | None]:
    """(output, row log-sum-exp in float32, label column mass or None) from the fused kernels of
    :func:`kernel_device_type`."""
    device_type = kernel_device_type(query)
    if device_type == "cuda":
        output, lse = _fused_cuda(query, key, value, allowed, causal, scaling)
        mass = None if columns is None else _column_mass_cuda(query, key, columns, allowed, causal, scaling)
        return output, lse, mass
    if device_type != "cpu":
        raise NotImplementedError(f"no fused attention with log-sum-exp on {device_type}")
    d_value = value.shape[-1]
    extended = value if columns is None else _with_columns(value, columns)
    output, lse = _fused_cpu(query, key, extended, allowed, causal, scaling)
    mass = None if columns is None else output[..., d_value : d_value + columns.shape[-1]].float()
    return output[..., :d_value], lse, mass


def _with_columns(value: Tensor, columns: Tensor) -> Tensor:
    """``value`` with the label columns appended as extra value dimensions of every head."""
    d_value = value.shape[-1]
    extended = value.new_empty((*value.shape[:-1], d_value + columns.shape[-1]))
    extended[..., :d_value] = value
    extended[..., d_value:] = columns[:, None].to(value.dtype)
    return extended


def _blocked(query: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None, causal: bool, scaling: float,
             softcap: float | None) -> tuple[Tensor, Tensor]:
    """(output, row log-sum-exp) computed eagerly a block of query rows at a time (float32 softmax)."""
    n_batch, n_heads, n_pos, _ = query.shape
    output = torch.empty(n_batch, n_heads, n_pos, value.shape[-1], dtype=query.dtype, device=query.device)
    lse = torch.empty(n_batch, n_heads, n_pos, dtype=torch.float32, device=query.device)
    step = max(1, ROW_BLOCK_BYTES // (4 * n_batch * n_heads * key.shape[2]))
    for start in range(0, n_pos, step):
        rows = slice(start, min(n_pos, start + step))
        scores = _masked(_scaled(torch.matmul(query[:, :, rows], key.transpose(2, 3)).float(), scaling, softcap),
                         start, causal, allowed)
        lse[:, :, rows] = torch.logsumexp(scores, dim=-1)
        weights = torch.exp(scores - lse[:, :, rows, None]).to(value.dtype)
        output[:, :, rows] = torch.matmul(weights, value)
    return output, lse


def _log_fallback_once(reason: str) -> None:
    if reason not in _fallback_logged:
        _fallback_logged.add(reason)
        log.info("attention reductions: blocked eager attention instead of the fused kernel (%s)", reason)


def reduced_attention_forward(module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                              dropout: float = 0.0, scaling: float | None = None, softcap: float | None = None,
                              **kwargs: Any) -> tuple[Tensor, None]:
    """The module's attention output (the signature of ``transformers``' attention functions); the layer's
    :class:`LayerAttention` goes to the active sink."""
    if getattr(module, "sinks", None) is not None:
        raise NotImplementedError("attention sinks are not supported by attention reductions")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = _repeat_kv(key, groups), _repeat_kv(value, groups)
    n_pos, d_value = query.shape[2], value.shape[-1]
    allowed = None if attention_mask is None else attention_mask[:, :, :, : key.shape[2]]
    if allowed is not None and allowed.dtype != torch.bool:
        allowed = allowed == 0  # an additive float mask: 0 where allowed
    causal = allowed is None and n_pos > 1 and bool(getattr(module, "is_causal", True))
    active = _ACTIVE.get()
    columns = None if active is None else active.columns
    result = None
    if active is not None and active.fused and softcap is None:
        try:
            result = _fused(query, key, value, columns, allowed, causal, scaling)
        except (RuntimeError, NotImplementedError) as error:
            _log_fallback_once(f"{type(error).__name__}: {str(error)[:120]}")
    elif softcap is not None:
        _log_fallback_once("soft-capped scores")
    if result is None:
        extended = value if columns is None else _with_columns(value, columns)
        output, lse = _blocked(query, key, extended, allowed, causal, scaling, softcap)
        mass = None if columns is None else output[..., d_value : d_value + columns.shape[-1]].float()
        result = output[..., :d_value], lse, mass
    output, lse, mass = result
    layer = getattr(module, "layer_idx", None)
    if active is not None and layer is not None:
        active.sink(LayerAttention(int(layer), query, key, lse, scaling, softcap, allowed, causal, mass))
    return output.transpose(1, 2).contiguous(), None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(IMPLEMENTATION, reduced_attention_forward)
    AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # None where plain causal attention needs no mask


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


def supports_reductions(model: HookedModel) -> bool:
    """Whether ``model`` is a TransformerBridge over a Hugging Face model whose every layer has an attention
    bridge (the structure :func:`reduced_attention` needs; exactness is checked separately)."""
    if model_kind(model) is not ModelKind.HF_BRIDGE or not hasattr(wrapped_model(model), "config"):
        return False
    return bool(len(_attention_bridges(model)) == model.cfg.n_layers)


@contextlib.contextmanager
def reduced_attention(model: HookedModel, sink: LayerSink, *, columns: Tensor | None = None,
                      fused: bool = True) -> Iterator[None]:
    """Within the block, ``model``'s forward computes its attention through :func:`reduced_attention_forward` and
    calls ``sink`` with each layer's :class:`LayerAttention`; ``columns`` ``[batch k_pos column]`` are the label
    columns whose attention mass each layer reports. ``fused=False`` uses the blocked eager computation throughout.
    Hooks inside the attention bridges (``hook_pattern``, ``hook_q`` of the bridge's own implementation) do not
    fire; ``hook_in``/``hook_out`` and every other hook do.

    Example::

        with reduced_attention(bridge, lambda layer: print(layer.layer, layer.lse.shape)):
            forward.run(bridge, tokens)
    """
    if not supports_reductions(model):
        raise TypeError("attention reductions need a TransformerBridge over a Hugging Face model")
    from transformer_lens.model_bridge.generalized_components.attention import AttentionBridge

    _register()
    configs = _configs(wrapped_model(model))
    before = [config._attn_implementation for config in configs]
    bridges = _attention_bridges(model)
    token = None
    try:
        for config in configs:
            config._attn_implementation = IMPLEMENTATION
        for bridge in bridges:  # delegate to the wrapped HF module, which calls the registered function
            # bridges redirect setattr
            object.__setattr__(bridge, "forward", types.MethodType(AttentionBridge.forward, bridge))
        token = _ACTIVE.set(_Active(sink, columns, fused))
        yield
    finally:
        if token is not None:
            _ACTIVE.reset(token)
        for bridge in bridges:
            bridge.__dict__.pop("forward", None)
        for config, implementation in zip(configs, before):
            config._attn_implementation = implementation
