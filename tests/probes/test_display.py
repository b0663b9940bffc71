"""Results show themselves: self-contained HTML with their numbers, layer x head figures, verdict tables."""

from __future__ import annotations

import math
import re

import matplotlib.figure
import pytest
import torch

import probes
from analyses.report.render_check import dump_dom
from probes.core.result import ProbeResult
from probes.display import (
    HeadMap,
    HeadMapDisplay,
    head_maps_figure,
    head_maps_html,
    notebook_html,
    verdict_table_html,
    verdicts_dataframe,
)
from probes.stats.findings import Finding
from tests.chromium import require_chromium
from tests.hooked_models import OracleConfig, OracleModel

# Every result with a [layer, head] (or [layer, head, ...]) tensor; the others are per layer, per subset or per slice.
PER_HEAD_RESULTS = {"HeadScores", "GeneralizedInductionScores", "CopierProfile", "SameTokenAttention",
                    "TopicAttention", "KeyTokenAttention", "CooccurrenceOrdering"}


def assert_self_contained(text: str) -> None:
    """No source, link or script fetched from anywhere: every src/href is inline, no <link>, no script src."""
    assert "<link" not in text.lower()
    for attribute in re.findall(r"""(?:src|href)\s*=\s*["']?([^"'\s>]*)""", text, flags=re.IGNORECASE):
        assert not attribute.lower().startswith(("http", "//")), attribute
    assert not re.search(r"<script[^>]*\bsrc\s*=", text, flags=re.IGNORECASE)
    assert "http" not in text  # not even in the inline script


@pytest.fixture(scope="module")
def oracle_scores() -> probes.HeadScores:
    return probes.head_scores(OracleModel(OracleConfig(n_layers=3, n_heads=4)), seq_len=8, n_batches=1,
                              batch_size=4)


def test_every_per_head_result_displays_itself():
    displayed = {name for name, cls in ProbeResult._registry.items() if issubclass(cls, HeadMapDisplay)}
    assert displayed == PER_HEAD_RESULTS


def test_head_scores_html_is_self_contained_and_holds_the_numbers(oracle_scores):
    text = oracle_scores._repr_html_()
    assert_self_contained(text)
    assert text.count("<style>") == 1 and text.count("<script>") == 1
    assert text.count("class='mp-cell'") == 3 * 3 * 4  # three kinds x 3 layers x 4 heads
    layer, head, best = oracle_scores.top_heads("induction", 1)[0]
    assert best == pytest.approx(1.0) and head == 1  # the oracle's head 1 is a perfect induction head
    assert f"title='L{layer}H{head} score {best:.3f} (chance {oracle_scores.chance['induction']:.3f})'" in text
    assert f"highest score: L{layer}H{head} {best:.3f}" in text


def test_plot_is_one_layer_by_head_image_per_map(oracle_scores):
    figure = oracle_scores.plot("induction")
    assert isinstance(figure, matplotlib.figure.Figure)
    images = [image for ax in figure.axes for image in ax.get_images()]
    assert len(images) == 1 and images[0].get_array().shape == (3, 4)
    assert torch.allclose(torch.as_tensor(images[0].get_array().data), oracle_scores.scores["induction"].double())
    assert f"chance {oracle_scores.chance['induction']:.3f}" in figure.axes[0].get_title()
    everything = oracle_scores.plot()
    assert sum(len(ax.get_images()) for ax in everything.axes) == 3
    with pytest.raises(probes.ConfigError, match="No head map named 'nope'"):
        oracle_scores.plot("nope")


def test_other_per_head_results_show_their_maps():
    model = OracleModel(OracleConfig(n_layers=2, n_heads=4))
    tokens = torch.randint(1, 20, (4, 16), generator=torch.Generator().manual_seed(0))
    copier, induction, keys = probes.run_probes(model, [probes.CopierProbe(4), probes.GeneralizedInductionProbe(3),
                                                        probes.KeyTokenAttentionProbe()], [tokens])
    # head 0 attends to the previous token: its most attended distance is 1 with mass ~1
    assert copier.head_maps()[0].values[:, 0].tolist() == [1.0, 1.0]
    ordering = probes.cooccurrence_ordering(keys)
    for result in (copier, induction, keys, ordering):
        text = result._repr_html_()
        assert_self_contained(text)
        maps = result.head_maps()
        assert text.count("class='mp-view mp-heatmap'") == len(maps)
        assert all(m.values.shape == (2, 4) for m in maps)
        figure = result.plot(maps[0].name)
        assert figure.axes[0].get_images()[0].get_array().shape == (2, 4)


def test_head_map_best_skips_nan_and_checks_its_shape():
    head_map = HeadMap("x", torch.tensor([[0.2, float("nan")], [0.9, 0.5]]))
    assert head_map.best(2) == [(1, 0, pytest.approx(0.9)), (1, 1, pytest.approx(0.5))]
    with pytest.raises(probes.InputError, match=r"\[layer, head\] tensor; got \(3,\)"):
        HeadMap("bad", torch.zeros(3))
    figure = head_maps_figure([HeadMap("x", torch.tensor([[0.0, 1.0]]), chance=5.0)])  # chance off the scale
    assert len(figure.axes[0].get_images()) == 1


def findings() -> dict[str, Finding]:
    strong = Finding("induction score of the best head", 0.62, (0.55, 0.70), "uniform attention", 0.02, 0.001,
                     min_effect=0.1).with_control(0.03, (0.02, 0.04))
    weak = Finding("same/different topic ratio", 1.01, (0.98, 1.04), "label permutation", 1.0, 0.4,
                   min_effect=1.1, effect="ratio")
    return {"induction": strong, "topic_attention": weak}


def test_verdict_table_has_one_row_per_finding_with_holds_shown():
    table = verdict_table_html(findings(), title="smollm2")
    assert_self_contained(table)
    rows = re.findall(r"<tr class='mp-finding'>(.*?)</tr>", table)
    assert len(rows) == 2
    assert "induction" in rows[0] and "0.620 [0.550, 0.700]" in rows[0] and "0.030 [0.020, 0.040]" in rows[0]
    assert "uniform attention: 0.020, p=0.001" in rows[0] and rows[0].endswith("<td class='mp-holds'>holds</td>")
    # 1.01 [0.98, 1.04] against a ratio threshold of 1.0 x 1.1: the interval lies below it
    assert rows[1].endswith("<td class='mp-absent'>absent</td>") and "<td>-</td>" in rows[1]  # no control measured
    frame = verdicts_dataframe(findings())
    assert frame["holds"].tolist() == [True, False] and math.isnan(frame["control_value"][1])
    assert frame["verdict"].tolist() == ["holds", "absent"]
    assert findings()["induction"]._repr_html_().count("<tr class='mp-finding'>") == 1


def test_linear_probe_plot_is_accuracy_per_hook_with_its_interval():
    from probes.linear.labels import PreviousTokenLabels, most_frequent_tokens
    from probes.linear.residual_hooks import residual_hooks
    from tests.hooked_models import PreviousTokenWriter

    tokens = torch.randint(0, 12, (32, 20), generator=torch.Generator().manual_seed(1))
    model = PreviousTokenWriter()
    labels = PreviousTokenLabels((1, 2), most_frequent_tokens([tokens], 6))
    probe = probes.LinearProbe(labels, hooks=residual_hooks(model), max_examples=300, n_folds=3, n_boot=50)
    (scores,) = probes.run_probes(model, [probe], list(tokens.split(16)))
    figure = scores.plot("1")
    assert len(figure.axes) == 1
    accuracy = figure.axes[0].get_lines()[0].get_ydata()
    assert list(accuracy) == pytest.approx(scores.accuracy["1"].tolist())
    assert len(scores.plot().axes) == 2
    with pytest.raises(probes.ConfigError, match="No label key '3'"):
        scores.plot("3")


def test_two_notebook_cells_on_one_page_draw_each_view_once(tmp_path):
    """A notebook puts every output on one page and runs each output's script: views already drawn are skipped."""
    from probes.display.views import pattern_view

    require_chromium()

    tokens = ["a", "b", "c"]
    first = notebook_html([pattern_view("previous token", tokens, [[1, 0, 0], [1, 0, 0], [0, 1, 0]])])
    second = HeadMap("induction", torch.tensor([[0.1, 0.9], [0.4, 0.2]]), chance=0.05)
    path = tmp_path / "cells.html"
    path.write_text(f"<!DOCTYPE html><html><body>{first}{head_maps_html([second])}</body></html>", encoding="utf-8")
    dom = dump_dom(path)
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-views-drawn="true"' in body and "data-js-error" not in body, body
    assert len(re.findall(r"<span class=\"mp-token", dom)) == 3  # the second cell's script did not redraw it
    assert re.findall(r"class=\"mp-view mp-heatmap\"[^>]*data-drawn=\"(\d+)\"", dom) == ["4"]


def test_every_progress_bar_is_tqdm_auto():
    """``tqdm.auto``: a widget in a notebook where ipywidgets is installed, text elsewhere (never plain ``tqdm``)."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    imports = []
    for package in ("mechprobe", "probes", "toymodels", "analyses"):
        for path in (root / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "tqdm":
                    imports.append((path.name, node.module))
                elif isinstance(node, ast.Import):
                    imports += [(path.name, a.name) for a in node.names if a.name.split(".")[0] == "tqdm"]
    assert imports and all(module == "tqdm.auto" for _, module in imports), imports
