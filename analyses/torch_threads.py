"""The toy experiments' torch thread count: their tensors are tiny, so extra intra-op threads mostly contend."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int = 1) -> Iterator[None]:
    """Torch on ``n`` intra-op threads inside the block, the caller's count restored afterwards.

    Example: ``with torch_threads(1): train_topic_model(model, data, config)``.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
