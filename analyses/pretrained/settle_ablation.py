"""The head ablations' units in the settling rounds (:mod:`analyses.pretrained.settle`): fresh sequences, the
first pass's heads.

A causal finding's unit is one sequence (:mod:`analyses.pretrained.causal`): a ``[BOS] X X`` row for the two copying
ablations, a row of text for the topic one. A round measures **the heads the first pass chose, alone**, on sequences
no pass has used: ``[BOS] X X`` rows drawn on past the first pass's from its own generator, and rows of the fresh
text batches after the first pass's (the same batches the text findings' rounds read, through :class:`SharedText`,
so the corpus is read once and neither starves the other), of which each batch's richest in topic-seen tokens are
kept in the same proportion as the first pass kept (ranked from the labels alone, before any model runs). The random
head sets are not drawn again: the null's 99th percentile and the control's value stay the first pass's, so the sequence
is compared with the same bar the fixed-sample verdict used. That bar was estimated on the pilot's few rows, where a
random set's statistic is more spread than on many: a conservative bar for "holds". The heads' mean outputs (mean
ablation) are taken on each round's own rows, as the first pass took them on its rows.

A unit's state is its ablated and clean loss sums and its token count on each slice; the statistic of summed state
is the signed contrast of the per-token changes, as the first pass's interval resamples it
(:func:`probes.causal.null.measured_interval`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analyses.pretrained.causal import CausalConfig, causal_protocol, finding_slices, single_rows
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.causal.ablation import AblationPlan, ablation_sums, batches_as_read
from probes.causal.means import head_output_means
from probes.causal.null import signed_contrast
from probes.causal.slices import SliceFn
from probes.causal.topic_slices import topic_seen_slice
from probes.core.batch import TokenBatch
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel

ABLATION_UNIT_KEYS = ("ablated", "clean", "count")


@dataclass(frozen=True)
class AblationSpec:
    """One causal finding as the first pass measured it: its ``heads``, the ``slices`` and ``signs`` of its
    contrast, the ablation ``method`` and at most ``max_rows`` rows per forward pass."""

    heads: tuple[tuple[int, int], ...]
    slices: Mapping[str, SliceFn]
    signs: tuple[float, ...]
    method: str = "mean"
    max_rows: int = 256

    @classmethod
    def of(cls, name: str, heads: Sequence[tuple[int, int]], config: CausalConfig, labels: Tensor) -> AblationSpec:
        """The spec of causal finding ``name`` with the first pass's ``heads``."""
        slices, signs = finding_slices(name, config, labels)
        return cls(tuple((int(layer), int(head)) for layer, head in heads), slices, signs, config.method,
                   config.max_rows)


def ablation_statistic(signs: Sequence[float]) -> Callable[[Mapping[str, Tensor]], Tensor]:
    """The signed contrast of the per-token loss changes (:func:`probes.causal.null.signed_contrast`, as the first
    pass's interval reads it), on summed unit state with a leading draw axis."""
    contrast = signed_contrast(signs)
    return lambda s: contrast(((s["ablated"] - s["clean"]) / s["count"])[:, None])[:, 0]


def ablation_units(model: HookedModel, spec: AblationSpec, rows: Sequence[TokenBatch], *, seed: int
                   ) -> dict[str, Tensor]:
    """The state of each row of ``rows`` (one sequence per batch) with ``spec``'s heads ablated:
    ``{"ablated", "clean", "count"}``, each ``[row slice]``."""
    plan = AblationPlan.build(ModelInfo.of(model), spec.heads, method=spec.method, seed=seed)
    means = None
    if spec.method == "mean":
        means = head_output_means(model, plan.layers, batches_as_read(model, rows, spec.slices, plan.loss))
    sums = ablation_sums(model, plan, rows, spec.slices, means=means, max_rows=spec.max_rows)
    return {"ablated": sums.ablated[:, 0], "clean": sums.clean, "count": sums.count}


def fresh_causal_protocol(info: ModelInfo, config: CausalConfig, seed: int) -> Iterator[TokenBatch]:
    """``[BOS] X X`` rows after the first pass's (:func:`analyses.pretrained.causal.causal_protocol`): its generator,
    drawn on past the rows it used, one row per batch."""
    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(len(causal_protocol(info, config, seed))):
        repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=1, generator=generator)
    while True:
        yield repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=1, generator=generator)


class SharedText:
    """Fresh text batches read once from ``batches`` and seen by several readers (:meth:`reader`), each every batch
    once and in order: the topic ablation's rows come from the batches the text findings read (a finding's units
    stay fresh for that finding), and neither starves the other of text. A batch every reader has passed is
    dropped."""

    def __init__(self, batches: Iterator[TokenBatch]) -> None:
        self._batches = batches
        self._kept: list[TokenBatch] = []
        self._first = 0  # the index of _kept[0] in the whole stream
        self._positions: list[list[int]] = []

    def reader(self) -> Iterator[TokenBatch]:
        """A new reader from the first batch not yet dropped (make every reader before reading)."""
        position = [self._first]  # registered now, not at the first next(): no batch is dropped before it reads
        self._positions.append(position)
        return self._read(position)

    def _read(self, position: list[int]) -> Iterator[TokenBatch]:
        while True:
            index = position[0] - self._first
            if index == len(self._kept):
                batch = next(self._batches, None)
                if batch is None:
                    return
                self._kept.append(batch)
            batch = self._kept[index]
            position[0] += 1
            passed = min(p[0] for p in self._positions) - self._first
            if passed > 0:
                del self._kept[:passed]
                self._first += passed
            yield batch


def richest_rows(text: Iterator[TokenBatch], labels: Tensor, config: CausalConfig, keep: float
                 ) -> Iterator[TokenBatch]:
    """Rows of the text batches ``text`` yields (cut to ``config.text_len``), each batch's richest in topic-seen
    tokens first, the top ``keep`` fraction of each batch (at least one row)."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must lie in (0, 1]; got {keep!r}")
    richest = topic_seen_slice(labels)
    for batch in text:
        n_rows = int(batch.shape[0])
        yield from single_rows([batch], max(1, math.ceil(keep * n_rows)), config.text_len, richest=richest)
