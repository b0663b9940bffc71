"""Run by torchrun in tests/probes/core/test_distributed.py: sharded probes on a seeded toy model."""

from __future__ import annotations

import json
import sys

import torch

import probes
from probes.attention.topic_attention import TopicAttentionProbe
from probes.core import distributed
from toymodels.standard import StandardModelConfig, build_standard_model


def setup():
    model = build_standard_model(StandardModelConfig(n_layers=2, n_heads=4, d_vocab=30, n_ctx=32, seed=3)).eval()
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 30, (3, 16), generator=generator) for _ in range(5)]
    labels = torch.where(torch.arange(30) < 4, -1, torch.arange(30) % 4)  # ids 0-3 carry no topic
    return model, batches, [probes.HeadScoreProbe(), TopicAttentionProbe(labels)]


def as_json(results) -> dict:
    heads, topic = results
    return {"heads": {k: v.tolist() for k, v in heads.scores.items()}, "rows": heads.rows,
            "topic_ratio": topic.ratio.tolist(), "topic_pairs": topic.pairs}


if __name__ == "__main__":
    torch.set_num_threads(1)
    rank, world = distributed.init("gloo")
    model, batches, probe_list = setup()
    results = distributed.run_probes_sharded(model, probe_list, batches)
    if rank == 0:
        with open(sys.argv[1], "w") as handle:
            json.dump({"world": world, **as_json(results)}, handle)
    distributed.close()
