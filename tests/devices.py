"""The devices a device test runs on: the CPU always (CI has no GPU), CUDA where this machine has one.

A test that exists only for a GPU rots unseen on machines without one (five did, within one wave), so every
device test is parametrised over :data:`DEVICES` with the same argv and settings on each: on the CPU it checks
what one device can (the command exits 0, it records its device, invariants of its numbers), on CUDA also that
the numbers equal the CPU's.

Example::

    @pytest.mark.parametrize("device", DEVICES)
    def test_heads(device): ...
"""

from __future__ import annotations

import pytest
import torch

NO_CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
DEVICES = (pytest.param("cpu", id="cpu"), pytest.param("cuda", id="cuda", marks=NO_CUDA))
