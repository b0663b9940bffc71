"""How results show themselves: offline HTML views (report.html, ``mechprobe heads --html``, ``_repr_html_`` in a
notebook), layer x head maps and linear-probe curves as matplotlib figures, and verdict tables of findings."""

from probes.display.head_maps import HeadMap, HeadMapDisplay, head_maps_figure, head_maps_html
from probes.display.linear_figure import linear_scores_figure
from probes.display.verdict_table import verdict_table_html, verdict_tables_html, verdicts_dataframe
from probes.display.views import heatmap_view, notebook_html, page, pattern_view

__all__ = [
    "HeadMap",
    "HeadMapDisplay",
    "head_maps_figure",
    "head_maps_html",
    "heatmap_view",
    "linear_scores_figure",
    "notebook_html",
    "page",
    "pattern_view",
    "verdict_table_html",
    "verdict_tables_html",
    "verdicts_dataframe",
]
