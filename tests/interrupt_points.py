"""A Ctrl-C planted at the Nth call of what every stage of a command goes through (a file renamed, synced or a
folder made, a model's forward pass): for the generated interrupt tests (issue 45: every run can be rerun or
resumed with the command it printed, whatever stopped it).

``counted(monkeypatch)`` counts those calls (the kinds of the calls, in order); ``interrupted_at(monkeypatch, n)``
raises KeyboardInterrupt at the Nth, once, as a Ctrl-C there would."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch

# (owner, attribute, kind): the calls counted; a forward pass counts once at its outermost module
POINTS = ((os, "replace", "rename"), (os, "fsync", "sync"), (os, "mkdir", "mkdir"), (shutil, "rmtree", "rmtree"))


def _install(monkeypatch: pytest.MonkeyPatch, hit: Callable[[str], None]) -> None:
    for owner, name, kind in POINTS:
        real = getattr(owner, name)

        def call(*args, _real=real, _kind=kind, **kwargs):
            hit(_kind)
            return _real(*args, **kwargs)
        monkeypatch.setattr(owner, name, call)
    real_call = torch.nn.Module.__call__
    depth = [0]

    def forward(self, *args, **kwargs):
        if depth[0] == 0:
            hit("forward")
        depth[0] += 1
        try:
            return real_call(self, *args, **kwargs)
        finally:
            depth[0] -= 1
    monkeypatch.setattr(torch.nn.Module, "__call__", forward)


# a temporary that a stopped write leaves: .NAME.XXXX.tmp (atomic_write_text, atomic_directory, a checkpoint's
# files) or .NAME.XXXX.tmp.SUFFIX (mechprobe.atomic.atomic_file: a figure); and .NAME.old-PID (replace_directory)
TEMPORARY = re.compile(r"\.tmp(\.[^.]+)?$")


def leftovers(folder: Path) -> list[Path]:
    """What a stopped write left anywhere under ``folder``: a temporary (:data:`TEMPORARY`) or an earlier folder
    moved aside."""
    return [path for path in folder.rglob("*") if TEMPORARY.search(path.name) or ".old-" in path.name]


def counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The kinds of the calls made from now on, in order (the list fills as the command runs)."""
    kinds: list[str] = []
    _install(monkeypatch, kinds.append)
    return kinds


def _ctrl_c() -> None:
    raise KeyboardInterrupt


def interrupted_at(monkeypatch: pytest.MonkeyPatch, n: int, stop: Callable[[], None] = _ctrl_c) -> list[str]:
    """A KeyboardInterrupt at the Nth call (once; or what ``stop`` does, e.g. raise SIGTERM); the list returned
    holds its kind once it was raised (a run can make fewer calls than the one counted: a cache made once)."""
    calls, fired = [0], []

    def hit(kind: str) -> None:
        calls[0] += 1
        if calls[0] == n:
            fired.append(kind)
            stop()
    _install(monkeypatch, hit)
    return fired


def raising_at(n: int, calls: list[str], name: str, real: Callable) -> Callable:
    """``real``, each call recorded as ``name`` in ``calls`` (shared by the wrapped functions); the call that makes
    ``calls`` ``n`` long raises KeyboardInterrupt instead, as a Ctrl-C there would (one function's own Nth call:
    :func:`interrupted_at` counts every stage of a command)."""
    def call(*args, **kwargs):
        calls.append(name)
        if len(calls) == n:
            raise KeyboardInterrupt
        return real(*args, **kwargs)
    return call


def sample(kinds: Sequence[str]) -> list[int]:
    """The Ns of the default suite (1-based): the first rename (the first file written), the middle call and the
    last rename (the output put in place)."""
    renames = [index for index, kind in enumerate(kinds, 1) if kind == "rename"] or [len(kinds)]
    return sorted({renames[0], (len(kinds) + 1) // 2, renames[-1]})


def run(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int | str, str]:
    """``main(argv)`` in this process: (exit code, or the traceback of what escaped it; stderr)."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code: int | str = main(argv)
        except BaseException:  # a KeyboardInterrupt that escaped main would be a traceback at the console
            code = traceback.format_exc()
    return code, err.getvalue()
