"""The typed result of a head ablation: the loss change per slice, its bootstrap interval over batches, and the
random-head null ("any k heads in the same layers?") with its 99th percentile and p-value."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from mechprobe.forward import model_device
from probes.causal.head_sets import mask_heads
from probes.causal.means import HeadMeans
from probes.causal.measured import MeasuredAblation, measured_ablation
from probes.causal.pass_size import PASS_BYTES
from probes.causal.slices import SliceFn
from probes.core.errors import ConfigError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.result import ProbeResult, Provenance

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HeadAblation(ProbeResult):
    """Loss change (nats per token, ablated minus clean) on each slice when ``heads`` are ablated by ``method``.

    ``change[s]`` is averaged over the tokens of slice ``slices[s]`` in every batch; ``low``/``high`` its
    percentile bootstrap interval over batches (NaN with one batch); ``clean_loss[s]`` the unablated mean loss;
    ``null[d, s]`` the same change for random head set ``d`` (``null_heads[d]``, as many heads per layer as
    ``heads``), ``null_q99`` its 99th percentile and ``p_value`` the sequential Monte Carlo p-value
    (:mod:`probes.stats.sequential`: ``(1 + hits) / (1 + draws)`` where every draw was measured; NaN without
    draws); ``null_stop`` how many draws were measured and why. ``n_tokens[s]``: tokens counted on slice ``s``.
    """

    heads: list[Any]
    method: str
    slices: list[Any]
    change: Tensor
    low: Tensor
    high: Tensor
    clean_loss: Tensor
    n_tokens: Tensor
    null: Tensor
    null_q99: Tensor
    p_value: Tensor
    null_heads: Tensor
    null_stop: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "heads", [tuple(int(v) for v in pair) for pair in self.heads])
        object.__setattr__(self, "slices", list(self.slices))

    def beats_null(self, slice_name: str, alpha: float = 0.01) -> bool:
        """Whether the change on ``slice_name`` exceeds the null's 99th percentile and its p-value is below
        ``alpha``."""
        if slice_name not in self.slices:
            raise ConfigError(f"No slice {slice_name!r}; this result has {self.slices}.")
        s = self.slices.index(slice_name)
        return bool(self.change[s] > self.null_q99[s]) and bool(self.p_value[s] < alpha)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per slice: change, interval, clean loss, tokens, null 99th percentile, p-value."""
        import pandas as pd

        heads = " ".join(f"{layer}.{h}" for layer, h in self.heads)
        return pd.DataFrame([{"slice": name, "method": self.method, "heads": heads,
                              "change": float(self.change[s]), "low": float(self.low[s]), "high": float(self.high[s]),
                              "clean_loss": float(self.clean_loss[s]), "n_tokens": int(self.n_tokens[s]),
                              "null_q99": float(self.null_q99[s]), "p_value": float(self.p_value[s]),
                              "n_draws": int(self.null.shape[0])} for s, name in enumerate(self.slices)])

    @classmethod
    def from_measured(cls, measured: MeasuredAblation, provenance: Provenance) -> HeadAblation:
        """The result of a :class:`~probes.causal.measured.MeasuredAblation` of :func:`slice_changes` (the change
        on each slice)."""
        plan, draws = measured.plan, measured.null_draws
        return cls(
            provenance=provenance, heads=list(plan.heads), method=plan.method, slices=list(measured.sums.slices),
            change=measured.value, low=measured.low, high=measured.high, clean_loss=measured.clean_loss,
            n_tokens=measured.n_tokens, null=draws, null_q99=measured.null_q99, p_value=measured.p_value,
            null_heads=torch.stack([mask_heads(m, plan.layers) for m in plan.sets[1 : 1 + draws.shape[0]]])
            if draws.shape[0] > 0 else torch.zeros(0, len(plan.heads), 2, dtype=torch.long),
            null_stop="" if measured.null is None else measured.null.why(),
        )


def head_ablation(model: HookedModel, heads: Iterable[tuple[int, int]], batches: Iterable[Any], *,
                  slices: Mapping[str, SliceFn], method: str = "mean", n_draws: int = 0, seed: int = 0,
                  means: HeadMeans | None = None, n_boot: int = 1000, level: float = 0.95, max_rows: int = 256,
                  pass_bytes: int = PASS_BYTES, data: str = "unspecified", loss: str | None = None,
                  shortcuts: bool = True, stop_at: float | None = 0.01) -> HeadAblation:
    """Ablate ``heads`` of ``model`` on ``batches`` and measure the per-token loss change on each slice, beside
    ``n_draws`` random head sets with the same number of heads in each layer (the null; ``seed`` draws them,
    fixes the resample derangement and the bootstrap). ``method="mean"`` computes the heads' means on ``batches``
    (as the model reads them: masked, for the masked loss) in a first pass unless ``means`` is given. ``max_rows``
    bounds the rows of one forward pass (batch rows x head sets ablated together), ``pass_bytes`` its activations
    (:class:`probes.causal.pass_size.PassSize`). ``loss``: ``"next"``
    (next-token) or ``"masked"`` (the slice positions replaced by the mask token and predicted in place); by default
    the model's direction decides (encoders: masked; a warning names an encoder no better than uniform on them).
    ``shortcuts``: see :func:`probes.causal.ablation.ablation_sums`. ``stop_at``: the level at which the null's
    draws stop once every slice's decision is known (:func:`probes.causal.null.ablation_with_null`; None: all
    ``n_draws`` and the fixed-count p-value).

    Example::

        batches = [probes.repeated_random_tokens(info, seq_len=50, n_sequences=8, generator=g) for _ in range(4)]
        result = head_ablation(model, [(1, 0)], batches, slices={"repeated_half": repeated_half(50)}, n_draws=200)
        result.change, result.null_q99, result.p_value
    """
    info = ModelInfo.of(model)
    measured = measured_ablation(model, heads, batches, slices=slices, method=method, n_draws=n_draws, seed=seed,
                                 means=means, n_boot=n_boot, level=level, max_rows=max_rows, pass_bytes=pass_bytes,
                                 loss=loss, shortcuts=shortcuts, stop_at=stop_at)
    sums, plan = measured.sums, measured.plan
    clean = float(sums.clean.sum() / sums.count.sum())
    if plan.loss == "masked" and clean >= math.log(info.d_vocab):
        log.warning("%s predicts masked tokens no better than uniform (clean loss %.2f nats >= log d_vocab = %.2f): "
                    "its masked-LM head may be untrained (sentence-transformers checkpoints such as all-MiniLM-L6-v2 "
                    "ship none), so the loss changes say little about its heads.", info.name, clean,
                    math.log(info.d_vocab))
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    provenance = Provenance(
        model=info.name, data=data, probe="HeadAblation",
        settings={"method": method, "n_draws": n_draws, "n_boot": n_boot, "level": level, "slices": list(slices),
                  "loss": plan.loss, "hook": "blocks.{layer}.attn.hook_z",
                  "null": "random head sets, same count per layer", "stop_at": stop_at},
        seed=seed, n_sequences=int(sums.rows.sum()), n_tokens=int(sums.count.sum()), device=str(model_device(model)),
        dtype=str(dtype))
    return HeadAblation.from_measured(measured, provenance)
