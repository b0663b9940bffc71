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


def test_plan_of_a_small_folder_runs_the_null_route(tmp_path, capsys):
    """``plan --model FOLDER --routes null`` of a 2-layer, 4-head model once measured the bare, bridge and suite
    routes and then failed with 'The heads ... are every head of layer(s) 1 ... measure without a null (0 draws)':
    a setting plan does not have."""
    config = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 512, "rope_theta": 10000.0, "tie_word_embeddings": True, "bos_token_id": 1,
              "eos_token_id": 2}
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert main(["plan", "--model", str(tmp_path), "--tokens", "16", "--routes", "null", "--gpu", "h100"]) == 0
    assert "fits null" in capsys.readouterr().out
