"""Chi-square mutual-information parent criterion, computed from token data alone.

Chen et al. (2024) show that training selects the parent set that maximises a chi-square
mutual information between the next token and its candidate parents. Here, for every subset
``D`` of distances ``{1 .. max_distance}`` (``1 <= |D| <= max_subset``) and every sequence, the
plug-in chi-square mutual information between the token ``X = x_i`` and its tokens
``Z = (x_{i-j})_{j in D}`` over positions ``i >= max_distance`` is::

    I(D) = sum_{z, x} p(z, x)^2 / (p(z) p(x)) - 1 = sum_{z, x} n(z, x)^2 / (n(z) n(x)) - 1

(counts ``n`` within the sequence; this is Pearson's chi-square statistic divided by the number
of positions ``N``). Larger sets always look at least as informative to a plug-in estimate, so
the criterion also reports the corrected value ``I(D) - (r - 1)(c - 1) / N`` (``r``, ``c`` = the
numbers of distinct ``z`` and ``x`` seen; the statistic's expectation under independence).
Both are averaged over sequences (each sequence has its own chain, so this is the expectation
over the prior of the chain). ``selected`` is the subset with the largest corrected value.

The probe reads no hooks: feed it token batches with :func:`chi_square_parent_criterion` (no
model needed) or alongside other probes through ``probes.run_probes``.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from probes.batch import TokenBatch, as_token_batch
from probes.errors import ConfigError, InputError
from probes.model_info import ModelInfo
from probes.probe import Probe
from probes.result import ProbeResult, Provenance


def _label(subset: tuple[int, ...] | list[int]) -> str:
    return "{" + ",".join(str(d) for d in subset) + "}"


@dataclass(frozen=True)
class ParentCriterion(ProbeResult):
    """``chi2_mi`` / ``corrected`` [subset], averaged over sequences; ``subsets`` = distance sets."""

    chi2_mi: Tensor
    corrected: Tensor
    subsets: list[list[int]]

    @property
    def labels(self) -> list[str]:
        return [_label(s) for s in self.subsets]

    @property
    def selected(self) -> list[int]:
        """The distance set with the largest corrected chi-square mutual information."""
        return self.subsets[int(self.corrected.argmax())]

    def as_dict(self, corrected: bool = True) -> dict[str, float]:
        values = self.corrected if corrected else self.chi2_mi
        return {label: float(v) for label, v in zip(self.labels, values)}

    def to_dataframe(self):
        import pandas as pd

        return pd.DataFrame(
            [{"subset": l, "chi2_mi": float(a), "corrected": float(b)}
             for l, a, b in zip(self.labels, self.chi2_mi, self.corrected)]
        )


def _per_sequence_chi2(codes_z: Tensor, codes_x: Tensor, n_x: int) -> tuple[Tensor, Tensor]:
    """Plug-in chi-square MI and its corrected value per sequence from codes [batch, N]."""
    n_batch, n = codes_z.shape
    n_z = int(codes_z.max()) + 1 if codes_z.numel() else 1
    row = torch.arange(n_batch, device=codes_z.device)[:, None] * n_z
    key_z = row + codes_z
    key_x = torch.arange(n_batch, device=codes_z.device)[:, None] * n_x + codes_x
    key_zx = key_z * n_x + codes_x

    def counts(key: Tensor) -> tuple[Tensor, Tensor]:
        uniq, inverse, count = torch.unique(key.flatten(), return_inverse=True, return_counts=True)
        return uniq, count[inverse].view(key.shape).to(torch.float64)

    _, c_zx = counts(key_zx)
    uz, c_z = counts(key_z)
    ux, c_x = counts(key_x)
    mi = (c_zx / (c_z * c_x)).sum(-1) - 1.0
    distinct_z = torch.zeros(n_batch, dtype=torch.float64, device=codes_z.device).index_add_(
        0, uz // n_z, torch.ones_like(uz, dtype=torch.float64))
    distinct_x = torch.zeros(n_batch, dtype=torch.float64, device=codes_z.device).index_add_(
        0, ux // n_x, torch.ones_like(ux, dtype=torch.float64))
    return mi, mi - (distinct_z - 1) * (distinct_x - 1) / n


class ParentCriterionProbe(Probe):
    """Accumulates the chi-square MI parent criterion over sequences (see the module docstring)."""

    def __init__(self, max_distance: int = 3, max_subset: int = 2) -> None:
        super().__init__()
        for name, value in (("max_distance", max_distance), ("max_subset", max_subset)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1; got {value!r}.")
        if max_subset > max_distance:
            raise ConfigError(f"max_subset ({max_subset}) must be <= max_distance ({max_distance}).")
        self.max_distance, self.max_subset = max_distance, max_subset
        self.subsets = [s for k in range(1, max_subset + 1) for s in itertools.combinations(range(1, max_distance + 1), k)]

    def settings(self) -> dict[str, Any]:
        return {"max_distance": self.max_distance, "max_subset": self.max_subset}

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return ()

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        tokens = batch.tokens
        n_batch, n_pos = tokens.shape
        if n_pos <= self.max_distance:
            raise InputError(f"Sequences need more than max_distance = {self.max_distance} tokens; got {n_pos}.")
        if not bool(batch.valid.all()):
            raise InputError("The parent criterion needs unpadded sequences without special tokens (all valid).")
        vocab = self.info.d_vocab
        if vocab ** (self.max_subset + 1) * n_batch >= 2**62:
            raise ConfigError(
                f"d_vocab ** (max_subset + 1) = {vocab} ** {self.max_subset + 1} cells is too many to count; "
                f"use the criterion on small-vocabulary (toy) data or lower max_subset."
            )
        m = self.max_distance
        x = tokens[:, m:]
        raw, corrected = [], []
        for subset in self.subsets:
            z = torch.zeros_like(x)
            for j in subset:
                z = z * vocab + tokens[:, m - j : n_pos - j]
            mi, mi_corrected = _per_sequence_chi2(z, x, vocab)
            raw.append(mi.sum())
            corrected.append(mi_corrected.sum())
        self._add("chi2_mi", torch.stack(raw))
        self._add("corrected", torch.stack(corrected))

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> ParentCriterion:
        n = float(state["_n_sequences"])
        return ParentCriterion(
            provenance=provenance,
            chi2_mi=(state["chi2_mi"] / n).float(),
            corrected=(state["corrected"] / n).float(),
            subsets=[list(s) for s in self.subsets],
        )


def chi_square_parent_criterion(
    tokens: Int[Tensor, "batch pos"], d_vocab: int, *, max_distance: int = 3, max_subset: int = 2,
    data: str = "given tokens",
) -> ParentCriterion:
    """The parent criterion of ``tokens`` (ids < ``d_vocab``), no model needed.

    Example: ``chi_square_parent_criterion(chains, 3).selected == [1, 2]`` for trigram chains.
    """
    if isinstance(d_vocab, bool) or not isinstance(d_vocab, int) or d_vocab < 2:
        raise ConfigError(f"d_vocab must be an integer >= 2; got {d_vocab!r}.")
    if not isinstance(tokens, Tensor) or tokens.ndim != 2:
        raise InputError(f"tokens must be an integer tensor [batch, pos]; got {getattr(tokens, 'shape', type(tokens))}.")
    info = ModelInfo(name="data", n_layers=0, n_heads=0, n_ctx=int(tokens.shape[1]), d_vocab=d_vocab,
                     causal=None, bos_token_id=None, special_token_ids=())
    probe = ParentCriterionProbe(max_distance, max_subset).bind(info, data=data)
    probe.update({}, as_token_batch(tokens, info))
    result = probe.compute()
    assert isinstance(result, ParentCriterion)
    return result
