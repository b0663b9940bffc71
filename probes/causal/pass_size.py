"""How many copies of a batch one grouped ablation pass carries: as many as fit a byte budget of activations, so the
peak memory of a head-ablation null is set by the budget, never by the number of draws.

:func:`copy_bytes` estimates what one copy of a batch holds at the peak of a forward pass along a route (counted
from the model's config and parameter dtype, generously: see its docstring); :class:`PassSize` divides the budget
by it, caps the rows at ``max_rows`` (and, on CPU, the tokens at :data:`CPU_PASS_TOKENS`), and halves the count
after an out-of-memory error, keeping the smaller count for the batches that follow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mechprobe.validation import integers, is_integer
from probes.causal.routes import ForwardRoute
from probes.core.model_kind import HookedModel
from probes.core.out_of_memory import Halving

PASS_BYTES = 256 * 2**20
"""Default budget of activations one grouped pass may hold (beyond the weights and the clean pass's keepsakes)."""

CPU_PASS_TOKENS = 2048
"""On CPU, copies of the batch per forward pass are limited to this many tokens (at least one copy): there the cost
of a pass grows with its rows, so bigger groups only add memory (SmolLM2, 64 sets of 4 x 41 tokens: passes of 48,
64, 96 or 256 rows take the same time; the peak RSS grows from +220 to +550 MiB over a bare forward, mostly freed
activations the allocator keeps)."""


def _element_bytes(model: HookedModel) -> int:
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return torch.finfo(dtype).bits // 8


def _width(cfg: object, name: str) -> int:
    value = getattr(cfg, name, None)
    return value if is_integer(value) and value > 0 else 0


def copy_bytes(model: HookedModel, route: ForwardRoute, n_rows: int, n_pos: int) -> int:
    """Bytes one copy of an ``n_rows x n_pos`` batch holds at the peak of a forward pass along ``route``.

    Per token, in the parameters' dtype: the residual stream and its normalised copy, the attention's input and
    output, the ablated head outputs and the clean residual put back (8 ``d_model``), queries, keys, values and
    head outputs (4 ``n_heads d_head``) and the MLP's hidden activations (3 ``d_mlp``: gate, up, product). Where
    the attention is eager (``route.fused`` False), each query row's scores and float32 pattern over ``n_pos`` keys
    per head; on the full-logits route, every position's logits. Inference frees one block's activations before
    the next, so one block is counted, not ``n_layers``. A width the config does not give (a hand-built
    ``HookedRootModule``) counts as 0, leaving ``max_rows`` to bound the pass."""
    cfg = model.cfg
    n_heads = _width(cfg, "n_heads")
    d_model = _width(cfg, "d_model")
    d_heads = n_heads * (_width(cfg, "d_head") or d_model // max(1, n_heads))
    size = _element_bytes(model)
    per_token = size * (8 * d_model + 4 * d_heads + 3 * _width(cfg, "d_mlp"))
    if not route.fused:
        per_token += n_heads * n_pos * (size + 4)
    if not route.unembed:
        per_token += size * _width(cfg, "d_vocab")
    return n_rows * n_pos * per_token


@dataclass
class PassSize:
    """Copies of a batch per grouped forward pass: ``pass_bytes / copy_bytes`` (at least one), at most ``max_rows``
    rows, at most :data:`CPU_PASS_TOKENS` tokens on CPU; after an out-of-memory error, half of what failed, kept
    for the following batches (``halving``, which runs the passes: :class:`probes.core.out_of_memory.Halving`)."""

    max_rows: int = 256
    pass_bytes: int = PASS_BYTES
    halving: Halving = field(default_factory=lambda: Halving("head sets"), repr=False)

    def __post_init__(self) -> None:
        integers(self, ("max_rows", "pass_bytes"))

    def copies(self, model: HookedModel, route: ForwardRoute, n_rows: int, n_pos: int, device: torch.device
               ) -> int:
        """Copies of an ``n_rows x n_pos`` batch one pass on ``device`` carries."""
        copies = min(max(1, self.max_rows // n_rows),
                     max(1, self.pass_bytes // max(1, copy_bytes(model, route, n_rows, n_pos))))
        if device.type == "cpu":
            copies = min(copies, max(1, CPU_PASS_TOKENS // (n_rows * n_pos)))
        return copies
