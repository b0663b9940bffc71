"""Reading a packaged GGUF file through transformers without the gguf package's Python overhead.

Converting SmolLM2-135M's packaged GGUF (98 MB, :func:`probes.core.loading.converted_gguf_dir`) took 23-27 s, most of it
overhead in the ``gguf`` package rather than work:

- transformers builds three ``gguf.GGUFReader`` of the file (tokenizer, config, weights); each slices every metadata
  field (the tokenizer's 49,152 tokens and its merges) out of a ``numpy.memmap``, whose subclass hooks cost more than
  the slicing: 3.5 s per reader, 1.2 s when the same bytes are an ordinary array in memory;
- transformers asks ``gguf.get_tensor_name_map(arch, n_blocks)`` once per submodule of the model (397 times for
  SmolLM2), and each call builds the same read-only map anew (15 ms).

:func:`fast_gguf_reading` removes both while a conversion runs: the reader gets the file's bytes in memory (for files
up to :data:`IN_MEMORY_BYTES`; a larger one keeps the memmap), and the name map is built once per architecture and
depth. The conversion then takes 9-12 s. The bytes read and the maps looked up are the same, so the converted files
are too (byte for byte; tests/probes/core/test_gguf_reading.py compares both readers field by field and tensor by
tensor).
"""

from __future__ import annotations

import contextlib
import functools
import os
import types
from collections.abc import Iterator
from typing import Any, cast

import numpy as np

IN_MEMORY_BYTES = 1 << 30
"""The largest GGUF file read into memory (a packaged model is ~100 MB); larger ones keep numpy's memmap."""


class _NumpyReadingIntoMemory(types.ModuleType):
    """numpy, except that ``memmap(path, mode="r")`` of a file up to :data:`IN_MEMORY_BYTES` returns its bytes as an
    ordinary array (only ``gguf.gguf_reader`` sees this module, and only within :func:`fast_gguf_reading`)."""

    def __init__(self) -> None:
        super().__init__("numpy")

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    @staticmethod
    def memmap(path: Any, mode: str = "r", **kwargs: Any) -> np.ndarray:
        if mode != "r" or kwargs or not isinstance(path, (str, os.PathLike)) \
                or os.path.getsize(path) > IN_MEMORY_BYTES:
            return cast(np.ndarray, np.memmap(path, mode=mode, **kwargs))  # type: ignore[call-overload]
        return np.fromfile(path, dtype=np.uint8)


@contextlib.contextmanager
def fast_gguf_reading() -> Iterator[None]:
    """Within this block, ``gguf.GGUFReader`` reads a file into memory and ``gguf.get_tensor_name_map`` builds each map
    once (module docstring); both are restored after it. Where the installed gguf is laid out otherwise, nothing is
    changed and the conversion runs as it would without this block."""
    import gguf
    import gguf.gguf_reader as reader

    if getattr(reader, "np", None) is not np or not callable(getattr(gguf, "get_tensor_name_map", None)):
        yield
        return
    name_map = gguf.get_tensor_name_map
    reader.np = _NumpyReadingIntoMemory()
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    try:
        yield
    finally:
        reader.np = np
        gguf.get_tensor_name_map = name_map
