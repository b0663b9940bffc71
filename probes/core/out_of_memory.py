"""Work that halves after running out of memory: :func:`is_out_of_memory` tells an allocator failure from any other
error, and :class:`Halving` runs ``run(start, stop)`` over ``0..n`` in chunks, halving the chunk after one ran out of
memory and keeping the half for every later chunk and call.

The runner folds a batch's rows this way (:func:`probes.core.runner.feed_probes`: probe state is additive, so rows
folded in chunks give the sums of the whole batch), and a causal pass its copies of a batch
(:func:`probes.causal.ablation.batch_ablation_sums`).

Example: ``Halving("rows").chunks(8, lambda a, b: fold(batch[a:b]), too_big="...")`` tries 8 rows, then 4, ...
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch

from probes.core.errors import ModelError

log = logging.getLogger(__name__)

T = TypeVar("T")


def is_out_of_memory(error: BaseException) -> bool:
    """True for an allocator failure (CUDA/MPS/CPU) that a smaller batch could avoid."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    message = str(error)
    return isinstance(error, RuntimeError) and ("out of memory" in message or "not enough memory" in message)


def physical_memory() -> int | None:
    """This machine's memory in bytes (None where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def size_refusal(error: BaseException) -> str | None:
    """The one line a command prints, instead of a traceback, for a size the machine cannot hold: an allocator
    failure, or a size torch cannot even compute (a batch of 2**63 rows); None for any other error."""
    if not isinstance(error, (MemoryError, RuntimeError)):
        return None
    first = (str(error).strip().splitlines() or [type(error).__name__])[0]
    if not (isinstance(error, MemoryError) or is_out_of_memory(error) or "can't allocate memory" in first
            or "size calculation overflowed" in first):
        return None
    return (f"out of memory ({first[:160]}): a size given (a batch size, sequence length, width or count) needs more "
            f"memory than this machine has; lower it and run the command again.")


@dataclass
class Halving:
    """The largest chunk of ``what`` (rows, head sets) to try in one pass: no limit until a pass runs out of memory,
    then half of the chunk that did, kept by this object for every later chunk and call."""

    what: str
    ceiling: int | None = None

    def bound(self, size: int) -> int:
        """``size``, or the ceiling where that is smaller."""
        return size if self.ceiling is None else min(size, self.ceiling)

    def chunks(self, n: int, run: Callable[[int, int], T], *, first: int | None = None, too_big: str) -> list[T]:
        """``run(start, stop)`` over ``0..n`` in order, each chunk at most ``first`` (None: all) and the ceiling.

        A chunk that runs out of memory is retried in halves; one that cannot be halved (a chunk of one) raises
        :class:`ModelError` with ``too_big`` (what the user can change). Any other error propagates untouched.
        """
        out: list[T] = []
        start = 0
        while start < n:
            stop = start + self.bound(n - start if first is None else min(n - start, first))
            try:
                out.append(run(start, stop))
            except Exception as error:
                if not is_out_of_memory(error):
                    raise
                if stop - start == 1:
                    raise ModelError(too_big) from error
                self.ceiling = (stop - start) // 2
                log.warning("out of memory on %d %s in one pass; retrying with %d per pass", stop - start, self.what,
                            self.ceiling)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                continue
            start = stop
        return out
