"""The once-per-model check that attention reductions (:mod:`probes.core.attention_rows`) reproduce ``hook_pattern``:
where they do not (attention sinks, relative position biases, ALiBi, attention that bypasses ``AttentionInterface``),
the runner reads whole patterns instead."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import Tensor

from mechprobe import forward
from probes.core.attention_rows import LayerAttention, reduced_attention
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel

log = logging.getLogger(__name__)


_HALF = (torch.float16, torch.bfloat16)


@contextlib.contextmanager
def _in_float32(model: HookedModel) -> Iterator[bool]:
    """Within the block, ``model``'s half-precision parameters and buffers are float32 copies (yields whether any
    were); after it, the original tensors are put back, bit for bit. Out of memory for the copies: nothing changed,
    yields False. Twice the weights' bytes: the fallback of :func:`_float32_while_running`."""
    tensors = {id(t): t for t in [*model.parameters(), *model.buffers()] if t.dtype in _HALF}
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


def _half_bytes(module: torch.nn.Module, recurse: bool) -> int:
    return sum(t.numel() * 4 for t in module.parameters(recurse=recurse) if t.dtype in _HALF)


def _swap_units(model: HookedModel) -> list[tuple[torch.nn.Module, str]]:
    """``(module, how)`` pairs covering every half-precision parameter once, top down: a module whose subtree's
    float32 copy is no larger than the largest single module's own is one unit (``"subtree"``: a decoder layer), a
    larger one (or a ``ModuleList``, which is never called) gives its own parameters (``"own"``) and its children are
    split further. A unit holding an embedding keeps its weights and hands its output on in float32 (``"rows"``:
    exact, and no copy of the table)."""
    root = cast(torch.nn.Module, model)
    budget = max((_half_bytes(m, recurse=False) for m in root.modules()), default=0)
    units: list[tuple[torch.nn.Module, str]] = []
    seen: set[int] = set()

    def split(module: torch.nn.Module) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        container = isinstance(module, (torch.nn.ModuleList, torch.nn.ModuleDict))  # never called itself
        if not container and _half_bytes(module, recurse=True) <= budget:
            if _half_bytes(module, recurse=True):
                embeds = any(isinstance(m, torch.nn.Embedding) for m in module.modules())
                units.append((module, "rows" if embeds else "subtree"))
            seen.update(id(m) for m in module.modules())
            return
        if _half_bytes(module, recurse=False):
            units.append((module, "rows" if isinstance(module, torch.nn.Embedding) else "own"))
        for child in module.children():
            split(child)

    split(root)
    return units


@contextlib.contextmanager
def _float32_while_running(model: HookedModel) -> Iterator[bool]:
    """Within the block, each unit of :func:`_swap_units` (a decoder layer, a module's own weights) holds float32
    copies of its half-precision parameters only while it runs (a forward pre-hook swaps them in, a forward hook puts
    the originals back, bit for bit), the embedding hands its rows on in float32 (exact) and half-precision buffers
    are float32 throughout: the forward computes in float32 with one unit's copy alive at a time, a decoder layer's
    (243 MB for Llama-3.2-1B) or the output head's table while the logits are made (1 GB there), where a whole copy
    takes twice the weights' bytes (4.7 GB beside its 2.5 GB: the suite's whole peak on an H200 at 8k tokens).
    Yields whether any tensor was half precision. A parameter read outside its unit's call meets a dtype mismatch (a
    RuntimeError): :func:`reductions_match_hook_pattern` then takes the whole copy."""
    swapped: dict[int, tuple[Tensor, Tensor]] = {}  # id -> (parameter, its original data) while swapped
    calls: list[list[int]] = []  # per running unit, the parameters it swapped in
    handles: list[Any] = []

    def rows_in_float32(module: torch.nn.Module, args: Any, output: Any) -> Any:
        return output.float() if isinstance(output, Tensor) and output.dtype in _HALF else output

    def swapper(subtree: bool) -> tuple[Any, Any]:
        def swap_in(module: torch.nn.Module, args: Any) -> None:
            mine = []
            with torch.inference_mode(False), torch.no_grad():
                for tensor in module.parameters(recurse=subtree):
                    if tensor.dtype in _HALF and id(tensor) not in swapped:
                        swapped[id(tensor)] = (tensor, tensor.data)
                        tensor.data = tensor.data.float()
                        mine.append(id(tensor))
            calls.append(mine)

        def swap_out(module: torch.nn.Module, args: Any, output: Any) -> None:
            for key in calls.pop() if calls else []:
                tensor, original = swapped.pop(key)
                tensor.data = original

        return swap_in, swap_out

    buffers = [b for b in model.buffers() if b.dtype in _HALF]
    kept = [(b, b.data) for b in buffers]
    try:
        with torch.inference_mode(False), torch.no_grad():
            for buffer in buffers:
                buffer.data = buffer.data.float()
        for module, how in _swap_units(model):
            if how == "rows":
                handles.append(module.register_forward_hook(rows_in_float32))
                continue
            swap_in, swap_out = swapper(how == "subtree")
            handles.append(module.register_forward_pre_hook(swap_in))
            handles.append(module.register_forward_hook(swap_out))
        yield bool(kept) or bool(handles)
    finally:
        for handle in handles:
            handle.remove()
        for tensor, original in swapped.values():  # a forward that raised midway
            tensor.data = original
        swapped.clear()
        for buffer, original in kept:
            buffer.data = original


def reductions_match_hook_pattern(model: HookedModel, tokens: Tensor, *, atol: float | None = None) -> bool:
    """Whether the reductions reproduce every layer's ``hook_pattern`` on ``tokens`` (a short input): the rows
    rebuilt from ``q``, ``k`` and the fused kernel's log-sum-exp, the entries gathered from them
    (:meth:`LayerAttention.entries` at every ``(b, q, k)``, the probes' path), and a label column's mass, within
    ``atol`` (default 1e-4).

    A half-precision model is compared in float32, each module's weights upcast while it runs
    (:func:`_float32_while_running`; where that forward fails, a float32 copy of every weight for the check, put back
    bit for bit after). In half precision the eager pattern and the fused kernel round differently and the two
    forwards drift apart layer by layer (a random bfloat16 model of Llama-3.2-1B's attention shape differed by 0.0101
    at 48 tokens, with sharper attention by up to 0.8 at the fourth layer), so a fixed tolerance refused standard
    models and sent 32,768-token runs to whole ``[T, T]`` patterns: out of memory on a 139 GB GPU. Where there is no
    room for the copy, the comparison stays in half precision with 2 eps of the dtype plus 4 eps relative. Attention
    the reductions do not model (ALiBi, relative position biases, sinks) moves whole rows."""
    if any(t.dtype in _HALF for t in model.parameters()):
        with _float32_while_running(model):
            try:
                with torch.inference_mode():
                    forward.run(model, tokens)
                runs = True
            except RuntimeError as error:
                log.info("%s: a module's weights are read outside its call (%s); the check copies every weight to "
                         "float32", ModelInfo.of(model).name, str(error)[:120])
                runs = False
            if runs:
                return _reductions_match(model, tokens, atol)
    with _in_float32(model) as upcast:
        if not upcast and any(t.dtype in _HALF for t in model.parameters()):
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
