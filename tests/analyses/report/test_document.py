"""Report rendering: Markdown and self-contained HTML; figures really render in headless Chromium."""

from __future__ import annotations

import base64
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest

from analyses.report.document import Figure, Report, Section, Table
from analyses.report.render_check import colourful_fraction, screenshot
from tests.chromium import require_chromium


def small_report(folder) -> Report:
    fig, ax = plt.subplots(figsize=(4, 3))
    ax.imshow(np.arange(100).reshape(10, 10), cmap="viridis")
    fig.savefig(folder / "heat.png")
    plt.close(fig)
    section = Section("Induction", ["Top heads and chance."],
                      [Table(["model", "score", "ci"], [["toy", 0.91234, (0.8, 0.95)]])],
                      [Figure("heat.png", "a heatmap")])
    return Report("mechprobe report", [section], {"toy": {"induction": {"score": 0.91234}}})


def test_markdown_and_html_hold_the_numbers_and_embed_figures(tmp_path):
    report = small_report(tmp_path)
    path = report.write(tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert "| toy | 0.912 | [0.800, 0.950] |" in markdown and "![a heatmap](heat.png)" in markdown
    page = path.read_text()
    encoded = base64.b64encode((tmp_path / "heat.png").read_bytes()).decode()
    assert f"data:image/png;base64,{encoded}" in page and "heat.png" not in page.replace("a heatmap", "")
    assert json.loads((tmp_path / "summary.json").read_text())["toy"]["induction"]["score"] == 0.91234


@pytest.mark.slow
def test_figures_render_in_headless_chromium(tmp_path):
    require_chromium()
    report = small_report(tmp_path)
    html_path = report.write(tmp_path)
    with_figure = colourful_fraction(screenshot(html_path, tmp_path / "with.png", height=900))
    report.sections[0].figures.clear()
    without_figure = colourful_fraction(screenshot(report.write(tmp_path), tmp_path / "without.png", height=900))
    assert with_figure > 0.02 > without_figure
