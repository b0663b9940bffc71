"""``mechprobe toy ... --device``: the flag sets the config's ``device``; ``--device cpu`` is the default run.

Each toy's tiny fast run goes through every device (``tests.devices.DEVICES``: the CPU always, CUDA where there
is one) with the same argv, and is compared with the run without the flag. The data is always drawn on the CPU
from the seed, so on the CPU the summary.json must be byte for byte the default run's; on CUDA its numbers must
agree with the CPU's up to float32 rounding (bad devices: test_cli_bad_input.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analyses.cli import main
from tests.devices import DEVICES

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


def device_flags(name: str, device: str) -> list[str]:
    """How a run of ``name`` is put on ``device``: the flag, or (topic) the setting it stands for."""
    return ["--set", f"device={device}"] if name == "topic" else ["--device", device]


@pytest.mark.parametrize("name", ["induction", pytest.param("scansnap", marks=pytest.mark.slow),
                                  pytest.param("topic", marks=pytest.mark.slow)])
@pytest.mark.parametrize("device", DEVICES)
def test_a_run_on_each_device_agrees_with_the_default_run(tmp_path, capsys, device, name):
    default = run_toy(name, tmp_path / "default")
    summary = run_toy(name, tmp_path / device, *device_flags(name, device))
    assert (summary["settings"]["device"], default["settings"]["device"]) == (device, "cpu")
    if device == "cpu":
        assert (tmp_path / "cpu" / "summary.json").read_bytes() == (tmp_path / "default" / "summary.json").read_bytes()
        return
    for key in COMPARED[name]:
        assert summary[key] == pytest.approx(default[key], rel=1e-2, abs=1e-3), key
