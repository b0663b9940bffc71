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

The paper's own criterion is a population quantity: :func:`population_parent_criterion` takes the
chains' transition kernels, computes each chain's stationary distribution
(:func:`stationary_distribution`) and the *modified* chi-square mutual information
(:func:`modified_chi_square_mi`, each parent value weighted by ``mu(z)^2``; ``power=1`` gives the
plain one) of every distance subset, and averages over kernels. No correction is needed there:
the ``mu(z)^2`` weighting itself penalises large parent sets.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechprobe.validation import integer
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.core.probe import Probe
from probes.core.result import ProbeResult, Provenance

if TYPE_CHECKING:
    import pandas as pd


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

    def to_dataframe(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(
            [{"subset": label, "chi2_mi": float(a), "corrected": float(b)}
             for label, a, b in zip(self.labels, self.chi2_mi, self.corrected)]
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


class ParentCriterionProbe(Probe[ParentCriterion]):
    """Accumulates the chi-square MI parent criterion over sequences (see the module docstring)."""

    def __init__(self, max_distance: int = 3, max_subset: int = 2) -> None:
        super().__init__()
        for name, value in (("max_distance", max_distance), ("max_subset", max_subset)):
            integer(name, value, 1)
        if max_subset > max_distance:
            raise ConfigError(f"max_subset ({max_subset}) must be <= max_distance ({max_distance}).")
        self.max_distance, self.max_subset = max_distance, max_subset
        self.subsets = [s for k in range(1, max_subset + 1)
                        for s in itertools.combinations(range(1, max_distance + 1), k)]


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
    integer("d_vocab", d_vocab, 2)
    if not isinstance(tokens, Tensor) or tokens.ndim != 2:
        raise InputError(f"tokens must be an integer tensor [batch, pos]; got "
                         f"{getattr(tokens, 'shape', type(tokens))}.")
    info = ModelInfo(name="data", n_layers=0, n_heads=0, n_ctx=int(tokens.shape[1]), d_vocab=d_vocab,
                     causal=None, bos_token_id=None, special_token_ids=())
    probe = ParentCriterionProbe(max_distance, max_subset).bind(info, data=data)
    probe.update({}, as_token_batch(tokens, info))
    result = probe.compute()
    return result


# -- the population criterion of the paper ------------------------------------------------------
@dataclass(frozen=True)
class PopulationParentCriterion:
    """The paper's modified chi-square mutual information of each distance subset, averaged over chains.

    ``values`` [subset] (float64), ``subsets`` = distance sets (``[]`` = the empty set, value 0),
    ``power`` = the weighting exponent (2: the paper's modified criterion, 1: the plain chi-square
    mutual information), ``n_chains`` = how many transition kernels were averaged.
    """

    values: Tensor
    subsets: list[list[int]]
    power: int
    n_chains: int

    @property
    def labels(self) -> list[str]:
        return [_label(s) for s in self.subsets]

    @property
    def selected(self) -> list[int]:
        """The distance set with the largest value (the parent set training should pick)."""
        return self.subsets[int(self.values.argmax())]

    def as_dict(self) -> dict[str, float]:
        return {label: float(v) for label, v in zip(self.labels, self.values)}

    def to_dataframe(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([{"subset": label, "modified_chi2_mi": float(v)}
                             for label, v in zip(self.labels, self.values)])


def _window_chain(kernels: Tensor, n_states: int, n_parents: int, width: int) -> Tensor:
    """Transition matrices [chain, S^width, S^width] of the chain on the last ``width`` tokens
    (state code: base S, oldest token most significant)."""
    n_chains = kernels.shape[0]
    n_win = n_states**width
    codes = torch.arange(n_win)
    context = codes % n_states**n_parents  # the last n_parents tokens, oldest most significant
    successors = (codes[:, None] * n_states + torch.arange(n_states)[None]) % n_win  # [state, next token]
    transition = torch.zeros(n_chains, n_win, n_win, dtype=torch.float64)
    rows = codes[:, None].expand(n_win, n_states)
    transition[:, rows, successors] = kernels[:, context].to(torch.float64)
    return transition


def stationary_distribution(transition: Float[Tensor, "chain state state"], *, squarings: int = 48) -> Tensor:
    """A stationary distribution [chain, state] of each row-stochastic matrix.

    The limit of the uniform distribution under the lazy chain ``(I + P) / 2`` (same stationary
    distributions, aperiodic), by repeated squaring: ``2 ** squarings`` steps. For an irreducible
    chain it is the unique stationary distribution; for a reducible one (possible when a Dirichlet
    row puts ~0 mass somewhere) the mixture reached from the uniform start.

    Example: ``stationary_distribution(torch.tensor([[[0.9, 0.1], [0.2, 0.8]]]))`` is ``[[2/3, 1/3]]``.
    """
    if transition.ndim != 3 or transition.shape[1] != transition.shape[2]:
        raise InputError(f"transition must be [chain, state, state]; got {tuple(transition.shape)}.")
    lazy = 0.5 * (transition.to(torch.float64) + torch.eye(transition.shape[1], dtype=torch.float64))
    for _ in range(squarings):
        lazy = lazy @ lazy
        lazy = lazy / lazy.sum(-1, keepdim=True)  # keeps rows stochastic against rounding
    return lazy.mean(1)  # uniform start: the average of the rows


def modified_chi_square_mi(joint: Float[Tensor, "chain parents d_vocab"], power: int = 2) -> Tensor:
    """``sum_z mu(z)^power (sum_x mu(z, x)^2 / (mu(z)^2 mu(x)) - 1)`` per chain [chain].

    ``joint`` [chain, z, x] is a joint distribution of the parents' value ``z`` and the next token
    ``x``. ``power=1`` gives the chi-square mutual information, ``power=2`` the paper's modified one
    (each parent value weighted by its probability once more, which penalises large parent sets).
    """
    mu_z = joint.sum(-1)
    mu_x = joint.sum(-2)
    safe_z = torch.where(mu_z > 0, mu_z, torch.ones_like(mu_z))
    safe_x = torch.where(mu_x > 0, mu_x, torch.ones_like(mu_x))
    inner = (joint.square() / (safe_z[..., None].square() * safe_x[:, None, :])).sum(-1) - 1.0
    return (torch.where(mu_z > 0, mu_z.pow(power) * inner, torch.zeros_like(inner))).sum(-1)


def population_parent_criterion(
    kernels: Float[Tensor, "chain context d_vocab"], n_states: int, n_parents: int, *, max_distance: int = 3,
    max_subset: int = 2, power: int = 2, include_empty: bool = True,
) -> PopulationParentCriterion:
    """The paper's parent criterion from the chains' transition kernels (no sampled tokens).

    For every kernel (rows = contexts of the ``n_parents`` previous tokens, base ``n_states``,
    oldest most significant, as ``toymodels.induction.data`` samples them): the stationary
    distribution of the chain on the last ``max(max_distance, n_parents)`` tokens
    (:func:`stationary_distribution`), the joint of those tokens and the next one, and for each
    subset ``D`` of distances ``1 .. max_distance`` (``|D| <= max_subset``; the empty set too when
    ``include_empty``) its marginal's :func:`modified_chi_square_mi`; averaged over kernels (the
    expectation over the prior, as the paper defines the criterion).

    Example: ``population_parent_criterion(batch.kernels, 3, 2).selected == [1, 2]`` for trigram chains.
    """
    for name, value in (("n_states", n_states), ("n_parents", n_parents), ("max_distance", max_distance),
                        ("max_subset", max_subset), ("power", power)):
        integer(name, value, 1)
    if n_states < 2:
        raise ConfigError(f"n_states must be >= 2; got {n_states}.")
    if max_subset > max_distance:
        raise ConfigError(f"max_subset ({max_subset}) must be <= max_distance ({max_distance}).")
    if not isinstance(kernels, Tensor) or kernels.ndim != 3 or kernels.shape[1:] != (n_states**n_parents, n_states):
        raise InputError(f"kernels must be [chain, {n_states}^{n_parents}, {n_states}] transition rows; got "
                         f"{tuple(getattr(kernels, 'shape', ()))}.")
    width = max(max_distance, n_parents)
    if n_states ** (width + 1) > 200_000:
        raise ConfigError(f"n_states ** (window + 1) = {n_states ** (width + 1)} joint cells per chain is too many; "
                          f"lower max_distance.")
    transition = _window_chain(kernels, n_states, n_parents, width)
    mu = stationary_distribution(transition)  # [chain, S^width]
    joint = mu[:, :, None] * kernels[:, torch.arange(n_states**width) % n_states**n_parents].to(torch.float64)
    joint = joint.reshape((kernels.shape[0],) + (n_states,) * (width + 1))  # axes: oldest .. newest, next
    smallest = 0 if include_empty else 1
    subsets = [list(s) for k in range(smallest, max_subset + 1)
               for s in itertools.combinations(range(1, max_distance + 1), k)]
    values = []
    for subset in subsets:
        # axis j (0-based) of the window holds distance width - j from the next token
        drop = tuple(1 + j for j in range(width) if width - j not in subset)
        marginal = joint.sum(dim=drop) if drop else joint
        values.append(modified_chi_square_mi(marginal.reshape(kernels.shape[0], -1, n_states), power).mean())
    return PopulationParentCriterion(values=torch.stack(values), subsets=subsets, power=power,
                                     n_chains=int(kernels.shape[0]))
