"""Copier: each head's attention mass by relative distance (which earlier position a head copies).

For every layer ``l``, head ``h`` and distance ``d = 0 .. max_distance``::

    mass[l, h, d] = sum_{b, q} A[b, l, h, q, q - d] * valid[b, q - d] / #{(b, q)}

over the valid queries ``q >= min_query`` (default ``max_distance``: queries close to the start
cannot reach every distance, so they would bias the profile). ``beyond[l, h]`` is the mass on
valid keys further than ``max_distance`` (and on later keys, for bidirectional models). A layer-1
head of an n-gram induction circuit that copies parent ``j`` has its mass peaked at ``d = j``;
``copied_distance[l, h]`` is the argmax over ``d``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from mechprobe.validation import integer, is_integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.pattern_sums import check_pattern_block, masked_row_sums
from probes.core.probe import LayerwiseProbe
from probes.core.result import ProbeResult, Provenance
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class CopierProfile(ProbeResult, HeadMapDisplay):
    """``mass`` [n_layers, n_heads, max_distance + 1] and ``beyond`` [n_layers, n_heads] (see module)."""

    mass: Tensor
    beyond: Tensor
    n_queries: int
    min_query: int

    @property
    def copied_distance(self) -> Tensor:
        """[n_layers, n_heads]: the distance each head puts most mass on (0 = itself)."""
        return self.mass.argmax(-1)

    def head_maps(self) -> list[HeadMap]:
        """The distance each head attends most to, the mass there, and the mass beyond ``max_distance``."""
        return [HeadMap("most attended distance", self.copied_distance.double(), label="distance"),
                HeadMap("mass at that distance", self.mass.max(-1).values, label="mass"),
                HeadMap("mass beyond max distance", self.beyond, label="mass")]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head, distance) with the attention mass."""
        import pandas as pd

        n_layers, n_heads, n_dist = self.mass.shape
        return pd.DataFrame(
            [
                {"layer": layer, "head": h, "distance": d, "mass": float(self.mass[layer, h, d])}
                for layer in range(n_layers)
                for h in range(n_heads)
                for d in range(n_dist)
            ]
        )


class CopierProbe(LayerwiseProbe[CopierProfile]):
    """Accumulates the attention mass by relative distance of every head (see the module docstring).

    Example::

        (profile,) = probes.run_probes(model, [CopierProbe(max_distance=4)], batches)
        profile.copied_distance[0]        # layer-1 heads: tensor([1, 2, ...])
    """

    def __init__(self, max_distance: int = 8, *, min_query: int | None = None) -> None:
        super().__init__()
        integer("max_distance", max_distance, 1)
        if min_query is not None and (not is_integer(min_query) or min_query < 0):
            raise ConfigError(f"min_query must be None or an integer >= 0; got {min_query!r}.")
        self.max_distance = max_distance
        self.min_query = max_distance if min_query is None else min_query


    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> Tensor:
        n_batch, n_pos = batch.tokens.shape
        check_pattern_block(first, n_batch, self.info.n_heads, n_pos)
        queries = batch.valid.clone()
        queries[:, : min(self.min_query, n_pos)] = False
        self._add("n_queries", queries.sum())
        return queries

    def _update_rows(self, index: int, rows: Tensor, start: int, batch: TokenBatch, queries: Tensor) -> None:
        n_rows = rows.shape[2]
        weights = queries[:, None, start : start + n_rows].to(torch.float64)  # [batch 1 row]
        query = torch.arange(start, start + n_rows, device=rows.device)
        # one value per (row, distance): the entry at key q - d, only valid keys count
        masses = []
        for d in range(self.max_distance + 1):
            inside = (query >= d).nonzero().squeeze(1)  # rows of this block that have a key at distance d
            keys = query[inside] - d
            on_diagonal = rows[:, :, inside, keys] * batch.valid[:, None, keys].to(rows.dtype)  # [b h row]
            masses.append((on_diagonal.double() * weights[..., inside]).sum(dim=(0, 2)))
        mass = torch.stack(masses, dim=-1)
        total = (masked_row_sums(rows, batch.valid[:, None, :]) * weights).sum(dim=(0, 2))
        n_layers = self.info.n_layers
        self._add_at("mass", index, n_layers, mass)
        self._add_at("beyond", index, n_layers, total - mass.sum(-1))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> CopierProfile:
        n = float(state["n_queries"])
        if n == 0:
            raise InputError(
                f"No query position >= min_query = {self.min_query} was seen; use longer sequences or a "
                f"smaller min_query."
            )
        return CopierProfile(
            provenance=provenance,
            mass=(state["mass"] / n).float(),
            beyond=(state["beyond"] / n).float(),
            n_queries=int(n),
            min_query=self.min_query,
        )
