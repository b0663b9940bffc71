"""The one place mechprobe runs a model forward to measure it, and the one answer to "which device".

Every measuring forward pass of the library (probes, ablations, means, checks, toy evaluations) goes through
:func:`run` or :func:`cached`, which

- put the model in eval mode for the pass (and restore its mode after), without autograd;
- move what the library built (tokens, masks, any tensor argument, nested in tuples, lists or dicts) to the
  model's device (:func:`model_device`): the user's device is the model's device;
- mark the pass as mechprobe's (:func:`inside_run`), so a test can fail on any forward that bypasses this module
  (tests/conftest.py installs that check for the whole suite, on the CPU: the next stray CPU tensor that would
  crash on a GPU is a forward that did not come through here).

Training forwards (autograd on) are the trainers' own and are not routed here.

Example::

    logits = forward.run(model, tokens, attention_mask=mask)              # tokens may sit on the CPU
    logits = forward.run(model, tokens, fwd_hooks=[("blocks.0.hook_resid_pre", hook)])
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

_INSIDE: contextvars.ContextVar[bool] = contextvars.ContextVar("mechprobe_forward", default=False)


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter (CPU for a model without parameters): where inputs go."""
    for parameter in model.parameters():
        return torch.device(parameter.device)
    return torch.device("cpu")


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it (nested in tuples, lists and dicts) on ``device``; other values as given."""
    if isinstance(value, torch.Tensor):
        return value if value.device == device else value.to(device)
    if isinstance(value, tuple | list):
        return type(value)(to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    return value


def on_model(model: Any, value: Any) -> Any:
    """``value``'s tensors moved to ``model``'s device (:func:`to_device`)."""
    return to_device(value, model_device(model))


def inside_run() -> bool:
    """Whether the current code runs inside :func:`run` / :func:`cached` (what the bypass check reads)."""
    return _INSIDE.get()


@contextlib.contextmanager
def measuring(model: Any) -> Iterator[None]:
    """The block measures ``model``: eval mode, no autograd, marked as mechprobe's. For code that calls a model's
    own methods (a fast path such as ``final_log_probs``) and moves its inputs itself (:func:`on_model`);
    :func:`run` and :func:`cached` enter it for a plain forward."""
    was_training = bool(getattr(model, "training", False))
    token = _INSIDE.set(True)
    if was_training and isinstance(model, nn.Module):
        model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if was_training and isinstance(model, nn.Module):
            model.train()
        _INSIDE.reset(token)


def run(model: Any, *args: Any, fwd_hooks: Sequence[tuple[Any, Any]] = (), **kwargs: Any) -> Any:
    """``model(*args, **kwargs)`` (``run_with_hooks`` when ``fwd_hooks`` are given) in eval mode without autograd,
    every tensor argument on the model's device."""
    device = model_device(model)
    args, kwargs = to_device(args, device), to_device(kwargs, device)
    with measuring(model):
        if fwd_hooks:
            return model.run_with_hooks(*args, fwd_hooks=list(fwd_hooks), **kwargs)
        return model(*args, **kwargs)


def cached(model: Any, *args: Any, names: Sequence[str], **kwargs: Any) -> tuple[Any, Any]:
    """``model.run_with_cache(*args, names_filter=names, **kwargs)`` through the same place as :func:`run`:
    (output, cache of just ``names``)."""
    wanted = set(names)
    device = model_device(model)
    args, kwargs = to_device(args, device), to_device(kwargs, device)
    with measuring(model):
        logits_and_cache: tuple[Any, Any] = model.run_with_cache(*args, names_filter=lambda name: name in wanted,
                                                                 **kwargs)
        return logits_and_cache
