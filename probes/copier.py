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
from typing import Any

import torch
from torch import Tensor

from probes.batch import TokenBatch
from probes.errors import ConfigError, InputError
from probes.model_info import ModelInfo, pattern_hook
from probes.probe import Probe
from probes.result import ProbeResult, Provenance


@dataclass(frozen=True)
class CopierProfile(ProbeResult):
    """``mass`` [n_layers, n_heads, max_distance + 1] and ``beyond`` [n_layers, n_heads] (see module)."""

    mass: Tensor
    beyond: Tensor
    n_queries: int
    min_query: int

    @property
    def copied_distance(self) -> Tensor:
        """[n_layers, n_heads]: the distance each head puts most mass on (0 = itself)."""
        return self.mass.argmax(-1)

    def to_dataframe(self):
        """One row per (layer, head, distance) with the attention mass."""
        import pandas as pd

        n_layers, n_heads, n_dist = self.mass.shape
        return pd.DataFrame(
            [
                {"layer": l, "head": h, "distance": d, "mass": float(self.mass[l, h, d])}
                for l in range(n_layers)
                for h in range(n_heads)
                for d in range(n_dist)
            ]
        )


class CopierProbe(Probe):
    """Accumulates the attention mass by relative distance of every head (see the module docstring).

    Example::

        (profile,) = probes.run_probes(model, [CopierProbe(max_distance=4)], batches)
        profile.copied_distance[0]        # layer-1 heads: tensor([1, 2, ...])
    """

    def __init__(self, max_distance: int = 8, *, min_query: int | None = None) -> None:
        super().__init__()
        if isinstance(max_distance, bool) or not isinstance(max_distance, int) or max_distance < 1:
            raise ConfigError(f"max_distance must be an integer >= 1; got {max_distance!r}.")
        if min_query is not None and (isinstance(min_query, bool) or not isinstance(min_query, int) or min_query < 0):
            raise ConfigError(f"min_query must be None or an integer >= 0; got {min_query!r}.")
        self.max_distance = max_distance
        self.min_query = max_distance if min_query is None else min_query

    def settings(self) -> dict[str, Any]:
        return {"max_distance": self.max_distance, "min_query": self.min_query}

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(l) for l in range(info.n_layers))

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        info = self.info
        n_batch, n_pos = batch.tokens.shape
        patterns = torch.stack([activations[pattern_hook(l)] for l in range(info.n_layers)])
        if tuple(patterns.shape[1:]) != (n_batch, info.n_heads, n_pos, n_pos):
            raise InputError(
                f"Attention patterns must be [batch head q_pos k_pos] = {(n_batch, info.n_heads, n_pos, n_pos)}; "
                f"the model's hooks gave {tuple(patterns.shape[1:])}."
            )
        queries = batch.valid.clone()
        queries[:, : min(self.min_query, n_pos)] = False
        q = torch.arange(n_pos, device=patterns.device)
        rel = q[:, None] - q[None, :]  # [q, k] = q - k
        patterns = patterns * batch.valid[None, :, None, None, :]  # only valid keys count
        weights = queries.to(patterns.dtype)
        masses = []
        for d in range(self.max_distance + 1):
            at = (rel == d).to(patterns.dtype)
            masses.append(torch.einsum("lbhqk,qk,bq->lh", patterns, at, weights))
        mass = torch.stack(masses, dim=-1)
        total = torch.einsum("lbhqk,bq->lh", patterns, weights)
        self._add("mass", mass)
        self._add("beyond", total - mass.sum(-1))
        self._add("n_queries", queries.sum())

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
