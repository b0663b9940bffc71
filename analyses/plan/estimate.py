"""Will a route fit on a GPU, and how long will it take: a roofline plus a per-call cost, calibrated on an H200.

Time: every kernel of the pass (:attr:`analyses.plan.meter.Meter.kernels`) takes the longer of its FLOPs at the
GPU's peak dense bf16 rate and its bytes at the GPU's memory bandwidth, each derated by an efficiency factor
(a kernel reaches a fraction of the peak), and every device operator call adds a fixed cost (Python, the
dispatcher and the launch: on a GPU a small operator costs that, not its arithmetic)::

    seconds = sum_kernels max(flops / (rate * flop_efficiency), bytes / (bandwidth * byte_efficiency))
              + device_calls * seconds_per_call

The three constants are fitted (least squares on log time) to the H200 rows measured in issue 44
(:data:`H200_ROWS`; ``python -m analyses.plan.calibrate`` refits them); the same constants serve the H100, whose
FLOP rate is the H200's and whose bandwidth is lower. Memory: the weights plus the pass's peak live bytes must fit
in what a process can allocate on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyses.plan.routes import RouteLedger


@dataclass(frozen=True)
class Gpu:
    """A GPU's published peak dense bf16 rate (FLOP/s), HBM bandwidth (bytes/s), and the memory a process can
    allocate on it (bytes: the card's memory less the CUDA context and reserved memory)."""

    name: str
    flops_per_s: float
    bytes_per_s: float
    memory_bytes: int
    label: str


GPUS = {
    "h100": Gpu("h100", 989e12, 3.35e12, 78 * 2**30, "NVIDIA H100 SXM, 80 GB HBM3"),
    "h200": Gpu("h200", 989e12, 4.8e12, 139 * 2**30, "NVIDIA H200, 141 GB HBM3e"),
}
"""Published peak dense bf16 FLOP rate and bandwidth (NVIDIA's H100 and H200 data sheets); allocatable memory as
torch sees it on those cards (about 78 and 139 GiB)."""


@dataclass(frozen=True)
class Calibration:
    """The fitted constants of the time model (see the module docstring)."""

    flop_efficiency: float
    byte_efficiency: float
    seconds_per_call: float


CALIBRATION = Calibration(flop_efficiency=0.50, byte_efficiency=0.65, seconds_per_call=13e-6)
"""Fitted by ``python -m analyses.plan.calibrate`` to :data:`H200_ROWS` (see benchmarks/RESULTS.md)."""


@dataclass(frozen=True)
class MeasuredRow:
    """A time and memory measured on a GPU, with what was run and where the number comes from."""

    shape: str
    route: str
    n_pos: int
    seconds: float | None  # None: did not finish (out of memory)
    memory_mib: float | None  # memory the route added (max_memory_allocated growth)
    source: str
    seconds_range: tuple[float, float] | None = None


ISSUE_44 = ("issue 44 (H200, torch 2.11 + cu130, transformers 5.17, TransformerLens 4.3, project at b81b399, bf16, "
            "one sequence, benchmarks/gpu_long_context.py)")
H200_ROWS = (
    MeasuredRow("smollm2-135m", "bare", 2048, 0.022, 105, ISSUE_44),
    MeasuredRow("smollm2-135m", "suite", 2048, 0.142, 113, ISSUE_44),
    MeasuredRow("smollm2-135m", "bare", 8192, 0.028, 323, ISSUE_44, (0.027, 0.029)),
    MeasuredRow("smollm2-135m", "suite", 8192, (0.151 * 0.254) ** 0.5, 351, ISSUE_44, (0.151, 0.254)),
    MeasuredRow("smollm2-135m", "bare", 32768, 0.127, 1193, ISSUE_44),
    MeasuredRow("smollm2-135m", "suite", 32768, 0.612, 1303, ISSUE_44),
    MeasuredRow("llama-3.2-1b", "bare", 32768, 0.304, 3112, ISSUE_44),
    MeasuredRow("llama-3.2-1b", "suite", 32768, None, None, ISSUE_44 + ": out of memory on the 139 GB GPU"),
    MeasuredRow("smollm2-135m", "bridge", 32768, 3.0, 95e9 / 2**20,
                "issue 44, gpu_check's long-context part: 'the bridge alone at 32k takes 95 GB and 3 s' (the shape is "
                "not named; the ledger puts the 1B shape's bridge at 323 GiB, more than the card, SmolLM2's at 105)"),
)
"""The GPU rows of issue 44 (suite at 8k: two runs, fitted on their geometric mean)."""


@dataclass(frozen=True)
class Estimate:
    """A route on a GPU: the time, its parts, and whether weights plus the peak fit in memory."""

    gpu: Gpu
    seconds: float
    kernel_seconds: float
    call_seconds: float
    needed_bytes: int

    @property
    def fits(self) -> bool:
        return self.needed_bytes <= self.gpu.memory_bytes


def estimate(ledger: RouteLedger, gpu: Gpu, calibration: Calibration = CALIBRATION) -> Estimate:
    """The time and memory of ``ledger``'s pass on ``gpu``."""
    rate = gpu.flops_per_s * calibration.flop_efficiency
    bandwidth = gpu.bytes_per_s * calibration.byte_efficiency
    kernels = sum(count * max(flops / rate, moved / bandwidth) for (flops, moved), count in ledger.kernels.items())
    calls = ledger.device_calls * calibration.seconds_per_call
    return Estimate(gpu, kernels + calls, kernels, calls, ledger.weight_bytes + ledger.peak_bytes)
