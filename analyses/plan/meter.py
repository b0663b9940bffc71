"""A meter of one forward pass: live tensor bytes and their peak, the largest tensors and where they were made,
operator calls per layer (device work apart from host work), attention kernel calls, FLOPs and bytes moved.

:class:`Meter` is a ``TorchDispatchMode``: every aten operator call passes through it. A call's outputs whose
untyped storage it has not seen before (and that is not one of the call's inputs' storages) are new memory: their
storage's bytes are added to the live total, and subtracted when the storage is freed (``weakref.finalize``). Views
share their base's storage and are counted once; tensors made before the meter (the weights, the token ids) are
not counted, so the peak is what the pass adds on top of the loaded model, as ``torch.cuda.max_memory_allocated``
minus the memory allocated before it. On ``meta`` tensors nothing is computed and nothing allocated, so a pass at a
GPU's shape costs seconds on a CPU; on real tensors the same meter gives the same numbers (tests/analyses/plan).

A call is device work when one of its tensors (inputs or outputs) is on ``device_type`` (``meta`` for the ledger);
a call whose tensors are all on the CPU is host work (reading token ids, building small index tensors), counted
apart. FLOPs are counted with the formulas of ``torch.utils.flop_counter`` (the CPU flash kernel counted as the
CUDA one), call by call, so ``FlopCounterMode`` in the same run (:func:`metered`) gives the same total. A composite
operator (``linear``, ``matmul``, ``to``) is one call, as torch dispatches it under ``inference_mode``, and runs
its parts through the meter, so their temporaries count; each part that runs a kernel is a kernel in
:attr:`Meter.kernels` with its FLOPs and the bytes it reads and writes (a view moves nothing). Calls are attributed
to the layer whose forward is running (:meth:`Meter.attribute_layers`: a pre-hook on each decoder layer sets the
current layer), else to ``None``.
"""

from __future__ import annotations

import contextlib
import traceback
import weakref
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import FlopCounterMode, flop_registry, sdpa_flop

aten = torch.ops.aten

ATTENTION_KERNELS = {
    "_scaled_dot_product_flash_attention": "flash",
    "_scaled_dot_product_efficient_attention": "efficient",
    "_scaled_dot_product_cudnn_attention": "cudnn",
    "_scaled_dot_product_flash_attention_for_cpu": "flash (cpu)",
    "_flash_attention_forward": "flash",
    "_efficient_attention_forward": "efficient",
}
"""Fused attention kernels (aten packet name -> the route they mean)."""


STACK_FILES = ("probes/", "mechprobe/", "analyses/", "transformers/", "transformer_lens/")
"""Frames kept in an allocation's stack: the project's and the model libraries' (not torch's)."""


@dataclass(frozen=True)
class Allocation:
    """One new storage: its bytes, the shape and dtype of the tensor that made it, the operator, the layer running
    (None: outside the decoder layers) and, for the big ones, the Python frames that made it (innermost last)."""

    nbytes: int
    shape: tuple[int, ...]
    dtype: str
    op: str
    layer: int | None
    stack: tuple[str, ...] = ()

    def describe(self) -> str:
        where = "outside layers" if self.layer is None else f"layer {self.layer}"
        return f"{self.nbytes / 2**20:,.1f} MiB {self.dtype}{list(self.shape)} from aten.{self.op} ({where})"


@dataclass
class LayerCalls:
    """The operator calls of one layer (or of everything outside the layers)."""

    device: Counter[str] = field(default_factory=Counter)
    host: Counter[str] = field(default_factory=Counter)
    attention: Counter[str] = field(default_factory=Counter)  # route -> calls (flash, efficient, eager, blocked...)
    kernels: Counter[tuple[int, int]] = field(default_factory=Counter)  # (FLOPs done, bytes moved) -> calls


class Meter(TorchDispatchMode):
    """Adds up the bytes of live tensors during the block and counts operator calls (see the module docstring).

    ``keep`` is how many of the largest allocations (and of the tensors live at the peak) are kept, with their
    stack when at least ``stack_bytes``; ``n_pos`` (the sequence length) lets matmul outputs be read as
    attention scores: ``[..., n_pos, n_pos]`` is an eager pattern, ``[..., rows < n_pos, n_pos]`` a blocked one.

    Example::

        with torch.device("meta"):
            model = make_model()
        with Meter(n_pos=2048) as meter:
            model(tokens)
        meter.peak_bytes, meter.largest[0].describe()
    """

    def __init__(self, *, device_type: str = "meta", n_pos: int | None = None, keep: int = 8,
                 stack_bytes: int = 64 * 2**20) -> None:
        super().__init__()
        self.device_type = device_type
        self.n_pos = n_pos
        self.keep = keep
        self.stack_bytes = stack_bytes
        self.live_bytes = 0
        self.peak_bytes = 0
        self.peak_live: list[Allocation] = []  # the largest tensors live at the peak
        self.largest: list[Allocation] = []  # the largest allocations of the pass, largest first
        self.calls: dict[int | None, LayerCalls] = {}
        self.layer: int | None = None
        self._live: dict[int, Allocation] = {}  # id(storage) -> allocation, while the storage lives
        self._at_peak = False
        self.flops = 0  # as torch.utils.flop_counter counts them
        self._depth = 0  # nesting of operator calls: only the outermost counts as a call
        self._route: str | None = None  # the attention route of the outermost call running

    # -- layers ---------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def attribute_layers(self, layers: Sequence[torch.nn.Module]) -> Iterator[None]:
        """Within the block, calls made while ``layers[l]``'s forward runs count for layer ``l``."""
        handles = []
        for index, module in enumerate(layers):
            handles.append(module.register_forward_pre_hook(self._entering(index)))
            handles.append(module.register_forward_hook(self._leaving, always_call=True))  # on an early stop too
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _entering(self, index: int) -> Any:
        def enter(module: Any, args: Any) -> None:
            self.layer = index

        return enter

    def _leaving(self, module: Any, args: Any, output: Any) -> None:
        self.layer = None

    # -- dispatch -------------------------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        top = self._depth == 0
        if top:
            self._route = None
        self._depth += 1
        try:
            out = NotImplemented
            if func._overloadpacket.__name__ not in ATTENTION_KERNELS:
                with self:  # a composite operator runs its parts through the meter: their temporaries count
                    out = func.decompose(*args, **kwargs)
            leaf = out is NotImplemented
            if leaf:
                out = func(*args, **kwargs)
        finally:
            self._depth -= 1
        inputs = tensors_in((args, kwargs))
        outputs = tensors_in(out)
        name = func._overloadpacket.__name__
        if leaf:
            self._kernel(func, args, kwargs, out, inputs, outputs)
        route = self._attention_route(name, outputs)
        if route is not None and (self._route is None or route in ATTENTION_KERNELS.values()):
            self._route = route
        if outputs:
            seen = {id(t.untyped_storage()) for t in inputs}
            for tensor in outputs:
                self._count(tensor, name, seen)
        if top:
            calls = self.calls.setdefault(self.layer, LayerCalls())
            on_device = any(t.device.type == self.device_type for t in (*inputs, *outputs))
            (calls.device if on_device else calls.host)[name] += 1
            if self._route is not None:
                calls.attention[self._route] += 1
        return out

    def _kernel(self, func: Any, args: Any, kwargs: Any, out: Any, inputs: list[torch.Tensor],
                outputs: list[torch.Tensor]) -> None:
        """Count a call that runs a kernel (not a composite): its FLOPs and the bytes it reads and writes on the
        device (nothing for a view, whose outputs share an input's storage)."""
        device = [t for t in (*inputs, *outputs) if t.device.type == self.device_type]
        if not device:
            return
        read = {id(t.untyped_storage()) for t in inputs}
        if outputs and all(id(t.untyped_storage()) in read for t in outputs):
            return  # a view or an in-place update of metadata: no kernel
        moved = sum(min(t.numel() * t.element_size(), t.untyped_storage().nbytes()) for t in device)
        flops, timed = _flops(func, args, kwargs, out)
        self.flops += flops
        self.calls.setdefault(self.layer, LayerCalls()).kernels[(timed, moved)] += 1

    def _attention_route(self, name: str, outputs: list[torch.Tensor]) -> str | None:
        if name in ATTENTION_KERNELS:
            return ATTENTION_KERNELS[name]
        # scores are [batch*head rows keys] (bmm) or [batch head rows keys] (matmul); a linear layer's output is
        # [(batch) tokens features] from mm / a 3-D matmul, even where features == T
        batched = {"bmm": 3, "baddbmm": 3, "matmul": 4}.get(name)
        if batched is not None and self.n_pos is not None and outputs and outputs[0].dim() >= batched:
            rows, keys = outputs[0].shape[-2:]
            if keys == self.n_pos and rows > 1:
                return "eager pattern" if rows == self.n_pos else "blocked eager"
        return None

    def _count(self, tensor: torch.Tensor, op: str, seen: set[int]) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in seen or key in self._live:
            return
        seen.add(key)
        nbytes = storage.nbytes()
        stack: tuple[str, ...] = ()
        if nbytes >= self.stack_bytes and self._would_keep(nbytes):
            stack = _project_stack()
        allocation = Allocation(nbytes, tuple(tensor.shape), str(tensor.dtype).removeprefix("torch."), op,
                                self.layer, stack)
        self._live[key] = allocation
        weakref.finalize(storage, self._free, key)
        self.live_bytes += nbytes
        if self._would_keep(nbytes):
            self.largest = sorted([*self.largest, allocation], key=lambda a: -a.nbytes)[: self.keep]
        if self.live_bytes > self.peak_bytes:
            self.peak_bytes = self.live_bytes
            self._at_peak = True

    def _would_keep(self, nbytes: int) -> bool:
        return len(self.largest) < self.keep or nbytes > self.largest[-1].nbytes

    def _free(self, key: int) -> None:
        if self._at_peak:  # the live set is at its highest: keep its largest tensors before it shrinks
            self.peak_live = sorted(self._live.values(), key=lambda a: -a.nbytes)[: self.keep]
            self._at_peak = False
        allocation = self._live.pop(key, None)
        if allocation is not None:
            self.live_bytes -= allocation.nbytes

    def __exit__(self, *exc: Any) -> Any:
        if self._at_peak:
            self.peak_live = sorted(self._live.values(), key=lambda a: -a.nbytes)[: self.keep]
            self._at_peak = False
        return super().__exit__(*exc)

    # -- totals ---------------------------------------------------------------------------------------------------
    def device_calls(self, layer: int | None = ...) -> int:  # type: ignore[assignment]
        """Device operator calls in ``layer`` (default: in the whole pass)."""
        chosen = self.calls.values() if layer is ... else [self.calls.get(layer, LayerCalls())]
        return sum(sum(c.device.values()) for c in chosen)

    @property
    def kernels(self) -> Counter[tuple[int, int]]:
        """(FLOPs done, bytes moved) of each device kernel of the pass -> how many ran."""
        total: Counter[tuple[int, int]] = Counter()
        for calls in self.calls.values():
            total += calls.kernels
        return total

    def host_calls(self) -> int:
        return sum(sum(c.host.values()) for c in self.calls.values())

    def op_counts(self) -> Counter[str]:
        """Calls per aten operator over the whole pass, device and host together."""
        total: Counter[str] = Counter()
        for calls in self.calls.values():
            total += calls.device
            total += calls.host
        return total


def tensors_in(value: Any) -> list[torch.Tensor]:
    """The tensors in ``value`` (nested in tuples, lists and dicts)."""
    return [leaf for leaf in tree_leaves(value) if isinstance(leaf, torch.Tensor)]


def _flops(func: Any, args: Any, kwargs: Any, out: Any) -> tuple[int, int]:
    """(the FLOPs ``FlopCounterMode`` counts for one call, the FLOPs it does): a causal attention kernel skips the
    masked half of the scores, which the counter counts. The CPU flash kernel counts as the CUDA one."""
    packet = func._overloadpacket
    formula = sdpa_flop if packet is aten._scaled_dot_product_flash_attention_for_cpu else flop_registry.get(packet)
    if formula is None:
        return 0, 0
    if packet.__name__ in ATTENTION_KERNELS:
        args = _full_heads(args)
    flops = int(formula(*args, **kwargs, out_val=out))
    causal = packet.__name__ in ATTENTION_KERNELS and _is_causal(packet.__name__, args, kwargs)
    return flops, flops // 2 if causal else flops


def _full_heads(args: Any) -> Any:
    """An attention kernel's arguments with grouped key / value heads (GQA) stood in for by meta tensors with the
    query's head count: the kernel does the FLOPs of full heads, and torch < 2.12's counter refuses grouped shapes."""
    query, key, value = args[:3]
    heads = query.shape[-3]
    if key.dim() != 4 or key.shape[-3] == heads:
        return args
    full = [torch.empty((*t.shape[:-3], heads, *t.shape[-2:]), dtype=t.dtype, device="meta") for t in (key, value)]
    return (query, *full, *args[3:])


def _is_causal(name: str, args: Any, kwargs: Any) -> bool:
    position = 6 if name == "_scaled_dot_product_efficient_attention" else 4
    return bool(kwargs.get("is_causal", args[position] if len(args) > position else False))


def _project_stack() -> tuple[str, ...]:
    frames = traceback.extract_stack()[:-3]
    return tuple(f"{_short(frame.filename)}:{frame.lineno} {frame.name}" for frame in frames
                 if any(part in frame.filename for part in STACK_FILES) and "/analyses/plan/" not in frame.filename)


def _short(path: str) -> str:
    for part in STACK_FILES:
        where = path.rfind(part)
        if where >= 0:
            return path[where:]
    return path


def flop_counter() -> FlopCounterMode:
    """``FlopCounterMode`` that counts the CPU flash kernel as the CUDA one (torch registers no formula for it)."""
    raw = sdpa_flop.__wrapped__  # type: ignore[attr-defined]  # FlopCounterMode wraps the formulas it is given
    return FlopCounterMode(display=False, custom_mapping={aten._scaled_dot_product_flash_attention_for_cpu: raw})


@contextlib.contextmanager
def metered(meter: Meter, layers: Sequence[torch.nn.Module] = ()) -> Iterator[FlopCounterMode]:
    """Run the block under ``meter`` and torch's FLOP counter (yielded: ``get_total_flops()`` after the block
    equals ``meter.flops``), with calls attributed to ``layers``."""
    flops = flop_counter()
    with flops, meter, meter.attribute_layers(layers):
        yield flops
