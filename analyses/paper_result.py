"""The typed result of a paper's toy experiment (claims, histories, numbers) and its one ``summary.json`` policy.

Each paper's ``analyses/<paper>/experiment.py`` returns a frozen dataclass deriving from
:class:`PaperResult`. It names every number the report compares (``compare`` reads these fields,
never a string key), keeps the paper's claims as :class:`Claim` records and its histories as
lists, and writes itself as ``summary.json`` with :meth:`PaperResult.save`. Saving and loading
round-trip: ``type(r).load(folder) == r`` for the fields stored in the summary.

The one NaN policy, for every JSON document mechprobe writes (:func:`write_json`: toy summaries, the
report's summary.json, ``probe-linear`` and ``heads --json``): a number that is not finite is written as
JSON ``null`` (``NaN`` is not JSON) and read back as ``float("nan")`` where the field is a float.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from analyses.paper_reference import PaperReference
from analyses.toy_findings import ToyFinding
from probes.core.atomic import atomic_write_text
from probes.core.errors import InputError
from probes.display.verdict_table import verdict_table_html, verdicts_dataframe

if TYPE_CHECKING:
    import pandas as pd
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="PaperResult")
T = TypeVar("T", bound="DataclassInstance")

SUMMARY_FILE = "summary.json"


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float replaced by ``None``, tuples as lists and tensors / numpy values as
    their lists and numbers, ready for strict JSON."""
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple)):
        return json_ready(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return json_ready(dataclasses.asdict(value))
    return value


def write_json(path: str | Path, document: Any) -> Path:
    """Write ``document`` to ``path`` atomically as strict JSON under the one NaN policy (every ``summary.json``
    and JSON report mechprobe writes goes through here)."""
    path = Path(path)
    atomic_write_text(path, json.dumps(json_ready(document), indent=2, allow_nan=False))
    return path


def number(value: Any) -> float:
    """A float read back from a summary: ``None`` (a stored NaN) becomes ``float("nan")``."""
    return float("nan") if value is None else float(value)


def optional(value: Any, kind: type = float) -> Any:
    """``kind(value)``, or ``None`` for a value the summary does not have (a step never reached, ...)."""
    return None if value is None else kind(value)


def _read(value: Any, annotation: Any) -> Any:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):  # X | None
        inner = next(a for a in args if a is not type(None))
        return None if value is None else _read(value, inner)
    if origin is tuple:
        return tuple(_read(v, args[0]) for v in value)
    if annotation is float:
        return number(value)
    if annotation in (int, str, bool):
        return annotation(value)
    raise TypeError(f"record_from_dict cannot read a field of type {annotation!r}")


def record_from_dict(kind: type[T], document: Mapping[str, Any]) -> T:
    """The flat record ``kind`` (a dataclass of numbers, text, ``X | None`` and ``tuple[X, ...]`` fields) from
    the dict its ``dataclasses.asdict`` wrote: floats through :func:`number` (null -> NaN), the rest by type.

    Example: ``record_from_dict(SweepCell, cell.to_dict()) == cell``.
    """
    hints = typing.get_type_hints(kind)
    return kind(**{f.name: _read(document[f.name], hints[f.name]) for f in dataclasses.fields(kind) if f.init})


@dataclass(frozen=True)
class Claim:
    """One claim of a paper as a measured number: what was measured, in which setting, and whether it holds."""

    name: str
    value: float
    measure: str
    holds: bool
    setting: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "measure": self.measure, "holds": bool(self.holds), "setting": dict(self.setting)}

    @classmethod
    def from_dict(cls, name: str, document: Mapping[str, Any]) -> Claim:
        return cls(name, number(document["value"]), str(document["measure"]), bool(document["holds"]),
                   dict(document.get("setting", {})))


def claims_to_dict(claims: tuple[Claim, ...]) -> dict[str, dict[str, Any]]:
    return {claim.name: claim.to_dict() for claim in claims}


def claims_from_dict(document: Mapping[str, Mapping[str, Any]]) -> tuple[Claim, ...]:
    return tuple(Claim.from_dict(name, value) for name, value in document.items())


class PaperResult:
    """Base of each paper's frozen result dataclass: ``summary()`` <-> ``from_summary()``, ``save`` and ``load``.

    Subclasses set ``experiment`` (the ``mechprobe toy`` name) and implement :meth:`summary` (the
    JSON document, non-finite numbers allowed: :meth:`save` applies the NaN policy) and
    :meth:`from_summary` (its inverse, used by the report to rebuild from disk).
    """

    experiment: ClassVar[str] = ""
    reference: PaperReference  # a field of every subclass: the paper's settings and this run's deviations

    def summary(self) -> dict[str, Any]:
        raise NotImplementedError

    @classmethod
    def from_summary(cls: type[R], document: Mapping[str, Any]) -> R:
        raise NotImplementedError

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        """The findings this toy reports in the pretrained models' schema over its seeds (the report's verdict
        table; :mod:`analyses.toy_findings`); none unless the paper's experiment measures them."""
        return {}

    def _repr_html_(self) -> str:
        """The toy's findings over its seeds as a verdict table (control: the toy at initialisation)."""
        findings = self.toy_findings()
        seeds = len(next(iter(findings.values())).seeds) if findings else 0
        return verdict_table_html(findings, title=f"{self.experiment} toy: findings over {seeds} seed(s), "
                                                  f"control = the same toy at initialisation")

    def to_dataframe(self) -> pd.DataFrame:
        """The toy's findings, one row each (:func:`probes.display.verdicts_dataframe`)."""
        return verdicts_dataframe(self.toy_findings())

    def to_json(self) -> str:
        """The summary as strict JSON text (non-finite numbers as ``null``)."""
        return json.dumps(json_ready(self.summary()), indent=2, allow_nan=False)

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/summary.json`` atomically; returns its path."""
        return write_json(Path(folder) / SUMMARY_FILE, self.summary())

    @classmethod
    def load(cls: type[R], folder: str | Path) -> R:
        """The result saved in ``folder`` (by :meth:`save`)."""
        path = Path(folder) / SUMMARY_FILE
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{path}: no such file; run the {cls.experiment or 'toy'} experiment into "
                             f"{Path(folder)} first.") from None
        except (OSError, ValueError) as error:
            raise InputError(f"{path} cannot be read as a summary ({error}); run the experiment again.") from None
        return cls.from_summary(document)
