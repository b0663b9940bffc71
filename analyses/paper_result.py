"""The typed result of a paper's toy experiment (claims, histories, numbers) and its ``summary.json``.

Each paper's ``analyses/<paper>/experiment.py`` returns a frozen dataclass deriving from
:class:`PaperResult`. It names every number the report compares (``compare`` reads these fields,
never a string key), keeps the paper's claims as :class:`Claim` records and its histories as
lists, and writes itself as ``summary.json`` with :meth:`PaperResult.save` through the one serializer,
:mod:`mechprobe.records` (a non-finite number is JSON ``null``, read back as NaN where the field is a
float). Saving and loading round-trip: ``type(r).load(folder) == r`` for the fields stored in the summary.
:func:`write_json` writes every other JSON document mechprobe writes (the report's summary.json,
``probe-linear``, ``heads --json``, ``ablate``) the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from analyses.paper_reference import PaperReference
from analyses.toy_findings import ToyFinding
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text
from probes.display.verdict_table import verdict_table_html, verdicts_dataframe

if TYPE_CHECKING:
    import pandas as pd

R = TypeVar("R", bound="PaperResult")

SUMMARY_FILE = "summary.json"


def write_json(path: str | Path, document: Any) -> Path:
    """Write ``document`` (records, or values made of them) to ``path`` atomically as strict JSON
    (:func:`mechprobe.records.to_json`)."""
    path = Path(path)
    atomic_write_text(path, records.to_json(document))
    return path


@dataclass(frozen=True)
class Claim:
    """One claim of a paper as a measured number: what was measured, in which setting, and whether it holds."""

    name: str
    value: float
    measure: str
    holds: bool
    setting: Mapping[str, Any] = field(default_factory=dict)


class PaperResult:
    """Base of each paper's frozen result dataclass: ``save`` writes ``summary.json``, ``load`` reads it back.

    Subclasses set ``experiment`` (the ``mechprobe toy`` name); their fields are the document
    (:mod:`mechprobe.records`; a field kept in files of its own has ``metadata=UNSAVED_FIELD``).
    """

    experiment: ClassVar[str] = ""
    reference: PaperReference  # a field of every subclass: the paper's settings and this run's deviations

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
        return records.to_json(self)

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/summary.json`` atomically; returns its path."""
        return write_json(Path(folder) / SUMMARY_FILE, self)

    @classmethod
    def from_document(cls: type[R], document: Any, where: str = "the summary", *, at: str = "",
                      rerun: str | None = None) -> R:
        """The result whose ``summary.json`` holds ``document`` (found at ``at`` in the file ``where``); a summary
        this mechprobe cannot read raises :class:`~mechprobe.errors.RecordError` in one line naming the field and
        ending with ``rerun`` (default: run the experiment again)."""
        return records.checked(cls, document, where, at=at, rerun=cls._rerun() if rerun is None else rerun)

    @classmethod
    def _rerun(cls) -> str:
        return (f"It was written by another mechprobe version (before 0.2?) or damaged: run `mechprobe toy "
                f"{cls.experiment or 'NAME'}` again.")

    @classmethod
    def load(cls: type[R], folder: str | Path) -> R:
        """The result saved in ``folder`` (by :meth:`save`)."""
        path = Path(folder) / SUMMARY_FILE
        if not path.is_file():
            raise RecordError(f"{path}: no such file; run the {cls.experiment or 'toy'} experiment into "
                              f"{Path(folder)} first.")
        return cls.from_document(records.read_json(path, rerun=cls._rerun()), str(path))
