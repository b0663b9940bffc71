"""A probe's settings derived from its constructor: each ``__init__`` parameter read back and described as JSON.

:meth:`probes.Probe.settings` uses :func:`constructor_settings`, so no probe keeps a hand-written
list of its settings that a new argument could miss. The rule a probe follows: store each
constructor argument on ``self`` under the parameter's own name (normalised as the probe uses it).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

LISTED_TENSOR_SIZE = 256  # integer tensors up to this many entries are written out; larger ones as a fingerprint


@functools.cache
def constructor_parameters(cls: type[object]) -> tuple[str, ...]:
    """The named parameters of ``cls.__init__`` (``self``, ``*args`` and ``**kwargs`` left out)."""
    skip = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    return tuple(p.name for p in parameters if p.kind not in skip)


def describe_setting(value: Any) -> Any:
    """``value`` as JSON: numbers, text and None as they are; sequences and mappings item by item; small
    integer tensors as lists, other tensors as their shape and sha256; objects with ``settings()`` by it;
    anything else by its ``repr``."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Tensor):
        if not value.dtype.is_floating_point and value.numel() <= LISTED_TENSOR_SIZE:
            return value.tolist()
        data = value.detach().to("cpu", torch.float64 if value.dtype.is_floating_point else torch.int64).contiguous()
        return {"shape": list(value.shape), "sha256": hashlib.sha256(data.numpy().tobytes()).hexdigest()}
    if isinstance(value, Mapping):
        return {str(key): describe_setting(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, range)):
        return [describe_setting(item) for item in value]
    if callable(getattr(value, "settings", None)):
        return value.settings()
    return repr(value)


def constructor_settings(probe: Any) -> dict[str, Any]:
    """``{parameter: described value}`` for every constructor parameter of ``probe``'s class."""
    # a class is hashable; typeshed's Hashable protocol does not match a class object's unbound __hash__
    parameters = constructor_parameters(type(probe))  # type: ignore[arg-type]
    missing = [name for name in parameters if not hasattr(probe, name)]
    if missing:
        raise TypeError(
            f"{type(probe).__name__} must store each constructor argument as an attribute of the same name "
            f"(its settings are read back from them); missing: {', '.join(missing)}."
        )
    return {name: describe_setting(getattr(probe, name)) for name in parameters}
