"""mechprobe heads: table, JSON schema, clear errors with exit code 2 and nothing half-written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import probes
from analyses.cli import main
from tests.chromium import require_chromium


def test_heads_on_minilm_writes_json(tmp_path, capsys):
    out = tmp_path / "heads.json"
    assert main(["heads", "--model", "minilm-l6", "--seq-len", "10", "--batches", "1", "--batch-size", "2",
                 "--json", str(out), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "previous_token" in printed and "rank" in printed
    document = json.loads(out.read_text())
    assert document["type"] == "HeadScores" and document["command"]["model"] == "minilm-l6"
    assert (document["command"]["n_layers"], document["command"]["n_heads"]) == (6, 12)
    assert document["command"]["settings"]["seq_len"] == 10
    # the same schema as ProbeResult.save: it loads back as the result, every per-head tensor kept
    result = probes.ProbeResult.load(out)
    assert isinstance(result, probes.HeadScores) and set(result.scores) == {"induction", "previous_token",
                                                                              "duplicate_token"}
    assert result.scores["induction"].shape == (6, 12) and result.provenance.model == "minilm-l6"
    assert result.scores["induction"].tolist() == document["result"]["scores"]["induction"]["values"]


def test_heads_scores_the_patterns_asked_for(tmp_path, capsys):
    out = tmp_path / "heads.json"
    assert main(["heads", "--model", "minilm-l6", "--seq-len", "10", "--batches", "1", "--batch-size", "2",
                 "--pattern", "self", "--pattern", "offset:-1", "--json", str(out), "--no-progress"]) == 0
    result = probes.ProbeResult.load(out)
    assert list(result.scores) == ["self", "offset:-1"] and result.provenance.settings["kinds"] == ["self", "offset:-1"]
    assert "offset:-1 (chance" in capsys.readouterr().out


def _heads_html(folder: Path) -> Path:
    out = folder / "heads.html"
    assert main(["heads", "--model", "minilm-l6", "--seq-len", "10", "--batches", "1", "--batch-size", "2",
                 "--html", str(out), "--no-progress"]) == 0
    return out


def test_heads_html_draws_a_map_per_kind_and_the_top_heads_attention(tmp_path, capsys):
    text = _heads_html(tmp_path).read_text()
    assert text.count("mp-view mp-heatmap") == 3 and text.count("mp-view mp-pattern") == 6
    assert "https://" not in text and "http://" not in text


def test_heads_html_draws_every_view_in_headless_chromium(tmp_path, capsys):
    import re

    from analyses.report.render_check import dump_dom

    require_chromium()
    dom = dump_dom(_heads_html(tmp_path))
    assert 'data-views-drawn="true"' in re.search(r"<body[^>]*>", dom).group(0)
    assert re.findall(r'data-drawn="(\d+)"', dom) == ["72"] * 3 + ["21"] * 6  # [CLS] + 10 + 10 tokens


def test_json_path_in_missing_folder_fails_before_any_work(tmp_path, capsys):
    target = tmp_path / "missing" / "heads.json"
    assert main(["heads", "--model", "minilm-l6", "--json", str(target)]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "Traceback" not in err
    assert not target.parent.exists()


def test_unknown_model_exits_2_without_traceback(capsys):
    assert main(["heads", "--model", "definitely-not-a-model-xyz"]) == 2
    err = capsys.readouterr().err
    assert "definitely-not-a-model-xyz" in err and "Traceback" not in err


def test_seq_len_below_two_is_an_error(capsys):
    assert main(["heads", "--model", "minilm-l6", "--seq-len", "1"]) == 2
    assert "seq_len" in capsys.readouterr().err


def test_help_explains_each_command(capsys):
    for argv in (["--help"], ["heads", "--help"], ["toy", "--help"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "induction" in text and "--seq-len" in text and "--preset" in text


@pytest.mark.slow
def test_heads_on_smollm2_finds_induction_heads(tmp_path, capsys):
    out = tmp_path / "heads.json"
    assert main(["heads", "--model", "smollm2-135m", "--json", str(out), "--no-progress"]) == 0
    assert float(probes.ProbeResult.load(out).scores["induction"].max()) > 0.7


def test_half_precision_scores_track_float32(tmp_path):
    full, half = tmp_path / "full.json", tmp_path / "half.json"
    common = ["heads", "--model", "minilm-l6", "--seq-len", "12", "--batches", "1", "--batch-size", "4",
              "--no-progress"]
    assert main([*common, "--json", str(full)]) == 0
    assert main([*common, "--json", str(half), "--dtype", "bfloat16"]) == 0
    a, b = probes.ProbeResult.load(full), probes.ProbeResult.load(half)
    for kind in a.scores:
        assert float((a.scores[kind] - b.scores[kind]).abs().max()) < 0.05, kind
    assert json.loads(half.read_text())["command"]["settings"]["dtype"] == "bfloat16"
    assert (a.provenance.dtype, b.provenance.dtype) == ("float32", "bfloat16")
