"""A sharded run: each process probes its share of the batches, the states are summed over processes,
and every rank holds the result of one process probing everything.

    .venv/bin/torchrun --standalone --nproc_per_node=2 examples/sharded_heads.py runs/sharded-heads.json

(gloo on CPU; with one GPU per process torchrun sets LOCAL_RANK and NCCL is used.)
"""

from __future__ import annotations

import sys

import torch

import probes
from probes.core import distributed


def batches(model, n_batches: int = 6) -> list:
    """The same batches on every rank (seeded), each rank keeping its share."""
    generator = torch.Generator().manual_seed(0)
    info = probes.ModelInfo.of(model)
    return [probes.repeated_random_tokens(info, seq_len=20, n_sequences=4, generator=generator)
            for _ in range(n_batches)]


def main(out: str) -> None:
    rank, world_size = distributed.init()
    model = probes.load_model("minilm-l6")
    (scores,) = distributed.run_probes_sharded(model, [probes.HeadScoreProbe()], batches(model))
    if rank == 0:
        scores.save(out)
        layer, head, score = scores.top_heads("previous_token", 1)[0]
        print(f"{world_size} processes: {scores.provenance.n_sequences} sequences; best previous-token head "
              f"L{layer}H{head} {score:.3f}; saved {out}")
    distributed.close()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "runs/sharded-heads.json")
