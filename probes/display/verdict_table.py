"""A verdict table of findings (one row each: value with its interval, null, control, verdict) as offline HTML and as a
DataFrame; the ``_repr_html_`` of a finding, a toy's findings, a pretrained run and the report's comparison.

A finding is anything with :class:`probes.stats.findings.Finding`'s attributes (``statistic``, ``value``, ``ci``,
``null_kind``, ``null_value``, ``reported_p``, ``control_value``, ``control_ci``, ``holds``, ``verdict``,
``units_to_settle``, ``units_for_power``, ``confidence_sequence``): a
:class:`~probes.stats.findings.Finding` or a toy's finding over seeds.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

from probes.display.views import notebook_html

if TYPE_CHECKING:
    import pandas as pd


class FindingLike(Protocol):
    """What a verdict row reads from a finding."""

    @property
    def statistic(self) -> str: ...
    @property
    def value(self) -> float: ...
    @property
    def ci(self) -> tuple[float, float]: ...
    @property
    def null_kind(self) -> str: ...
    @property
    def null_value(self) -> float: ...
    @property
    def reported_p(self) -> float: ...
    @property
    def control_value(self) -> float | None: ...
    @property
    def control_ci(self) -> tuple[float, float] | None: ...
    @property
    def holds(self) -> bool: ...
    @property
    def verdict(self) -> str: ...
    @property
    def units_to_settle(self) -> int | None: ...
    @property
    def units_for_power(self) -> int | None: ...
    @property
    def confidence_sequence(self) -> tuple[float, float]: ...


def _number(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.3f}"


def _with_interval(value: float | None, ci: tuple[float, float] | None) -> str:
    text = _number(value)
    if ci is not None and all(math.isfinite(c) for c in ci):
        text += f" [{ci[0]:.3f}, {ci[1]:.3f}]"
    return text


def verdict_text(finding: FindingLike) -> str:
    """``holds``, ``absent``, or ``inconclusive`` with the units that would settle it where known."""
    verdict = finding.verdict
    units = finding.units_to_settle
    return f"{verdict} (~{units} units would settle it)" if verdict == "inconclusive" and units else verdict


def verdict_rows(findings: Mapping[str, FindingLike]) -> list[list[str]]:
    """The table's cells, one row per finding: name, value [95% interval], null (kind: value, p), control,
    verdict."""
    rows = []
    for name, finding in findings.items():
        p = finding.reported_p
        null = f"{finding.null_kind}: {_number(finding.null_value)}" + (f", p={p:.3g}" if math.isfinite(p) else "")
        control = "-" if finding.control_value is None else _with_interval(finding.control_value, finding.control_ci)
        rows.append([name, _with_interval(finding.value, finding.ci), null, control, verdict_text(finding)])
    return rows


def _table(findings: Mapping[str, FindingLike]) -> str:
    header = "".join(f"<th>{c}</th>" for c in ("finding", "value [95% interval]", "null (p, Holm-adjusted)",
                                              "control", "verdict"))
    body = []
    for row, finding in zip(verdict_rows(findings), findings.values()):
        cells = "".join(f"<td>{html.escape(c)}</td>" for c in row[:-1])
        verdict = f"<td class='mp-{finding.verdict}'>{html.escape(row[-1])}</td>"
        body.append(f"<tr class='mp-finding'>{cells}{verdict}</tr>")
    return f"<table class='mp-verdicts'><tr>{header}</tr>{''.join(body)}</table>"


def verdict_table_html(findings: Mapping[str, FindingLike], *, title: str | None = None) -> str:
    """Self-contained HTML of ``findings`` (name -> finding): one row per finding, ``holds`` in bold green,
    ``absent`` in grey, ``inconclusive`` in amber."""
    return notebook_html([_table(findings)], title=title)


def verdict_tables_html(groups: Mapping[str, Mapping[str, FindingLike]], *, title: str | None = None) -> str:
    """One verdict table per group (e.g. per model of a comparison), each under its name as a heading."""
    return notebook_html([f"<div class='mp-view'><h4>{html.escape(name)}</h4>{_table(findings)}</div>"
                          for name, findings in groups.items()], title=title)


def verdicts_dataframe(findings: Mapping[str, FindingLike]) -> pd.DataFrame:
    """One row per finding: value, interval, null, adjusted p, control and its interval (NaN where none), holds,
    verdict, the units that would settle an inconclusive one, the units the design needs for 80% power at its
    threshold (:mod:`probes.stats.power`) and the ends of its 95% confidence sequence
    (:mod:`probes.stats.confidence_sequence`)."""
    import pandas as pd

    nan = float("nan")
    return pd.DataFrame([{
        "finding": name, "statistic": f.statistic, "value": f.value, "ci_low": f.ci[0], "ci_high": f.ci[1],
        "null_kind": f.null_kind, "null_value": f.null_value, "p_adjusted": f.reported_p,
        "control_value": nan if f.control_value is None else f.control_value,
        "control_ci_low": f.control_ci[0] if f.control_ci else nan,
        "control_ci_high": f.control_ci[1] if f.control_ci else nan, "holds": f.holds, "verdict": f.verdict,
        "units_to_settle": f.units_to_settle, "units_for_power": f.units_for_power,
        "sequence_low": f.confidence_sequence[0], "sequence_high": f.confidence_sequence[1],
    } for name, f in findings.items()])
