"""Two CPU processes under torchrun give the single-process result."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import probes
from tests.probes.distributed_worker import as_json, setup

ROOT = Path(__file__).resolve().parents[3]


def test_merged_halves_equal_single_process():
    model, batches, probe_list = setup()
    whole = as_json(probes.run_probes(model, probe_list, batches, progress=False))
    _, _, first = setup()
    _, _, second = setup()
    probes.feed_probes(model, first, batches[0::2], progress=False)
    probes.feed_probes(model, second, batches[1::2], progress=False)
    merged = as_json([a.merge(b).compute() for a, b in zip(first, second)])
    assert merged["rows"] == whole["rows"] and merged["topic_pairs"] == whole["topic_pairs"]
    torch.testing.assert_close(torch.tensor(merged["topic_ratio"]), torch.tensor(whole["topic_ratio"]))


@pytest.mark.slow
def test_torchrun_two_processes_match_single_process(tmp_path):
    out = tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(ROOT / "tests" / "probes" / "distributed_worker.py"), str(out)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    sharded = json.loads(out.read_text())
    model, batches, probe_list = setup()
    single = as_json(probes.run_probes(model, probe_list, batches, progress=False))
    assert sharded["world"] == 2
    assert sharded["rows"] == single["rows"] and sharded["topic_pairs"] == single["topic_pairs"]
    for kind in single["heads"]:
        torch.testing.assert_close(torch.tensor(sharded["heads"][kind]), torch.tensor(single["heads"][kind]),
                                   rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(torch.tensor(sharded["topic_ratio"]), torch.tensor(single["topic_ratio"]),
                               rtol=1e-6, atol=1e-7)
