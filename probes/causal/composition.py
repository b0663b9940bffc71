"""Elhage et al.'s (2021) weight-only composition scores for every pair of heads, and how well they rank the edges
path patching measures.

With TransformerLens's row-vector convention (``x @ W``), head ``h``'s OV circuit is ``W_OV = W_V W_O`` and its QK
circuit ``W_QK = W_Q W_K^T`` (both ``[d_model d_model]``). A sender ``s`` in an earlier layer composes with a
receiver ``r`` through

- its queries: ``Q = ||W_OV^s W_QK^r||_F / (||W_OV^s||_F ||W_QK^r||_F)``,
- its keys: ``K = ||W_OV^s (W_QK^r)^T||_F / (||W_OV^s||_F ||W_QK^r||_F)``,
- its values: ``V = ||W_OV^s W_OV^r||_F / (||W_OV^s||_F ||W_OV^r||_F)``,

each in ``[0, 1]`` (the product's norm is at most the product of the norms). The weights are the model's as it holds
them (``model.W_Q``, ``W_K``, ``W_V``, ``W_O``: TransformerLens 3.9 ``HookedTransformer`` and 4.x bridges), without
the LayerNorm gains folded in; grouped key/value heads are shared by the query heads of their group. The products
are never formed: with ``M`` the ``[d_head d_head]`` middle factor (``W_O^s W_Q^r`` for Q, ``W_O^s W_K^r`` for K,
``W_O^s W_V^r`` for V), ``||A M B^T||_F^2 = sum((A^T A M) * (M B^T B))``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float
from torch import Tensor

from probes.causal.edge_plan import EDGE_INPUTS, check_input
from probes.core.errors import InputError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.result import ProbeResult, Provenance
from probes.text.cooccurrence import spearman

if TYPE_CHECKING:
    import pandas as pd


def head_weights(model: HookedModel) -> dict[str, Float[Tensor, "layer head ..."]]:
    """``W_Q``, ``W_K``, ``W_V`` ``[layer head d_model d_head]`` and ``W_O`` ``[layer head d_head d_model]`` in
    float64 on the CPU, key and value heads repeated to one per query head."""
    weights = {}
    for name in ("W_Q", "W_K", "W_V", "W_O"):
        try:
            value = getattr(model, name)
        except AttributeError as error:
            raise ModelError(f"Composition scores read the model's {name} [layer head ...] (TransformerLens's "
                             f"HookedTransformer and bridges have it); this model has none. Give a hand-made "
                             f"module W_Q, W_K, W_V [layer head d_model d_head] and W_O [layer head d_head d_model] "
                             f"properties.") from error
        if not isinstance(value, Tensor) or value.ndim != 4:
            raise ModelError(f"model.{name} must be a [layer head ...] tensor; got "
                             f"{tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__}.")
        weights[name] = value.detach().to("cpu", torch.float64)
    n_heads = weights["W_Q"].shape[1]
    for name in ("W_K", "W_V"):
        groups = n_heads // weights[name].shape[1]
        if groups * weights[name].shape[1] != n_heads:
            raise ModelError(f"model.{name} has {weights[name].shape[1]} heads, which do not divide the "
                             f"{n_heads} query heads.")
        weights[name] = weights[name].repeat_interleave(groups, dim=1)
    return weights


def _gram(a: Tensor) -> Tensor:
    """``a^T a`` over the last two axes."""
    return a.transpose(-1, -2) @ a


def composition_score_matrices(weights: Mapping[str, Tensor]) -> dict[str, Float[Tensor, "layer head layer head"]]:
    """``scores[kind][l_s, h_s, l_r, h_r]`` for ``kind`` in ``k``, ``q``, ``v``; NaN unless ``l_r > l_s``."""
    w_q, w_k, w_v, w_o = (weights[name] for name in ("W_Q", "W_K", "W_V", "W_O"))
    n_layers, n_heads = w_q.shape[:2]
    g_q, g_k, g_v = _gram(w_q), _gram(w_k), _gram(w_v)  # [layer head d_head d_head]
    h_o = w_o @ w_o.transpose(-1, -2)  # W_O W_O^T
    ov_norm = (g_v * h_o).sum((-1, -2)).sqrt()  # ||W_V W_O||_F
    qk_norm = (g_q * g_k).sum((-1, -2)).sqrt()  # ||W_Q W_K^T||_F
    # kind: (receiver's middle factor, its gram on the sender side's far end, the receiver's norm)
    sides = {"q": (w_q, g_k, qk_norm), "k": (w_k, g_q, qk_norm), "v": (w_v, h_o, ov_norm)}
    scores = {}
    later = torch.arange(n_layers)[None, :] > torch.arange(n_layers)[:, None]  # [sender layer, receiver layer]
    for kind, (middle, far, norm) in sides.items():
        out = torch.full((n_layers, n_heads, n_layers, n_heads), float("nan"), dtype=torch.float64)
        for layer in range(n_layers - 1):
            m = torch.einsum("hij,agjk->hagik", w_o[layer], middle)  # [h_s, l_r, h_r, d_head, d_head]
            left = g_v[layer][:, None, None] @ m
            right = m @ far[None]
            product = (left * right).sum((-1, -2)).clamp_min(0).sqrt()
            out[layer] = product / (ov_norm[layer][:, None, None] * norm[None])
        scores[kind] = torch.where(later[:, None, :, None], out, torch.full_like(out, float("nan")))
    return scores


@dataclass(frozen=True)
class CompositionScores(ProbeResult):
    """``scores[kind][l_s, h_s, l_r, h_r]``: the K-, Q- or V-composition score (module docstring) of sender
    ``(l_s, h_s)`` with receiver ``(l_r, h_r)``; NaN where the receiver is not in a later layer."""

    scores: dict[str, Tensor]

    def pair(self, kind: str, sender: tuple[int, int], receiver: tuple[int, int]) -> float:
        """The ``kind`` score of one pair."""
        check_input(kind)
        return float(self.scores[kind][sender[0], sender[1], receiver[0], receiver[1]])

    def of_edges(self, kind: str, edges: Tensor) -> Float[Tensor, " edge"]:
        """The ``kind`` score of each row ``(l_s, h_s, l_r, h_r)`` of ``edges``."""
        check_input(kind)
        e = edges.long().cpu()
        return self.scores[kind][e[:, 0], e[:, 1], e[:, 2], e[:, 3]]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (sender, receiver) pair with the receiver in a later layer: its three scores."""
        import pandas as pd

        pairs = (~self.scores["k"].isnan()).nonzero().tolist()
        return pd.DataFrame([{"sender": f"L{ls}H{hs}", "receiver": f"L{lr}H{hr}",
                              **{kind: float(self.scores[kind][ls, hs, lr, hr]) for kind in EDGE_INPUTS}}
                             for ls, hs, lr, hr in pairs])


def composition_scores(model: HookedModel) -> CompositionScores:
    """Every head pair's K-, Q- and V-composition scores from the weights alone (no data).

    Example: ``composition_scores(model).pair("k", (0, 0), (1, 0))``.
    """
    info = ModelInfo.of(model)
    weights = head_weights(model)
    provenance = Provenance(model=info.name, data="weights only", probe="CompositionScores",
                            settings={"weights": "as held by the model (LayerNorm not folded)"}, seed=None,
                            n_sequences=0, n_tokens=0)
    return CompositionScores(provenance, composition_score_matrices(weights))


def screen_rank_correlation(scores: CompositionScores, kind: str, edges: Tensor, effects: Tensor) -> float:
    """Spearman's rho between the ``kind`` composition score of each distinct edge (rows ``(l_s, h_s, l_r, h_r)``)
    and its patched effect (a repeated edge counts once); NaN with fewer than 3 distinct edges or a constant side.

    Example: ``screen_rank_correlation(scores, "k", torch.cat([plan.edges[:1], result.null_edges]),
    torch.cat([result.value[None, 0], result.null[:, 0]]))``."""
    if edges.shape[0] != effects.shape[0]:
        raise InputError(f"Give one effect per edge; got {edges.shape[0]} edges and {effects.shape[0]} effects.")
    unique, index = torch.unique(edges.long().cpu(), dim=0, return_inverse=True)
    first = torch.full((unique.shape[0],), edges.shape[0], dtype=torch.long).scatter_reduce(
        0, index, torch.arange(edges.shape[0]), reduce="amin")
    if unique.shape[0] < 3:
        return float("nan")
    return float(spearman(scores.of_edges(kind, unique), effects.double().cpu()[first]))
