"""Interactive views: hand-made data in, the DOM headless Chromium builds out (no network, no JS errors)."""

from __future__ import annotations

import re

import pytest
import torch

from analyses.pretrained.passages import passage_patterns
from analyses.report.render_check import dump_dom
from probes.display.views import heatmap_view, page, pattern_view
from tests.chromium import require_chromium
from tests.hooked_models import OracleModel


def test_heatmap_has_one_cell_per_head_with_its_value_as_tooltip():
    snippet = heatmap_view("induction", [[0.1, 0.9], [0.5, float("nan")], [0.2, 0.3]], chance=0.05)
    assert snippet.count("class='mp-cell'") == 6
    assert "title='L0H1 score 0.900 (chance 0.050)'" in snippet and "background:#ccc" in snippet


def test_pattern_view_checks_its_shape():
    with pytest.raises(ValueError, match=r"\[2 x 2\]"):
        pattern_view("x", ["a", "b"], [[1.0, 0.0]])


def test_passage_patterns_are_the_heads_own_attention():
    model = OracleModel()
    tokens = torch.tensor([[3, 1, 4, 1, 5, 9, 2, 6, 5, 3]])
    passage = passage_patterns(model, tokens, {"previous": (0, 0), "induction": (1, 1)}, max_tokens=8)
    expected = OracleModel.patterns(tokens[:, :8], model.cfg.n_heads)
    assert passage.tokens == [str(t) for t in tokens[0, :8].tolist()]  # no tokenizer: the ids
    assert torch.allclose(torch.tensor(passage.patterns["previous"]), expected[0, 0])
    assert torch.allclose(torch.tensor(passage.patterns["induction"]), expected[0, 1])
    assert passage.heads == {"previous": (0, 0), "induction": (1, 1)}


def drawn_views(dom: str) -> dict[str, list[str]]:
    return {"heatmap": re.findall(r"class=\"mp-view mp-heatmap\"[^>]*data-drawn=\"(\d+)\"", dom),
            "pattern": re.findall(r"class=\"mp-view mp-pattern\"[^>]*data-drawn=\"(\d+)\"", dom)}


def views_page() -> str:
    tokens = ["The", " cat", " sat", " .", " The", " cat"]
    pattern = torch.eye(6).roll(-1, dims=1).tril()  # each token on the one before (token 0 on nothing)
    pattern[0, 0] = 1.0
    return page("views", [heatmap_view("scores", [[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]]),
                          pattern_view("previous-token head", tokens, pattern.tolist())])


def test_a_page_of_views_loads_nothing_from_the_network():
    html_text = views_page()
    assert "http://" not in html_text and "https://" not in html_text and "<script src" not in html_text


def test_views_draw_in_headless_chromium_without_errors(tmp_path):
    require_chromium()
    html_text = views_page()
    path = tmp_path / "views.html"
    path.write_text(html_text, encoding="utf-8")
    dom = dump_dom(path)
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-views-drawn="true"' in body and "data-js-error" not in body, body
    assert drawn_views(dom) == {"heatmap": ["6"], "pattern": ["6"]}
    spans = re.findall(r"<span class=\"mp-token( mp-query)?\" data-i=\"(\d)\"[^>]*style=\"background: ([^\"]+);\"", dom)
    assert len(spans) == 6
    # the last token is shown first: it attends to token 4 only
    strong = [i for query, i, colour in spans if colour == "rgb(31, 119, 180)"]  # full opacity
    assert strong == ["4"] and spans[5][0] == " mp-query"
    assert "token 5 \" cat\" attends most to token 4" in dom
