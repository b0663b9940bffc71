"""The bypass check behind issue 35's device rule, installed for the whole suite by tests/conftest.py.

Every measuring forward pass of the library must go through :mod:`mechprobe.forward`, the one place that moves
what the library built to the model's device. A global forward pre-hook sees every ``HookPoint`` that fires, so
every forward of every hooked model (a TransformerBridge, a HookedTransformer, a toy ``HookedRootModule``), however
it was started (``model(...)``, ``run_with_hooks``, ``run_with_cache``, ``model.forward``). One that is not a
training step (``model(...)`` in train mode with autograd on), runs outside ``mechprobe.forward`` and was started
by the project's code (not by a test's own reference computation) is recorded with its call site and fails the
test. On the CPU every tensor is on the model's device, so this is what stands in for a GPU: a forward that did
not come through the choke point is where the next stray CPU tensor would crash.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformer_lens.hook_points import HookPoint

from mechprobe import forward

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tuple(str(ROOT / name) + "/" for name in ("mechprobe", "probes", "toymodels", "analyses", "benchmarks"))
TESTS = str(ROOT / "tests") + "/"

bypasses: list[str] = []


def _call_site() -> str | None:
    """``file:line`` of the project code that started the model, or None when a test (or nothing of ours) did: the
    first frame of ours outside the outermost module method on the stack (the model's own code is not a caller)."""
    frames = []
    frame = sys._getframe(2)
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    inside = [i for i, f in enumerate(frames) if isinstance(f.f_locals.get("self"), nn.Module)]
    for frame in frames[max(inside) + 1 if inside else 0:]:
        name = frame.f_code.co_filename
        if name.startswith(TESTS):
            return None
        if name.startswith(PROJECT):
            return f"{Path(name).relative_to(ROOT)}:{frame.f_lineno} ({frame.f_code.co_name})"
    return None


_training_steps: list[bool] = []  # per root model call in progress (called as model(...)): is it a training step?


def _is_root(module: nn.Module) -> bool:
    return hasattr(type(module), "run_with_hooks")


def _enter(module: nn.Module, args: Any) -> None:
    if _is_root(module):
        _training_steps.append(torch.is_grad_enabled() and module.training)


def _leave(module: nn.Module, args: Any, output: Any) -> None:
    if _is_root(module) and _training_steps:
        _training_steps.pop()


def _check(module: nn.Module, args: Any) -> None:
    if not isinstance(module, HookPoint) or forward.inside_run() or (_training_steps and _training_steps[-1]):
        return
    if torch.is_grad_enabled() and module.training:  # a toy's own fast path in a training step (a method call)
        return
    site = _call_site()
    if site is not None and site not in {entry.rsplit(" from ", 1)[-1] for entry in bypasses}:
        bypasses.append(f"a hooked model ran outside mechprobe.forward from {site}")


def install() -> None:
    """Install the check for the rest of the process."""
    nn.modules.module.register_module_forward_pre_hook(_enter)
    nn.modules.module.register_module_forward_hook(_leave, always_call=True)
    nn.modules.module.register_module_forward_pre_hook(_check)
