"""The one serializer: frozen dataclass records to JSON documents and back, driven by their type hints.

:func:`dump` turns a record (or any value made of records, tuples, lists, mappings with text keys,
numbers, text, enums and tensors) into a JSON-able value; :func:`load` rebuilds a record of a given class
from such a document, checking every value against the field's type hint; :func:`to_json` writes strict
JSON text (``allow_nan=False``): every JSON document mechprobe writes goes through it.

The rules, in one place:

- a record is a JSON object of its fields, in field order, keyed by name (or by the key a field names with
  :func:`key`; a field marked :data:`UNSAVED_FIELD` is left out); fields the record derives itself
  (``init=False``) and the properties a class lists in ``__record_derived__`` are written too, for readers
  of the file, and skipped when loading;
- unknown keys and missing required keys are :class:`~mechprobe.errors.RecordError` (a key missing for a
  field with a default takes the default, so documents written before a field existed still load);
- tuples and lists are JSON arrays (``tuple[X, ...]``, ``tuple[X, Y]`` and ``list[X]`` check each item);
  ``Mapping[str, X]`` / ``dict[str, X]`` are objects (``int`` keys are written as text and read back);
- a float that is not finite is written as ``null`` and read back as ``nan`` where the type is ``float``;
  where the type also admits ``None`` (``float | None``: null means "none"), it is written as the string
  ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` instead, so both come back as they were;
- a tensor goes to ``tensors[name]`` (a safetensors sidecar, ``name`` its path in the document) when
  ``tensors`` is given, written as ``{"__tensor__": name, "dtype", "shape"}``: a sidecar tensor of another dtype or
  shape than the document says is refused on reading (the sidecar or the document is damaged, or they are of two
  runs); otherwise inline as ``{"dtype", "shape", "values"}`` (non-finite values as above: ``"NaN"``,
  ``"Infinity"``, ``"-Infinity"``).

Files mechprobe reads back (toy folders, a report's ``results/``, saved probe results) are read by
:func:`read_json`, :func:`read_record` and :func:`read_tensors`: a file missing, not UTF-8, not JSON, holding
another container, a key unknown or missing, or a damaged safetensors file is one :class:`RecordError` line that
names the file, the field and what to re-run.

Example::

    document = dump(finding)                 # {"statistic": ..., "value": 0.62, "ci": [0.55, 0.7], ...}
    load(Finding, json.loads(to_json(document))) == finding
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import json
import math
import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor

from mechprobe import type_hints
from mechprobe.errors import RecordError
from mechprobe.validation import is_integer

PathLike = str | os.PathLike[str]

T = TypeVar("T")

KEY = "mechprobe.records.key"
"""The metadata entry of a field whose JSON key differs from its name (see :func:`key`)."""

UNSAVED = "mechprobe.records.unsaved"
"""The metadata entry of a field that is not part of the document (see :data:`UNSAVED_FIELD`)."""

TENSOR = "__tensor__"
_NONFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def key(name: str) -> dict[str, Any]:
    """The ``metadata`` of a dataclass field written under the JSON key ``name``.

    Example: ``config: ScanSnapConfig = dataclasses.field(metadata=key("settings"))``.
    """
    return {KEY: name}


UNSAVED_FIELD: Mapping[str, Any] = types.MappingProxyType({UNSAVED: True})
"""The ``metadata`` of a dataclass field that :func:`dump` leaves out and :func:`load` leaves at its default
(it needs one): what the record keeps in files of its own.
Example: ``histories: dict = dataclasses.field(default_factory=dict, metadata=UNSAVED_FIELD)``."""


def to_json(document: Any, *, indent: int | None = 2) -> str:
    """``document`` (a record or a JSON-able value) as strict JSON text: no ``NaN`` or ``Infinity`` tokens."""
    return json.dumps(dump(document), indent=indent, allow_nan=False)


def strict_json(text: str) -> Any:
    """``text`` parsed as strict JSON: ``NaN`` / ``Infinity`` tokens raise :class:`RecordError`."""
    def refuse(token: str) -> Any:
        raise RecordError(f"the JSON holds {token}, which is not JSON; it was written by an older mechprobe.")

    return json.loads(text, parse_constant=refuse)


# -- writing ------------------------------------------------------------------------------------------------


def dump(value: Any, tensors: dict[str, Tensor] | None = None) -> Any:
    """``value`` as a JSON-able value (see the module docstring); tensors go into ``tensors`` when it is given.

    Example: ``dump(LossCurve((0, 1), (2.3, float("nan"))))`` is ``{"steps": [0, 1], "loss": [2.3, None]}``.
    """
    return _dump(value, Any, "", tensors)


def _float_out(value: float, hint: Any) -> float | str | None:
    if math.isfinite(value):
        return float(value)
    if type_hints.shape(hint).admits_none:
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    return None


def _dump(value: Any, hint: Any, path: str, tensors: dict[str, Tensor] | None) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return _dump(value.value, Any, path, tensors)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return _float_out(value, hint)
    if isinstance(value, Tensor):
        return _tensor_out(value, path, tensors)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _record_out(value, path, tensors)
    if isinstance(value, Mapping):
        mapping = type_hints.member(hint, "mapping")
        inner = mapping.keys_and_values[1] if mapping is not None else Any
        return {str(k): _dump(v, inner, _join(path, str(k)), tensors) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        sequence = type_hints.member(hint, "sequence")
        hints = sequence.items(len(value)) if sequence is not None else [Any] * len(value)
        return [_dump(v, h, _join(path, str(i)), tensors) for i, (v, h) in enumerate(zip(value, hints))]
    if hasattr(value, "tolist"):  # numpy arrays and scalars
        return _dump(value.tolist(), hint, path, tensors)
    raise RecordError(f"{path or 'the value'}: cannot write a {type(value).__name__} as JSON; records hold "
                      f"numbers, text, tuples, lists, mappings, enums, tensors and other records.")


def _join(path: str, key: str) -> str:
    return f"{path}/{key}" if path else key


def _record_out(record: Any, path: str, tensors: dict[str, Tensor] | None) -> dict[str, Any]:
    hints = _hints(type(record))
    document: dict[str, Any] = {}
    for f in dataclasses.fields(record):
        if f.metadata.get(UNSAVED):
            continue
        key = f.metadata.get(KEY, f.name)
        document[key] = _dump(getattr(record, f.name), hints.get(f.name, Any), _join(path, key), tensors)
    for name in getattr(type(record), "__record_derived__", ()):
        document[name] = _dump(getattr(record, name), Any, _join(path, name), tensors)
    return document


def _tensor_out(tensor: Tensor, path: str, tensors: dict[str, Tensor] | None) -> dict[str, Any]:
    tensor = tensor.detach().cpu().contiguous()
    if tensors is not None:
        name = path or "tensor"
        if name in tensors:
            raise RecordError(f"two tensors would be stored as {name!r}; give them different keys.")
        tensors[name] = tensor
        return {TENSOR: name, **_dtype_and_shape(tensor)}
    values = tensor.tolist()
    if tensor.is_floating_point():
        values = _nonfinite_to_text(values)
    return {**_dtype_and_shape(tensor), "values": values}


def _dtype_and_shape(tensor: Tensor) -> dict[str, Any]:
    return {"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape)}


def _nonfinite_to_text(values: Any) -> Any:
    if isinstance(values, list):
        return [_nonfinite_to_text(v) for v in values]
    return _float_out(values, float | None)


# -- reading ------------------------------------------------------------------------------------------------


def load(cls: type[T], document: Any, tensors: Mapping[str, Tensor] | None = None, *,
         where: str = "the document", at: str = "") -> T:
    """The ``cls`` record (or value of type ``cls``) that :func:`dump` wrote as ``document``.

    ``tensors``: the sidecar the tensors went to (None: they are inline). Raises :class:`RecordError` naming
    ``where`` and the path of the first value that does not fit (``at``: the path of ``document`` itself in its
    file, e.g. ``"settings"``).
    Example: ``load(Finding, dump(finding)) == finding``.
    """
    return typing.cast(T, _Reader(tensors, where).read(cls, document, at))


def _hints(cls: type) -> Mapping[str, Any]:
    try:
        return type_hints.field_hints(cls)
    except (NameError, TypeError) as error:
        raise RecordError(f"the fields of {cls.__name__} have type hints that cannot be resolved ({error}).") \
            from None


def _describe(hint: Any) -> str:
    """How ``hint`` is written in JSON, for error messages."""
    return type_hints.describe(hint, none="null", option=repr, other=_json_word)


def _json_word(shape: type_hints.Shape) -> str:
    if shape.kind == "record":
        return f"a {shape.hint.__name__} object"
    return {"sequence": "a list", "mapping": "an object", "tensor": "a tensor"}.get(shape.kind) or {
        bool: "true or false", int: "an integer", float: "a number (or null)", str: "text"}.get(
        shape.hint, getattr(shape.hint, "__name__", str(shape.hint)))


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class _Reader:
    """One :func:`load`: the sidecar tensors and where the document came from, for the error messages."""

    def __init__(self, tensors: Mapping[str, Tensor] | None, where: str) -> None:
        self.tensors, self.where = tensors, where

    def fail(self, path: str, text: str) -> RecordError:
        return RecordError(f"{self.where}: {path}: {text}" if path else f"{self.where}: {text}")

    def expected(self, hint: Any, value: Any, path: str) -> RecordError:
        return self.fail(path, f"expected {_describe(hint)}; got {_short(value)}.")

    def read(self, hint: Any, value: Any, path: str) -> Any:
        shape = type_hints.shape(hint)
        if shape.kind == "any":
            return value
        if shape.kind == "union":
            return self.union(shape, value, path)
        if shape.kind == "literal":
            if any(value == a and type(value) is type(a) for a in shape.args):
                return value
            raise self.expected(hint, value, path)
        if shape.kind == "none":
            if value is not None:
                raise self.expected(hint, value, path)
            return None
        if shape.kind == "record":
            return self.record(hint, value, path)
        if shape.kind == "tensor":
            return self.tensor(value, path)
        if shape.kind == "enum":
            try:
                return hint(value)
            except ValueError:
                raise self.fail(path, f"expected one of {[m.value for m in hint]}; got {_short(value)}.") from None
        if shape.kind == "sequence":
            return self.sequence(shape, value, path)
        if shape.kind == "mapping":
            return self.mapping(shape, value, path)
        if shape.kind == "scalar":
            return self.scalar(hint, value, path)
        raise self.fail(path, f"cannot read a value of type {hint!r}.")

    def union(self, shape: type_hints.Shape, value: Any, path: str) -> Any:
        options = shape.options
        if value is None and shape.admits_none:
            return None
        if len(options) == 1:
            return self.read(options[0], value, path)
        for option in options:
            try:
                return self.read(option, value, path)
            except RecordError:
                continue
        raise self.expected(shape.hint, value, path)

    def scalar(self, hint: Any, value: Any, path: str) -> Any:
        if hint is float:
            if value is None:
                return float("nan")
            if isinstance(value, str) and value in _NONFINITE:
                return _NONFINITE[value]
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
        elif hint is int:
            if is_integer(value):
                return value
        elif isinstance(value, hint):  # bool or str
            return value
        raise self.expected(hint, value, path)

    def sequence(self, shape: type_hints.Shape, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):  # JSON gives lists; a document built in Python may hold tuples
            raise self.expected(shape.hint, value, path)
        if shape.fixed and len(shape.args) != len(value):
            raise self.fail(path, f"expected a list of {len(shape.args)} items; got {len(value)}.")
        hints = shape.items(len(value))
        items = [self.read(h, v, _join(path, str(i))) for i, (h, v) in enumerate(zip(hints, value))]
        return tuple(items) if shape.container is tuple else items

    def mapping(self, shape: type_hints.Shape, value: Any, path: str) -> dict[Any, Any]:
        if not isinstance(value, Mapping):
            raise self.fail(path, f"expected an object; got {_short(value)}.")
        key_hint, value_hint = shape.keys_and_values
        out = {}
        for key, item in value.items():
            if key_hint is int:
                try:
                    parsed: Any = int(key)
                except ValueError:
                    raise self.fail(_join(path, key), "expected an integer key.") from None
            else:
                parsed = key
            out[parsed] = self.read(value_hint, item, _join(path, str(key)))
        return out

    def record(self, cls: type, value: Any, path: str) -> Any:
        if not isinstance(value, Mapping):
            raise self.expected(cls, value, path)
        hints = _hints(cls)
        fields = {f.metadata.get(KEY, f.name): f for f in dataclasses.fields(cls) if not f.metadata.get(UNSAVED)}
        skipped = {key for key, f in fields.items() if not f.init} | set(getattr(cls, "__record_derived__", ()))
        unknown = [key for key in value if key not in fields and key not in skipped]
        if unknown:
            known = ", ".join(key for key, f in fields.items() if f.init)
            raise self.fail(path, f"unknown key {unknown[0]!r} for {cls.__name__} (its keys: {known}).")
        values: dict[str, Any] = {}
        for key, f in fields.items():
            if not f.init:
                continue
            if key not in value:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise self.fail(path, f"the {cls.__name__} has no {key!r}, which it needs.")
                continue
            values[f.name] = self.read(hints.get(f.name, Any), value[key], _join(path, key))
        try:
            return cls(**values)
        except (ValueError, TypeError) as error:  # the record's own validation
            sidecar = getattr(self.tensors, "source", None)
            tensors = "" if sidecar is None else f" (its tensors are in {sidecar})"
            raise self.fail(path, f"not a valid {cls.__name__}{tensors}: {error}") from None

    def tensor(self, value: Any, path: str) -> Tensor:
        if not isinstance(value, Mapping):
            raise self.expected(Tensor, value, path)
        if "values" in value:
            dtype = getattr(torch, str(value.get("dtype")), None)
            if not isinstance(dtype, torch.dtype):
                raise self.fail(path, f"unknown tensor dtype {value.get('dtype')!r}.")
            values = _text_to_nonfinite(value["values"])
            return torch.tensor(values, dtype=dtype).reshape(value["shape"])
        name = str(value.get(TENSOR))
        if self.tensors is None:
            raise self.fail(path, "the tensor is in a sidecar file, and none was given.")
        if name not in self.tensors:
            raise self.fail(path, f"the sidecar has no tensor {name!r}.")
        tensor = self.tensors[name]
        found, written = _dtype_and_shape(tensor), {key: value.get(key) for key in ("dtype", "shape")}
        if any(key in value and found[key] != written[key] for key in written):  # (older documents: no dtype, shape)
            sidecar = getattr(self.tensors, "source", "the sidecar")
            raise self.fail(path, f"{sidecar} holds {found['dtype']} {found['shape']} as {name!r}, where the document "
                                  f"has {written['dtype']} {written['shape']}: the two files are not of one save.")
        return tensor


def _text_to_nonfinite(values: Any) -> Any:
    if isinstance(values, list):
        return [_text_to_nonfinite(v) for v in values]
    if values is None:
        return float("nan")
    return _NONFINITE.get(values, values) if isinstance(values, str) else values


# -- files --------------------------------------------------------------------------------------------------


def not_a_file(path: PathLike, rerun: str) -> RecordError:
    """The error for ``path``, where a file should be and none reads: missing, a folder, or a symbolic link that loops
    or points nowhere (each named as what it is), ending with ``rerun``."""
    where = Path(path)
    if where.is_symlink() and not where.exists():
        what = "is a symbolic link that loops or points nowhere, not the file it should be"
    elif where.is_dir():
        what = "is a folder, not the file it should be"
    else:
        what = "is missing (its folder is incomplete)"
    return RecordError(f"{path} {what}. {rerun}")


def read_json(path: PathLike, *, rerun: str) -> Any:
    """The strict JSON document in the file ``path``. A file missing, unreadable, not UTF-8 or not strict JSON raises
    :class:`RecordError` naming ``path`` and ending with ``rerun`` (what to run again, e.g. "Re-run mechprobe report.").

    Example: ``read_json("runs/r/results/report.json", rerun="Re-run mechprobe report.")``.
    """
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (FileNotFoundError, IsADirectoryError):
        raise not_a_file(path, rerun) from None
    except UnicodeDecodeError as error:
        raise RecordError(f"{path} is not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x}): it "
                          f"is damaged. {rerun}") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise not_a_file(path, rerun) from None
        raise RecordError(f"{path} cannot be read ({error.strerror}). {rerun}") from None
    try:
        return strict_json(text)
    except RecordError as error:
        raise RecordError(f"{path}: {error} {rerun}") from None
    except json.JSONDecodeError as error:
        raise RecordError(f"{path} is not valid JSON ({error.msg} at line {error.lineno} column {error.colno}): it "
                          f"is truncated or damaged. {rerun}") from None


def read_record(cls: type[T], path: PathLike, *, rerun: str, tensors: Mapping[str, Tensor] | None = None) -> T:
    """The ``cls`` record (or value typed ``cls``) in the JSON file ``path`` (:func:`read_json`, then :func:`load`):
    a key unknown or missing or a value of the wrong type is one :class:`RecordError` line naming the file and
    the field, ending with ``rerun``.

    Example: ``read_record(dict[str, str], "runs/r/results/linear/index.json", rerun="Re-run mechprobe report.")``.
    """
    return checked(cls, read_json(path, rerun=rerun), path, rerun=rerun, tensors=tensors)


def checked(cls: type[T], document: Any, path: PathLike, *, rerun: str, at: str = "",
            tensors: Mapping[str, Tensor] | None = None) -> T:
    """:func:`load` of a ``document`` read from the file ``path`` (found at ``at`` in it): a :class:`RecordError`
    names the file and the field and ends with ``rerun``.
    Example: ``checked(Summary, document["summary"], path, at="summary", rerun="Re-run it.")``."""
    try:
        return load(cls, document, tensors, where=str(path), at=at)
    except RecordError as error:
        raise RecordError(f"{error} {rerun}") from None


class Sidecar(dict[str, Tensor]):
    """The tensors of a safetensors file, by name, and ``source``, the file (named when one does not fit)."""

    def __init__(self, tensors: Mapping[str, Tensor], source: PathLike) -> None:
        super().__init__(tensors)
        self.source = os.fspath(source)


def read_tensors(path: PathLike, *, rerun: str) -> Sidecar:
    """Every tensor of the safetensors file ``path``; a file missing or damaged is one :class:`RecordError` line
    naming it and ending with ``rerun``. Example: ``read_tensors("runs/r/result/result.safetensors", rerun=...)``."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not os.path.isfile(path):
        raise not_a_file(path, rerun)
    try:
        return Sidecar(load_file(os.fspath(path)), path)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        why = " ".join(str(error).split())[:120]
        raise RecordError(f"{path} is not a readable safetensors file ({why}): it is truncated or damaged. "
                          f"{rerun}") from None
