"""Typed, frozen probe results with provenance; they save and load themselves (JSON + safetensors)."""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from safetensors.torch import save_file
from torch import Tensor

from mechprobe import records
from probes.core.atomic import atomic_directory, atomic_write_text
from probes.core.errors import InputError

if TYPE_CHECKING:
    import pandas as pd
    from typing_extensions import Self

RESULT_JSON = "result.json"
RESULT_TENSORS = "tensors.safetensors"
RERUN = "Run the probe again and save the result with this version."


def library_versions() -> dict[str, str]:
    """Versions of the packages that decide a probe's numbers (read once per process)."""
    return dict(_library_versions())


@functools.lru_cache(maxsize=1)
def _library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for package in ("mechprobe", "torch", "transformer-lens", "transformers", "datasets", "gensim", "scikit-learn"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


@dataclass(frozen=True)
class Provenance:
    """Where a result came from: model, data, probe settings, seed, library versions, amount of data,
    and the device and dtype of the activations the probe read."""

    model: str
    data: str
    probe: str
    settings: dict[str, Any]
    seed: int | None
    n_sequences: int
    n_tokens: int
    versions: dict[str, str] = field(default_factory=library_versions)
    device: str = "unspecified"
    dtype: str = "unspecified"


@dataclass(frozen=True)
class ProbeResult:
    """Base of every probe result. Subclasses add tensor and scalar fields.

    Tensor fields, and dict fields whose values are all tensors, go to ``tensors.safetensors``;
    everything else to ``result.json``.
    """

    provenance: Provenance
    _registry: ClassVar[dict[str, type[ProbeResult]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        ProbeResult._registry[cls.__name__] = cls

    def to_dataframe(self) -> pd.DataFrame:  # pragma: no cover - every concrete result overrides it
        raise NotImplementedError(f"{type(self).__name__} does not define to_dataframe()")

    def document(self, tensors: dict[str, Tensor] | None = None) -> dict[str, Any]:
        """The ``result.json`` document: ``{"type": class name, "result": its fields}`` (:mod:`mechprobe.records`;
        a file may hold more keys beside them, such as ``mechprobe heads --json``'s ``command``). Tensors go into
        ``tensors`` (by their path, e.g. ``"scores/induction"``) when it is given, else inline as ``{"dtype",
        "shape", "values"}`` so one JSON file holds the whole result."""
        return {"type": type(self).__name__, "result": records.dump(self, tensors)}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Save into the folder ``path`` (replaced atomically). Example: ``result.save("runs/heads")``.

        A path ending in ``.json`` writes one JSON file instead, tensors inline (the same document)."""
        if Path(path).suffix == ".json":
            atomic_write_text(path, json.dumps(self.document(), indent=1, allow_nan=False))
            return Path(path)
        tensors: dict[str, Tensor] = {}
        document = self.document(tensors)
        with atomic_directory(path) as tmp:
            save_file(tensors, str(tmp / RESULT_TENSORS))
            (tmp / RESULT_JSON).write_text(json.dumps(document, indent=2, allow_nan=False), encoding="utf-8")
        return Path(path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Self:
        """Load a result saved by :meth:`save` (a folder, or a ``.json`` file with tensors inline);
        ``ProbeResult.load`` returns the saved subclass."""
        path = Path(path)
        if path.is_file() and path.suffix == ".json":
            return cls.from_document(_read_document(path), None, where=str(path))
        if not (path / RESULT_JSON).is_file() or not (path / RESULT_TENSORS).is_file():
            raise InputError(
                f"{path} is not a saved probe result: expected {RESULT_JSON} and {RESULT_TENSORS} in it "
                f"(or a .json file written by save)."
            )
        document = _read_document(path / RESULT_JSON)
        tensors = records.read_tensors(path / RESULT_TENSORS, rerun=RERUN)
        return cls.from_document(document, tensors, where=str(path / RESULT_JSON))

    @classmethod
    def from_document(cls, document: Mapping[str, Any], tensors: Mapping[str, Tensor] | None,
                      where: str = "the document") -> Self:
        """The result a :meth:`document` describes (``tensors`` None: the tensors are inline)."""
        result_type = ProbeResult._registry.get(document.get("type", "")) if isinstance(document, Mapping) else None
        if result_type is None or not issubclass(result_type, cls):
            kind = document.get("type") if isinstance(document, Mapping) else type(document).__name__
            raise InputError(f"{where} holds a {kind!r} result, which is not a {cls.__name__}.")
        if "result" not in document:
            raise InputError(f"{where} was saved by mechprobe < 0.2 (no 'result' entry); run the probe again and "
                             f"save the result with this version.")
        unknown = sorted(set(document) - {"type", "result", "command"})  # command: what wrote it (mechprobe heads)
        if unknown:
            raise InputError(f"{where}: unknown key {unknown[0]!r} beside 'type', 'result' and 'command': it is "
                             f"damaged. {RERUN}")
        return records.checked(result_type, document["result"], where, at="result", rerun=RERUN, tensors=tensors)


def _read_document(path: Path) -> Any:
    return records.read_json(path, rerun=RERUN)


def _values_close(x: Any, y: Any, atol: float, rtol: float) -> bool:
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        return x.shape == y.shape and torch.allclose(x.double(), y.double(), atol=atol, rtol=rtol, equal_nan=True)
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_values_close(x[k], y[k], atol, rtol) for k in x)
    if isinstance(x, float) and isinstance(y, (int, float)):
        return math.isclose(x, y, rel_tol=rtol, abs_tol=atol) or (math.isnan(x) and math.isnan(y))
    return bool(x == y)


def results_close(a: ProbeResult, b: ProbeResult, *, atol: float = 0.0, rtol: float = 1e-12) -> bool:
    """True when two results of one type hold the same values (numbers within ``atol + rtol * |b|``), provenance
    aside."""
    if type(a) is not type(b):
        return False
    return all(
        _values_close(getattr(a, f.name), getattr(b, f.name), atol, rtol)
        for f in dataclasses.fields(a)
        if f.name != "provenance"
    )
