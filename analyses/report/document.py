"""A report as data (sections of text, tables and figures) rendered to Markdown and self-contained HTML."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyses.paper_result import write_json
from probes.core.atomic import atomic_write_text
from probes.display.views import CSS as VIEW_CSS
from probes.display.views import JS as VIEW_JS


def format_value(value: Any) -> str:
    """Numbers to 3 significant decimals, intervals as [lo, hi], the rest as text."""
    if isinstance(value, float):
        return "nan" if value != value else f"{value:.3f}"
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(isinstance(v, float) for v in value):
        return f"[{value[0]:.3f}, {value[1]:.3f}]"
    return str(value)


_STRONG = re.compile(r"\*\*(.+?)\*\*")
_EMPHASIS = re.compile(r"(?<![\w*])\*(?![\s*])(.+?)(?<![\s*])\*(?![\w*])")
_CODE = re.compile(r"`([^`]+)`")


def inline_html(text: str) -> str:
    """``text`` escaped for HTML with its Markdown inline marks rendered: ``**strong**``, ``*emphasis*``,
    ```code```. Example: ``inline_html("**holds**: 0.9")`` is ``"<strong>holds</strong>: 0.9"``."""
    escaped = html.escape(text)
    escaped = _CODE.sub(r"<code>\1</code>", escaped)
    escaped = _STRONG.sub(r"<strong>\1</strong>", escaped)
    return _EMPHASIS.sub(r"<em>\1</em>", escaped)


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
    """An interactive view (an HTML snippet of :mod:`probes.display.views`); Markdown shows its title."""

    title: str
    html: str


@dataclass
class Section:
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)
    views: list[View] = field(default_factory=list)
    figures_first: bool = False
    """Figures above the tables (the verdicts' forest plot opens the report)."""


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
            tables: list[str] = []
            for table in section.tables:
                tables.append("| " + " | ".join(table.columns) + " |")
                tables.append("| " + " | ".join("---" for _ in table.columns) + " |")
                tables += ["| " + " | ".join(format_value(v) for v in row) + " |" for row in table.rows]
                tables.append("")
            figures: list[str] = []
            for figure in section.figures:
                figures += [f"![{figure.caption}]({figure.path})", "", f"*{figure.caption}*", ""]
            lines += figures + tables if section.figures_first else tables + figures
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
            "figure{margin:1em 0}img{max-width:100%}figcaption{color:#444;font-size:90%}"
            + VIEW_CSS + "</style>",
            "</head><body>",
            f"<h1>{html.escape(self.title)}</h1>",
        ]
        for section in self.sections:
            parts.append(f"<h2>{html.escape(section.title)}</h2>")
            parts += [f"<p>{inline_html(p)}</p>" for p in section.paragraphs]
            tables: list[str] = []
            for table in section.tables:
                tables.append("<table><tr>" + "".join(f"<th>{inline_html(c)}</th>" for c in table.columns) + "</tr>")
                for row in table.rows:
                    tables.append("<tr>" + "".join(f"<td>{inline_html(format_value(v))}</td>" for v in row) + "</tr>")
                tables.append("</table>")
            figures: list[str] = []
            for figure in section.figures:
                data = base64.b64encode((folder / figure.path).read_bytes()).decode("ascii")
                figures.append(
                    f"<figure><img alt='{html.escape(figure.caption)}' src='data:image/png;base64,{data}'>"
                    f"<figcaption>{inline_html(figure.caption)}</figcaption></figure>"
                )
            parts += figures + tables if section.figures_first else tables + figures
            parts += [view.html for view in section.views]
        if any(section.views for section in self.sections):
            parts.append(f"<script>{VIEW_JS}</script>")
        parts.append("</body></html>")
        return "\n".join(parts)

    def write(self, folder: str | Path) -> Path:
        """Write report.md, report.html and summary.json into ``folder`` (each atomically)."""
        folder = Path(folder)
        write_json(folder / "summary.json", self.summary)
        atomic_write_text(folder / "report.md", self.to_markdown())
        atomic_write_text(folder / "report.html", self.to_html(folder))
        return folder / "report.html"
