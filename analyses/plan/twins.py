"""The data a pass reads, on the CPU, while the model runs on ``meta``.

A ``meta`` tensor has a shape and no values, so code that reads values after moving the tokens to the model's
device (``bool(mask.any())``, ``mask.nonzero()``, ``int(tokens.max())``, ``result.cpu()``) cannot run on it. Within
:class:`CpuTwins` every ``meta`` tensor computed only from data (the token ids, index and mask tensors built from
them, small constants) has a CPU twin: the same operator run on the inputs' twins, outside every dispatch mode, so
the meter never sees it. A read of such a tensor is answered from its twin, and operators whose output shape depends
on values (``nonzero``, boolean indexing) take their shape from it. The library's own code runs unchanged: the data
is read on the CPU exactly as a GPU run reads it on the GPU and copies the answer back.

Values computed from the weights have no twin (there are none). Reading one is answered by assumption and logged
in :attr:`CpuTwins.assumed`: a boolean read is True (a check that compares two routes' losses passes, as it does on
a real model whose shortcuts are exact), a number is 0, and a copy to the CPU is zeros of its shape (a probe's
result: the ledger measures the cost, not the values). A twin is kept only for tensors up to ``max_numel``
elements; a tensor changed in place by an operator whose inputs have no twin loses its twin.
"""

from __future__ import annotations

import traceback
import weakref
from collections import Counter
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from analyses.plan.meter import tensors_in

aten = torch.ops.aten
INDEXING = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._index_put_impl_.default}
READS = {aten._local_scalar_dense.default, aten.is_nonzero.default, aten.equal.default, aten.allclose.default}


class CpuTwins(TorchDispatchMode):
    """Keep a CPU twin of every data-only ``meta`` tensor and answer value reads from it (see the module
    docstring). ``assumed`` counts the reads answered without data, by operator and the frame that asked."""

    def __init__(self, *, max_numel: int = 2**24) -> None:
        super().__init__()
        self.max_numel = max_numel
        self._twins: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._stale: set[int] = set()  # ids of meta storages changed without their twins
        self.assumed: Counter[str] = Counter()

    def twin(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The CPU value of ``tensor``: itself on the CPU, its twin on ``meta`` (None when it has none)."""
        if tensor.device.type != "meta":
            return tensor
        if id(tensor.untyped_storage()) in self._stale:
            return None
        found = self._twins.get(tensor)
        return found if isinstance(found, torch.Tensor) else None

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        metas = [t for t in tensors_in((args, kwargs)) if t.device.type == "meta"]
        twins = [self.twin(t) for t in metas]
        if metas and all(t is None for t in twins) and func not in READS and func not in INDEXING \
                and func is not aten._to_copy.default:
            return func(*args, **kwargs)  # weights and what they made: no values anywhere (the common case)
        known = all(t is not None for t in twins)
        flat, spec = tree_flatten((args, kwargs))
        if func in READS and metas:
            return self._read(func, flat, spec, known)
        if func is aten._to_copy.default and metas and _target_device(kwargs) == "cpu":
            return self._copy_out(metas[0], twins[0], kwargs)
        if func in INDEXING and not known:
            args = (args[0], self._long_indices(args[1]), *args[2:])
            flat, spec = tree_flatten((args, kwargs))
        wanted = known and (bool(metas) or _makes_meta(kwargs))
        try:
            out = func(*args, **kwargs)
        except (NotImplementedError, RuntimeError):  # a shape that depends on values: take it from the twins
            cpu_out = self._on_cpu(func, flat, spec) if wanted else None
            if cpu_out is None:
                raise
            out = tree_map(lambda t: _meta_like(t) if isinstance(t, torch.Tensor) else t, cpu_out)
        else:
            small = all(t.numel() <= self.max_numel for t in tensors_in(out))
            cpu_out = self._on_cpu(func, flat, spec) if wanted and small else None
        self._pair(out, cpu_out, func, metas)
        return out

    def _long_indices(self, indices: list[torch.Tensor | None]) -> list[torch.Tensor | None]:
        """Boolean indices with twins as the integer indices they select (what indexing computes first, on values)."""
        expanded: list[torch.Tensor | None] = []
        for index in indices:
            twin = None if index is None or index.dtype != torch.bool else self.twin(index)
            if twin is None:
                expanded.append(index)
                continue
            with _disable_current_modes():
                positions = twin.nonzero().unbind(1)
            for position in positions:
                with _disable_current_modes():
                    on_meta = position.to("meta")
                self._twins[on_meta] = position
                expanded.append(on_meta)
        return expanded

    def _on_cpu(self, func: Any, flat: list[Any], spec: Any) -> Any:
        """``func`` on the twins (None when it fails)."""
        def cpu(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                return self.twin(value)
            return torch.device("cpu") if isinstance(value, torch.device) and value.type == "meta" else value

        args, kwargs = tree_unflatten([cpu(v) for v in flat], spec)
        if kwargs.get("device") is not None:
            kwargs = {**kwargs, "device": torch.device("cpu")}
        try:
            with _disable_current_modes():
                out = func(*args, **kwargs)
        except Exception:  # no CPU kernel, a bad guess at the arguments: the tensor just has no twin
            return None
        return out

    def _pair(self, out: Any, cpu_out: Any, func: Any, metas: list[torch.Tensor]) -> None:
        outs = tree_flatten(out)[0]
        if cpu_out is not None:
            for value, twin in zip(outs, tree_flatten(cpu_out)[0]):
                if isinstance(value, torch.Tensor) and value.device.type == "meta" and isinstance(twin, torch.Tensor):
                    self._twins[value] = twin
                    self._stale.discard(id(value.untyped_storage()))
            return
        if func._schema.is_mutable:  # changed in place from values without twins: their twins are stale
            written = {id(t.untyped_storage()) for t in outs if isinstance(t, torch.Tensor)}
            for tensor in metas:
                key = id(tensor.untyped_storage())
                if key in written and key not in self._stale:
                    self._stale.add(key)
                    weakref.finalize(tensor.untyped_storage(), self._stale.discard, key)

    def _read(self, func: Any, flat: list[Any], spec: Any, known: bool) -> Any:
        if known:
            return self._on_cpu(func, flat, spec)
        tensor = next(t for t in flat if isinstance(t, torch.Tensor) and t.device.type == "meta")
        self._note(func)
        if func is aten._local_scalar_dense.default and tensor.dtype != torch.bool:
            return 0 if not tensor.dtype.is_floating_point else 0.0
        return True

    def _copy_out(self, tensor: torch.Tensor, twin: torch.Tensor | None, kwargs: dict[str, Any]) -> torch.Tensor:
        dtype = kwargs.get("dtype") or tensor.dtype
        if twin is not None:
            return twin.to(dtype=dtype, copy=True)
        self._note(aten._to_copy.default)
        with _disable_current_modes():
            return torch.zeros(tensor.shape, dtype=dtype)

    def _note(self, func: Any) -> None:
        frame = next((f for f in reversed(traceback.extract_stack()[:-3])
                      if "/analyses/plan/" not in f.filename and "/torch/" not in f.filename), None)
        where = "?" if frame is None else f"{frame.filename.rsplit('/', 2)[-2:][-1]}:{frame.lineno}"
        self.assumed[f"{func._overloadpacket.__name__} at {where}"] += 1


def _target_device(kwargs: dict[str, Any]) -> str | None:
    device = kwargs.get("device")
    return None if device is None else torch.device(device).type


def _makes_meta(kwargs: dict[str, Any]) -> bool:
    return _target_device(kwargs) == "meta"


def _meta_like(tensor: torch.Tensor) -> torch.Tensor:
    with _disable_current_modes():
        return torch.empty_strided(tensor.shape, tensor.stride(), dtype=tensor.dtype, device="meta")

