"""Shared test settings: offline, deterministic, small thread pools (CI has 2 cores)."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest
import torch

torch.set_num_threads(min(2, torch.get_num_threads()))

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module (``pytestmark = pytest.mark.usefixtures("one_thread")``): small toy
    tensors train faster on one thread, and CI's second core is shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def smollm2():
    """The packaged SmolLM2-135M (converted from GGUF once into the mechprobe cache)."""
    import probes

    return probes.load_model("smollm2-135m")


@pytest.fixture(scope="session")
def minilm():
    """The packaged all-MiniLM-L6-v2 encoder."""
    import probes

    return probes.load_model("minilm-l6")
