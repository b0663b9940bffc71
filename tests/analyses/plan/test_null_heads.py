"""The ``null`` route of ``mechprobe plan`` measures heads whose random head sets (matched layer by layer) are not
the measured heads again, on any shape: a small model's upper half may hold fewer heads than ``NULL_HEADS``."""

from __future__ import annotations

import json
import signal

import pytest

from analyses.cli import main
from analyses.plan.routes import NULL_HEADS, null_heads

SHAPES = [(30, 9), (16, 32), (2, 4), (2, 2), (3, 3), (1, 2), (4, 2), (6, 2)]  # (4, 2) and (6, 2) once never returned


def _stuck(signum, frame):
    raise TimeoutError("null_heads did not return")


@pytest.mark.parametrize(("n_layers", "n_heads"), SHAPES)
def test_the_null_heads_leave_a_head_of_each_layer_out(n_layers, n_heads):
    before = signal.signal(signal.SIGALRM, _stuck)
    signal.setitimer(signal.ITIMER_REAL, 2)
    try:
        heads = null_heads(n_layers, n_heads)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, before)
    upper = n_layers - n_layers // 2
    assert len(heads) == len(set(heads)) == min(NULL_HEADS, upper * (n_heads - 1))
    assert all(n_layers // 2 <= layer < n_layers and 0 <= head < n_heads for layer, head in heads)
    assert all(sum(layer == mine for mine, _ in heads) < n_heads for layer, _ in heads), heads


def _small_folder(folder, n_layers: int = 2, n_heads: int = 4) -> str:
    """A folder holding only a config.json of a small llama (what ``plan --model`` reads)."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": n_layers, "num_attention_heads": n_heads,
              "num_key_value_heads": 2 if n_heads % 2 == 0 else 1, "vocab_size": 512, "rope_theta": 10000.0,
              "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


def test_plan_of_a_small_folder_runs_the_null_route(tmp_path, capsys):
    """``plan --model FOLDER --routes null`` of a 2-layer, 4-head model once measured the bare, bridge and suite
    routes and then failed with 'The heads ... are every head of layer(s) 1 ... measure without a null (0 draws)':
    a setting plan does not have."""
    assert main(["plan", "--model", _small_folder(tmp_path), "--tokens", "16", "--routes", "null", "--gpu",
                 "h100"]) == 0
    assert "fits null" in capsys.readouterr().out


@pytest.mark.parametrize(("n_layers", "n_heads", "route"), [(2, 1, "null"), (2, 1, "edge"), (1, 2, "edge"),
                                                            (4, 1, "edge")])
def test_a_route_the_shape_has_no_null_for_is_refused_when_named(tmp_path, capsys, n_layers, n_heads, route):
    """One head per layer leaves no random head set but the ablated heads (the null route), one layer or too few
    no edge but the measured one (the edge route): named in --routes, refused before any route runs, one line
    naming the route and the shape (it failed after the other routes' rows with 'The head list is empty: name at
    least one (layer, head) to ablate', or 'use n_draws=0', settings plan does not have); nothing written."""
    json_path = tmp_path / "plan.json"
    folder = _small_folder(tmp_path, n_layers, n_heads)
    code = main(["plan", "--model", folder, "--tokens", "16", "--routes", f"bare,{route}", "--json", str(json_path)])
    out, err = capsys.readouterr()
    assert code == 2 and not json_path.exists() and "bare" not in out, out
    assert err.count("\n") == 1 and err.startswith(f"mechprobe: error: --routes {route}: "), err
    assert f"{n_layers} layer(s) of {n_heads} head(s)" in err and f"leave {route} out of --routes" in err, err


def test_the_default_routes_leave_out_the_null_of_a_one_head_model_and_say_so(tmp_path, capsys):
    json_path = tmp_path / "plan.json"
    code = main(["plan", "--model", _small_folder(tmp_path, 2, 1), "--tokens", "16", "--json", str(json_path)])
    out = capsys.readouterr().out
    assert code == 0 and "null: left out (2 layer(s) of 1 head(s): " in out, out
    assert [r["route"] for r in json.loads(json_path.read_text())["routes"]] == ["bare", "bridge", "suite"]
