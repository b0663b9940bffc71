"""The once-per-model check that attention reductions (:mod:`probes.core.attention_rows`) reproduce ``hook_pattern``:
where they do not (attention sinks, relative position biases, ALiBi, attention that bypasses ``AttentionInterface``),
the runner reads whole patterns instead."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch
from torch import Tensor

from mechprobe import forward
from probes.core.attention_rows import LayerAttention, reduced_attention
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _in_float32(model: HookedModel) -> Iterator[bool]:
    """Within the block, ``model``'s half-precision parameters and buffers are float32 copies (yields whether any
    were); after it, the original tensors are put back, bit for bit. Out of memory for the copies: nothing changed,
    yields False."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()]
               if t.dtype in (torch.float16, torch.bfloat16)}
    originals: dict[int, Tensor] = {}
    try:
        with torch.inference_mode(False), torch.no_grad():
            for key, tensor in tensors.items():
                originals[key] = tensor.data
                tensor.data = tensor.data.float()
    except torch.OutOfMemoryError:
        log.info("no room for a float32 copy of the weights: the reductions are checked in half precision")
        for key, original in originals.items():
            tensors[key].data = original
        originals.clear()
    try:
        yield bool(originals)
    finally:
        for key, original in originals.items():
            tensors[key].data = original


def reductions_match_hook_pattern(model: HookedModel, tokens: Tensor, *, atol: float | None = None) -> bool:
    """Whether the reductions reproduce every layer's ``hook_pattern`` on ``tokens`` (a short input): the rows
    rebuilt from ``q``, ``k`` and the fused kernel's log-sum-exp, the entries gathered from them
    (:meth:`LayerAttention.entries` at every ``(b, q, k)``, the probes' path), and a label column's mass, within
    ``atol`` (default 1e-4).

    A half-precision model is compared in float32: its half-precision weights and buffers are float32 copies for the
    check (put back bit for bit after). In half precision the eager pattern and the fused kernel round differently
    and the two forwards drift apart layer by layer (a random bfloat16 model of Llama-3.2-1B's attention shape
    differed by 0.0101 at 48 tokens, with sharper attention by up to 0.8 at the fourth layer), so a fixed tolerance
    refused standard models and sent 32,768-token runs to whole ``[T, T]`` patterns: out of memory on a 139 GB
    GPU. Where there is no room for the copy, the comparison stays in half precision with 2 eps of the dtype plus 4 eps
    relative. Attention the reductions do not model (ALiBi, relative position biases, sinks) moves whole rows."""
    with _in_float32(model) as upcast:
        if not upcast and any(t.dtype in (torch.float16, torch.bfloat16) for t in model.parameters()):
            log.info("%s: attention reductions checked in half precision", ModelInfo.of(model).name)
        return _reductions_match(model, tokens, atol)


def _reductions_match(model: HookedModel, tokens: Tensor, atol: float | None) -> bool:
    n_layers = model.cfg.n_layers
    names = [pattern_hook(layer) for layer in range(n_layers)]
    columns = (tokens % 2).to(torch.float32)[..., None]
    got: dict[int, tuple[Tensor, Tensor, Tensor | None]] = {}
    n_batch, n_pos = tokens.shape
    device = forward.model_device(model)  # every (b, q, k) entry, gathered as the probes gather theirs
    b, q, k = (index.flatten() for index in torch.meshgrid(
        torch.arange(n_batch, device=device), torch.arange(n_pos, device=device), torch.arange(n_pos, device=device),
        indexing="ij"))

    def keep(attention: LayerAttention) -> None:
        got[attention.layer] = (attention.rows(0, attention.shape[2]), attention.entries(b, q, k),
                                attention.column_mass)

    with torch.inference_mode():
        _, cache = forward.cached(model, tokens, names=names)
        try:
            with reduced_attention(model, keep, columns=forward.on_model(model, columns)):
                forward.run(model, tokens)
        except Exception as error:  # any failure means: not this model
            log.info("attention reductions do not run on %s: %s", ModelInfo.of(model).name, error)
            return False
    if sorted(got) != list(range(n_layers)):
        return False
    for layer in range(n_layers):
        rows, entries, mass = got[layer]
        expected = cache[names[layer]].float()
        dtype = cache[names[layer]].dtype
        half = dtype not in (torch.float32, torch.float64)
        eps = torch.finfo(dtype).eps
        tolerance = atol if atol is not None else (2 * eps if half else 1e-4)
        relative = 4 * eps if half else 0.0
        expected_mass = expected @ forward.on_model(model, columns)[:, None]
        if (rows.shape != expected.shape or not torch.allclose(rows, expected, rtol=relative, atol=tolerance)
                or not torch.allclose(entries, expected[b, :, q, k], rtol=relative, atol=tolerance)
                or mass is None or not torch.allclose(mass, expected_mass, rtol=relative, atol=tolerance)):
            worst = (rows - expected).abs().max().item() if rows.shape == expected.shape else float("nan")
            log.info("attention reductions differ from hook_pattern at layer %d on %s (largest difference %.3g)",
                     layer, ModelInfo.of(model).name, worst)
            return False
    return True
