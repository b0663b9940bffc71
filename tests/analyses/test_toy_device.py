"""``mechprobe toy ... --device``: the flag sets the config's ``device``; ``--device cpu`` is the default run.

The data is always drawn on the CPU from the seed, so ``--device cpu`` must give a summary.json byte for byte
equal to the run without the flag. On a machine with CUDA the same tiny runs also go through the GPU and must
agree with the CPU numbers up to float32 rounding (skipped elsewhere; bad devices: test_cli_bad_input.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from analyses.cli import main

TINY = {
    "topic": ["lda.n_topics=3", "lda.words_per_topic=4", "lda.min_len=12", "lda.max_len=16", "data.n_documents=128",
              *(f"{stage}.batch_size=16" for stage in ("joint", "uniform", "fixed_value", "two_stage", "standard")),
              "model.d_model=8", "joint.n_steps=10", "joint.lr=0.01", "uniform.n_steps=5", "fixed_value.n_steps=5",
              "two_stage.n_steps=20", "two_stage.lr=1.0", "record_every=5", "eval_documents=16"],
    "scansnap": ["train.n_steps=20", "eval_sequences=16", "standard.n_steps=5", "standard.d_model=8"],
    "induction": ["n_train=32", "n_val=16", "train.stage_steps=2,2,2", "data.seq_len=20", "probe_sequences=8",
                  "eval_seq_lens=(10,)", "eval_alphas=(1.0,)", "early_step=3"],
}
# Numbers that must agree across devices (losses, attention statistics), per toy.
COMPARED = {
    "topic": ["attention_ratio", "same_topic_attention", "embedding_same_topic_cosine", "wv_block_score"],
    "scansnap": ["initial_loss", "final_loss", "distinct_mass", "entropy_expected"],
    "induction": ["val_loss", "true_parent_share", "generalized_induction_score"],
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def run_toy(name: str, out: Path, *extra: str) -> dict:
    argv = ["toy", name, "--preset", "fast", "--no-progress", "--out", str(out), *extra]
    assert main([*argv, *(arg for setting in TINY[name] for arg in ("--set", setting))]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("name, flags", [
    ("induction", ["--device", "cpu"]),
    pytest.param("scansnap", ["--device", "cpu"], marks=pytest.mark.slow),
    pytest.param("topic", ["--set", "device=cpu"], marks=pytest.mark.slow),
])
def test_device_cpu_equals_the_default_run(tmp_path, capsys, name, flags):
    default = run_toy(name, tmp_path / "default")
    summary = run_toy(name, tmp_path / "cpu", *flags)
    assert (tmp_path / "cpu" / "summary.json").read_bytes() == (tmp_path / "default" / "summary.json").read_bytes()
    assert summary["settings"]["device"] == default["settings"]["device"] == "cpu"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["topic", "scansnap", "induction"])
def test_cuda_run_agrees_with_the_cpu_run(tmp_path, capsys, name):
    on_cpu = run_toy(name, tmp_path / "cpu")
    on_gpu = run_toy(name, tmp_path / "cuda", "--device", "cuda")
    assert on_gpu["settings"]["device"] == "cuda"
    for key in COMPARED[name]:
        assert on_gpu[key] == pytest.approx(on_cpu[key], rel=1e-2, abs=1e-3), key
