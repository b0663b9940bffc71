"""A report as data (sections of text, tables and figures) rendered to Markdown and self-contained HTML."""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyses.report import interactive
from analyses.paper_result import write_json
from probes.core.atomic import atomic_write_text


def format_value(value: Any) -> str:
    """Numbers to 3 significant decimals, intervals as [lo, hi], the rest as text."""
    if isinstance(value, float):
        return "nan" if value != value else f"{value:.3f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, float) for v in value):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    return str(value)


@dataclass(frozen=True)
class Table:
    columns: list[str]
    rows: list[list[Any]]


@dataclass(frozen=True)
class Figure:
    """A PNG file (relative to the report folder) with a caption."""

    path: str
    caption: str


@dataclass(frozen=True)
class View:
    """An interactive view (an HTML snippet of :mod:`analyses.report.interactive`); Markdown shows its title."""

    title: str
    html: str


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    views: list[View] = field(default_factory=list)


@dataclass
class Report:
    """What :func:`analyses.report.compare` returns: sections for people, ``summary`` for programs."""

    title: str
    sections: list[Section]
    summary: dict[str, Any]

    def to_markdown(self) -> str:
        lines = [f"# {self.title}", ""]
        for section in self.sections:
            lines += [f"## {section.title}", ""]
            for paragraph in section.paragraphs:
                lines += [paragraph, ""]
            for table in section.tables:
                lines.append("| " + " | ".join(table.columns) + " |")
                lines.append("| " + " | ".join("---" for _ in table.columns) + " |")
                lines += ["| " + " | ".join(format_value(v) for v in row) + " |" for row in table.rows]
                lines.append("")
            for figure in section.figures:
                lines += [f"![{figure.caption}]({figure.path})", "", f"*{figure.caption}*", ""]
            if section.views:
                lines += ["Interactive in report.html: " + "; ".join(view.title for view in section.views) + ".", ""]
        return "\n".join(lines)

    def to_html(self, folder: Path) -> str:
        """HTML with every figure embedded as a data URI (the file stands alone)."""
        parts = [
            "<!DOCTYPE html><html><head><meta charset='utf-8'>",
            f"<title>{html.escape(self.title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.45}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #bbb;padding:4px 8px;"
            "text-align:right}th{background:#eee}td:first-child,th:first-child{text-align:left}"
            "figure{margin:1em 0}img{max-width:100%}figcaption{color:#444;font-size:90%}" + interactive.CSS + "</style>",
            "</head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for section in self.sections:
            parts.append(f"<h2>{html.escape(section.title)}</h2>")
            parts += [f"<p>{html.escape(p)}</p>" for p in section.paragraphs]
            for table in section.tables:
                parts.append("<table><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in table.columns) + "</tr>")
                for row in table.rows:
                    parts.append("<tr>" + "".join(f"<td>{html.escape(format_value(v))}</td>" for v in row) + "</tr>")
                parts.append("</table>")
            for figure in section.figures:
                data = base64.b64encode((folder / figure.path).read_bytes()).decode("ascii")
                parts.append(
                    f"<figure><img alt='{html.escape(figure.caption)}' src='data:image/png;base64,{data}'>"
                    f"<figcaption>{html.escape(figure.caption)}</figcaption></figure>"
                )
            parts += [view.html for view in section.views]
        if any(section.views for section in self.sections):
            parts.append(f"<script>{interactive.JS}</script>")
        parts.append("</body></html>")
        return "\n".join(parts)

    def write(self, folder: str | Path) -> Path:
        """Write report.md, report.html and summary.json into ``folder`` (each atomically)."""
        folder = Path(folder)
        write_json(folder / "summary.json", self.summary)
        atomic_write_text(folder / "report.md", self.to_markdown())
        atomic_write_text(folder / "report.html", self.to_html(folder))
        return folder / "report.html"
