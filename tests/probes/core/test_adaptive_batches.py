"""A batch that does not fit in memory is probed in smaller row chunks, with the same result."""

from __future__ import annotations

import pytest
import torch

from probes import HeadScoreProbe, KeyTokenAttentionProbe, ModelError, run_probes
from probes.core.out_of_memory import is_out_of_memory
from probes.core.result import results_close
from tests.hooked_models import OracleModel


class SmallMemoryOracle(OracleModel):
    """OracleModel that runs out of memory on batches of more than ``max_rows`` sequences."""

    def __init__(self, max_rows: int, error: type[Exception] = torch.OutOfMemoryError) -> None:
        super().__init__()
        self.max_rows, self.error, self.batch_rows = max_rows, error, []

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self.batch_rows.append(tokens.shape[0])
        if tokens.shape[0] > self.max_rows:
            raise self.error("CUDA out of memory. Tried to allocate 2.00 GiB")
        return super().forward(tokens)


def _batches(seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 12, (8, 10), generator=generator) for _ in range(3)]


def _probes():
    return [HeadScoreProbe(), KeyTokenAttentionProbe(list(range(12)), list(range(12)))]


def test_out_of_memory_halves_the_rows_and_gives_the_same_result():
    whole = run_probes(OracleModel(), _probes(), _batches(), progress=False)
    model = SmallMemoryOracle(max_rows=3)
    chunked = run_probes(model, _probes(), _batches(), progress=False)
    assert all(results_close(a, b) for a, b in zip(whole, chunked))
    # 8 rows fail, 4 fail, then chunks of 2 for this batch and the next ones (4 + 4 chunks)
    assert model.batch_rows[:3] == [8, 4, 2] and set(model.batch_rows[3:]) == {2}
    assert len(model.batch_rows) == 2 + 3 * 4


def test_cpu_allocator_messages_count_as_out_of_memory():
    assert is_out_of_memory(RuntimeError("DefaultCPUAllocator: not enough memory: you tried to allocate 8 GB"))
    assert is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert not is_out_of_memory(RuntimeError("shape mismatch"))
    model = SmallMemoryOracle(max_rows=5, error=RuntimeError)
    run_probes(model, [HeadScoreProbe()], _batches(), progress=False)
    assert model.batch_rows[:2] == [8, 4]


def test_a_single_sequence_that_does_not_fit_is_a_clear_error():
    with pytest.raises(ModelError, match="single sequence of 10 tokens"):
        run_probes(SmallMemoryOracle(max_rows=0), [HeadScoreProbe()], _batches(), progress=False)


def test_other_errors_are_not_retried():
    class Broken(OracleModel):
        calls_seen = 0

        def forward(self, tokens):
            Broken.calls_seen += 1
            raise ValueError("not a memory problem")

    with pytest.raises(ValueError, match="not a memory problem"):
        run_probes(Broken(), [HeadScoreProbe()], _batches(), progress=False)
    assert Broken.calls_seen == 1
