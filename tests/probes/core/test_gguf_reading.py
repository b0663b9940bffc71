"""probes.core.gguf_reading: the packaged GGUF read into memory gives gguf's memmap reader's fields and tensors, the
name map built once is the map built each time, and everything is put back after the block."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
reader_module = pytest.importorskip("gguf.gguf_reader")

from probes.core import gguf_reading  # noqa: E402
from probes.core.gguf_reading import fast_gguf_reading  # noqa: E402


@pytest.fixture(scope="module")
def smollm2_gguf() -> str:
    from probes.core.loading import PACKAGED_MODELS, _package_dir

    entry = PACKAGED_MODELS["smollm2-135m"]
    if importlib.util.find_spec(entry.package) is None:
        pytest.skip("the packaged SmolLM2 GGUF is not installed (make install)")
    assert entry.gguf_file is not None
    return os.path.join(_package_dir(entry), entry.gguf_file)


@pytest.mark.slow
def test_the_in_memory_reader_reads_every_field_and_tensor_as_the_memmap_reader(smollm2_gguf):
    reference = gguf.GGUFReader(smollm2_gguf)
    with fast_gguf_reading():
        fast = gguf.GGUFReader(smollm2_gguf)
    assert isinstance(reference.data, np.memmap) and not isinstance(fast.data, np.memmap)
    assert list(fast.fields) == list(reference.fields) and len(reference.fields["tokenizer.ggml.tokens"].data) == 49152
    for name, field in reference.fields.items():
        other = fast.fields[name]
        assert (other.offset, other.name, other.types, other.data) == (field.offset, field.name, field.types,
                                                                      field.data), name
        assert all(a.dtype == b.dtype and a.tobytes() == b.tobytes()
                   for a, b in zip(other.parts, field.parts, strict=True)), name
    assert [t.name for t in fast.tensors] == [t.name for t in reference.tensors] and len(reference.tensors) == 272
    for tensor, other in zip(reference.tensors, fast.tensors, strict=True):
        assert (other.tensor_type, other.shape.tolist(), other.n_bytes, other.data_offset) == (
            tensor.tensor_type, tensor.shape.tolist(), tensor.n_bytes, tensor.data_offset), tensor.name
        assert np.array_equal(np.asarray(other.data), np.asarray(tensor.data)), tensor.name


def test_a_file_beyond_the_in_memory_limit_keeps_the_memmap(smollm2_gguf, monkeypatch):
    monkeypatch.setattr(gguf_reading, "IN_MEMORY_BYTES", os.path.getsize(smollm2_gguf) - 1)
    with fast_gguf_reading():
        assert isinstance(reader_module.np.memmap(smollm2_gguf, mode="r"), np.memmap)
    monkeypatch.setattr(gguf_reading, "IN_MEMORY_BYTES", os.path.getsize(smollm2_gguf))
    with fast_gguf_reading():
        data = reader_module.np.memmap(smollm2_gguf, mode="r")
        assert not isinstance(data, np.memmap) and data.shape == (os.path.getsize(smollm2_gguf),)
        assert np.array_equal(data[:64], np.memmap(smollm2_gguf, mode="r")[:64])
        assert isinstance(reader_module.np.memmap(smollm2_gguf, mode="r+"), np.memmap)  # only read-only reads


def test_the_name_map_is_built_once_per_architecture_and_depth_and_everything_is_put_back():
    arch = next(iter(gguf.MODEL_ARCH_NAMES))
    original = gguf.get_tensor_name_map
    with fast_gguf_reading():
        first, again, deeper = (gguf.get_tensor_name_map(arch, 2), gguf.get_tensor_name_map(arch, 2),
                                gguf.get_tensor_name_map(arch, 3))
        assert first is again and deeper is not first and reader_module.np is not np
    assert first.mapping == original(arch, 2).mapping and deeper.mapping == original(arch, 3).mapping
    assert gguf.get_tensor_name_map is original and reader_module.np is np
    with pytest.raises(RuntimeError), fast_gguf_reading():
        raise RuntimeError("a conversion that fails")
    assert gguf.get_tensor_name_map is original and reader_module.np is np


def test_the_conversion_reads_the_gguf_within_the_block(smollm2_gguf, tmp_path, monkeypatch):
    """converted_gguf_dir's two transformers reads of the file run inside fast_gguf_reading (stopped at the second)."""
    import transformers

    from probes.core.loading import PACKAGED_MODELS, converted_gguf_dir

    class Stop(Exception):
        pass

    seen = []

    def read(name):
        def from_pretrained(*args, **kwargs):
            seen.append((name, kwargs.get("gguf_file"), reader_module.np is not np))
            if name == "model":
                raise Stop
            return object()
        return from_pretrained

    monkeypatch.setenv("MECHPROBE_CACHE", str(tmp_path))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", read("tokenizer"))
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", read("model"))
    with pytest.raises(Stop):
        converted_gguf_dir(PACKAGED_MODELS["smollm2-135m"])
    gguf_file = PACKAGED_MODELS["smollm2-135m"].gguf_file
    assert seen == [("tokenizer", gguf_file, True), ("model", gguf_file, True)] and reader_module.np is np
    assert not (tmp_path / "models" / "smollm2-135m").exists()
