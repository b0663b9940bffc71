"""Exact sharded probe runs with ``torch.distributed``: each rank probes its shard, states are summed.

Probe state is additive, so summing every rank's state gives exactly the state of one process
that saw all the data (up to float64 summation order). Launch with ``torchrun``::

    torchrun --nproc_per_node=2 my_probe_script.py             # CPU: gloo; GPUs: one per rank, NCCL
    torchrun --nnodes=2 --nproc_per_node=8 --rdzv_endpoint=HOST:PORT my_probe_script.py

and inside the script::

    probes.core.distributed.init()                                   # reads torchrun's environment
    results = probes.core.distributed.run_probes_sharded(model, [HeadScoreProbe()], all_batches)
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from probes.core.batch import TokenBatch
from probes.core.errors import ProbeStateError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.probe import Probe, ResultT
from probes.core.runner import feed_probes

T = TypeVar("T")


def init(backend: str | None = None) -> tuple[int, int]:
    """Initialise the default process group from torchrun's environment; return ``(rank, world_size)``.

    ``backend=None`` picks NCCL when CUDA is available, gloo otherwise. Already initialised: no-op.
    """
    if not dist.is_initialized():
        if "RANK" not in os.environ:
            return 0, 1
        backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
        dist.init_process_group(backend)
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    return dist.get_rank(), dist.get_world_size()


def close() -> None:
    """Wait for every rank, then tear the process group down (a no-op when none was started).

    Call it at the end of a torchrun script: a process that exits with the group still up can abort
    in the backend's teardown ("terminate called without an active exception")."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def shard(items: Iterable[T], rank: int, world_size: int) -> Iterator[T]:
    """Every ``world_size``-th item starting at ``rank`` (for a ``datasets`` dataset prefer
    ``datasets.distributed.split_dataset_by_node``)."""
    return itertools.islice(items, rank, None, world_size)


def all_reduce_probes(probes: Sequence[Probe[Any]], *, device: torch.device | str = "cpu") -> None:
    """Sum every probe's state over all ranks, in place (ranks that saw no data contribute zeros)."""
    if not dist.is_initialized():
        return
    shapes = [{key: tuple(value.shape) for key, value in probe.state_dict().items()} for probe in probes]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, shapes)
    for index, probe in enumerate(probes):
        union: dict[str, tuple[int, ...]] = {}
        for rank_shapes in gathered:
            for key, shape in rank_shapes[index].items():
                if union.setdefault(key, shape) != shape:
                    raise ProbeStateError(f"Ranks disagree on the shape of {type(probe).__name__} state {key!r}.")
        state = probe.state_dict()
        summed = {}
        for key in sorted(union):
            tensor = state.get(key, torch.zeros(union[key], dtype=torch.float64)).to(device)
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
            summed[key] = tensor.cpu()
        probe.load_state_dict(summed)


def run_probes_sharded(model: HookedModel, probes: Sequence[Probe[ResultT]],
                       batches: Iterable[torch.Tensor | TokenBatch], *, data: str = "unspecified",
                       seed: int | None = None, progress: bool = False) -> list[ResultT]:
    """Probe this rank's shard of ``batches``, sum the states over ranks, return the results (on every rank)."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    own = list(shard(batches, rank, world_size))
    if own:
        feed_probes(model, probes, own, data=data, seed=seed, progress=progress and rank == 0)
    else:
        for probe in probes:
            probe.bind(ModelInfo.of(model), data=data, seed=seed)
    device = "cuda" if dist.is_initialized() and dist.get_backend() == "nccl" else "cpu"
    all_reduce_probes(probes, device=device)
    return [probe.compute() for probe in probes]
