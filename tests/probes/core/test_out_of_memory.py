"""The one out-of-memory halving (the runner's rows and the causal passes' head sets both go through it): a chunk
that runs out of memory is retried in halves, the half is kept for later calls, a chunk of one is a clear error."""

from __future__ import annotations

import pytest
import torch

from probes.core.errors import ModelError
from probes.core.out_of_memory import Halving


def test_a_chunk_that_runs_out_of_memory_is_retried_in_halves_and_the_half_is_kept():
    tried = []

    def run(start: int, stop: int) -> tuple[int, int]:
        tried.append(stop - start)
        if stop - start > 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return start, stop

    halving = Halving("rows")
    assert halving.chunks(8, run, too_big="never") == [(0, 2), (2, 4), (4, 6), (6, 8)]
    assert tried == [8, 4, 2, 2, 2, 2] and halving.ceiling == 2
    tried.clear()
    assert halving.chunks(5, run, first=1, too_big="never") == [(i, i + 1) for i in range(5)]  # first, then ceiling
    assert halving.chunks(3, run, too_big="never") == [(0, 2), (2, 3)]
    assert tried == [1] * 5 + [2, 1]


def test_a_chunk_of_one_that_does_not_fit_says_what_to_do_and_other_errors_pass_through():
    def no_memory(start: int, stop: int) -> None:
        raise RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB")

    with pytest.raises(ModelError, match=r"^Use shorter sequences\.$"):
        Halving("rows").chunks(4, no_memory, too_big="Use shorter sequences.")

    def broken(start: int, stop: int) -> None:
        raise RuntimeError("shape mismatch")

    halving = Halving("rows")
    with pytest.raises(RuntimeError, match="shape mismatch"):
        halving.chunks(4, broken, too_big="never")
    assert halving.ceiling is None
