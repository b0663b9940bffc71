"""The one reading of type hints: what an annotation is, the hints of a dataclass's fields, and its name in messages.

Two readers turn outside values into typed ones by walking annotations: :mod:`mechprobe.records` (JSON documents)
and ``analyses.config_overrides`` (``key=value`` text). Both take the walk from here and keep only what their own
format says: :func:`shape` takes an annotation apart (a union's members, a Literal's options, the items of a tuple or
list, a mapping's keys and values, a nested dataclass, the scalar kinds), :func:`field_hints` resolves the hints of
a dataclass's fields (once per class), and :func:`describe` names an annotation in an error message in the words a
reader gives. No other module of the packages takes a hint apart itself (``typing.get_origin``, ``get_args``,
``get_type_hints``: ``tests/test_layout.py``).

Example::

    shape(tuple[int, ...] | None).options        # (tuple[int, ...],)
    shape(tuple[int, ...]).items(3)              # [int, int, int]
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from typing import Any, Literal

from torch import Tensor

Kind = Literal["any", "none", "union", "literal", "record", "tensor", "enum", "sequence", "mapping", "scalar",
               "other"]
"""What an annotation is: ``Any`` (or ``object``), ``None``, a union, a ``Literal``, a dataclass (a record), a
tensor (``Tensor`` or jaxtyping's ``Float[Tensor, "..."]``), an enum, a tuple or list, a mapping, one of ``bool``,
``int``, ``float``, ``str`` (a scalar), or something else neither reader takes."""

_NONE = type(None)
_SEQUENCES = (tuple, list, Sequence)
_MAPPINGS = (dict, Mapping, MutableMapping)
_SCALARS = (bool, int, float, str)


@dataclasses.dataclass(frozen=True)
class Shape:
    """An annotation taken apart: its ``kind``, the annotation itself (``hint``) and its arguments (``args``: a
    union's members, a Literal's options, a container's type arguments; ``()`` where it has none)."""

    kind: Kind
    hint: Any
    args: tuple[Any, ...] = ()

    @property
    def options(self) -> tuple[Any, ...]:
        """A union's members other than ``None``."""
        return tuple(a for a in self.args if a is not _NONE)

    @property
    def admits_none(self) -> bool:
        """Whether the annotation is a union with ``None`` among its members (``float | None``)."""
        return self.kind == "union" and _NONE in self.args

    @property
    def container(self) -> type[tuple[Any, ...]] | type[list[Any]]:
        """What a sequence is built as: a tuple for ``tuple[...]``, a list for ``list[...]`` and ``Sequence[...]``."""
        return tuple if (typing.get_origin(self.hint) or self.hint) is tuple else list

    @property
    def fixed(self) -> bool:
        """Whether the sequence is a tuple of fixed length with a hint per item (``tuple[int, str]``)."""
        return self.container is tuple and bool(self.args) and not (len(self.args) == 2 and self.args[1] is Ellipsis)

    @property
    def item(self) -> Any:
        """The hint of a sequence's items (a fixed tuple's first item's); ``Any`` where it names none."""
        return self.args[0] if self.args else Any

    def items(self, n: int) -> list[Any]:
        """The hint of each of ``n`` items of the sequence: a fixed tuple's own where it has ``n``, else
        :attr:`item`."""
        return list(self.args) if self.fixed and len(self.args) == n else [self.item] * n

    @property
    def keys_and_values(self) -> tuple[Any, Any]:
        """The hints of a mapping's keys and values; ``(str, Any)`` where it names none."""
        return (self.args[0], self.args[1]) if len(self.args) == 2 else (str, Any)


def shape(hint: Any) -> Shape:
    """``hint`` taken apart (see :class:`Shape`). Example: ``shape(Literal["a", "b"])`` is
    ``Shape("literal", Literal["a", "b"], ("a", "b"))``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return Shape("any", hint)
    if origin in (typing.Union, types.UnionType):
        return Shape("union", hint, args)
    if origin is typing.Literal:
        return Shape("literal", hint, args)
    if hint is _NONE:
        return Shape("none", hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return Shape("record", hint)
    if hint is Tensor or getattr(hint, "array_type", None) is Tensor:  # jaxtyping's Float[Tensor, "..."]
        return Shape("tensor", hint)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return Shape("enum", hint)
    if origin in _SEQUENCES or hint in (tuple, list):
        return Shape("sequence", hint, () if args == ((),) else args)  # tuple[()] on Python 3.10: no items named
    if origin in _MAPPINGS or hint in (dict, Mapping):
        return Shape("mapping", hint, args)
    return Shape("scalar" if hint in _SCALARS else "other", hint)


def member(hint: Any, kind: Kind) -> Shape | None:
    """The shape of ``hint`` where it is of ``kind``, else of the first member of the union ``hint`` that is; None
    where neither is. Example: ``member(tuple[float, ...] | None, "sequence").item`` is ``float``."""
    found = shape(hint)
    if found.kind == "union":
        return next((s for s in map(shape, found.args) if s.kind == kind), None)
    return found if found.kind == kind else None


@functools.cache
def field_hints(cls: type) -> Mapping[str, Any]:
    """The resolved type hints of the class ``cls``'s fields, by name (resolved once per class; read-only). Raises
    the ``NameError`` or ``TypeError`` of :func:`typing.get_type_hints` where a hint names what cannot be found.
    Example: ``field_hints(Finding)["ci"]`` is ``tuple[float, float]``."""
    return types.MappingProxyType(typing.get_type_hints(cls))


def describe(hint: Any, *, none: str, option: Callable[[Any], str], other: Callable[[Shape], str]) -> str:
    """``hint`` named for an "expected ..." message in a reader's words: a union's members joined by "or" (``None``
    as ``none``), a Literal as "one of" its options (each written by ``option``), anything else as ``other`` names
    its shape. Example: ``describe(Literal["a"] | None, none="null", option=repr, other=...)`` is
    ``"one of 'a' or null"``."""
    found = shape(hint)
    if found.kind == "union":
        return " or ".join(none if a is _NONE else describe(a, none=none, option=option, other=other)
                           for a in found.args)
    if found.kind == "literal":
        return "one of " + ", ".join(map(option, found.args))
    return other(found)
