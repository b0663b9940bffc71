"""mechprobe ablate: on a model with one planted induction head, --top induction:1 picks it on the even batches and
its ablation is measured beside random heads of its layer; bad input exits 2 in one line."""

from __future__ import annotations

import json

import pytest

import probes
from analyses import ablate
from analyses.cli import main
from tests.probes.causal.planted_models import PlantedInductionModel


@pytest.fixture
def planted(monkeypatch):
    monkeypatch.setattr(ablate, "load_any_model", lambda spec, **kwargs: PlantedInductionModel())


def test_top_induction_head_is_chosen_and_its_ablation_is_measured(planted, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["ablate", "--model", "planted", "--top", "induction:1", "--method", "mean", "--seq-len", "8",
                 "--batches", "3", "--batch-size", "4", "--draws", "40", "--no-control", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "null q99" in printed and "1.0" in printed
    document = json.loads((out / "ablation.json").read_text())
    assert document["model"]["chosen"]["heads"] == [[1, 0]] and document["model"]["chosen"]["scores"] == [1.0]
    result = probes.ProbeResult.from_document(document["model"]["result"], None)
    assert result.heads == [(1, 0)] and result.change[0] > 3.0
    # the null draws one head of layer 1: the planted head ties (about 1 in 4), the three uniform heads do nothing
    assert float(result.null_q99[0]) == pytest.approx(float(result.change[0]), rel=1e-6)
    assert sorted({round(float(v), 3) for v in result.null[:, 0]})[0] > -0.01


def test_named_heads_are_ablated_on_the_odd_batches(planted, tmp_path, capsys):
    assert main(["ablate", "--model", "planted", "--heads", "1.1", "--method", "zero", "--seq-len", "8",
                 "--batches", "2", "--batch-size", "4", "--draws", "0", "--no-control", "--out", str(tmp_path)]) == 0
    document = json.loads((tmp_path / "ablation.json").read_text())
    assert document["model"]["chosen"] == {"heads": [[1, 1]]}
    assert abs(document["model"]["result"]["result"]["change"]["values"][0]) < 0.01


@pytest.mark.parametrize("flags, words", [
    (["--heads", "17-3"], "LAYER.HEAD pairs"),
    (["--heads", "5.0"], "layers 0..1"),
    (["--top", "induction:0"], "KIND:K"),
    (["--top", "nonsense:2"], "nonsense"),
    (["--heads", "1.0", "--method", "resample", "--batch-size", "1"], "--batch-size (batch_size) must be"),
    (["--heads", "1.0,1.1,1.2,1.3", "--draws", "20"], "p = 1 by construction"),
    (["--top", "offset:-1:1"], "after its query"),
])
def test_bad_input_exits_2_with_one_line(planted, tmp_path, capsys, flags, words):
    assert main(["ablate", "--model", "planted", *flags, "--seq-len", "8", "--no-control",
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and words in err, err


def test_unknown_method_is_a_usage_error(capsys, tmp_path):
    assert main(["ablate", "--model", "planted", "--heads", "1.0", "--method", "knockout", "--out", str(tmp_path)]) == 2
    assert "zero" in capsys.readouterr().err
