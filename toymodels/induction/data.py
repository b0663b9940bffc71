"""In-context n-gram Markov chains (Chen, Sheen, Wang & Yang 2024) and their Bayes-optimal predictor.

Every sequence gets its own transition kernel: for each of the ``S ** (n - 1)`` parent contexts
(the previous ``n - 1`` tokens) a row drawn from ``Dirichlet(alpha * 1_S)``. The first ``n - 1``
tokens are uniform, the rest follow the chain. A sample holds ``L + 1`` tokens: the model reads
the first ``L`` and predicts the last (and, language-model style, every token from its prefix).

The Bayes-optimal in-context predictor of token ``i`` given ``x_0 .. x_{i-1}`` is the Dirichlet
posterior mean of the row of the current context, from the sequence's own n-gram counts::

    P(x_i = s | x_<i) = (N_i(ctx_i, s) + alpha) / (N_i(ctx_i) + S * alpha)

where ``ctx_i = x_{i-n+1} .. x_{i-1}`` and ``N_i`` counts the transitions ``j < i`` (``j >= n - 1``)
whose context equals ``ctx_i``. Tokens ``i < n - 1`` are uniform (probability ``1 / S``).

Example::

    data = MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1)
    batch = sample_markov_icl(data, 32, torch.Generator().manual_seed(0))
    optimal = bayes_optimal_loss(batch.tokens, data)          # last-token NLL, nats
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechprobe.validation import integer, is_integer
from toymodels.errors import ToyConfigError


@dataclass(frozen=True)
class MarkovConfig:
    """In-context n-gram Markov chain data: ``n_states`` = S, ``order`` = n (n - 1 parents),
    ``seq_len`` = L input tokens (+ 1 target), ``alpha`` = Dirichlet concentration."""

    n_states: int = 3
    order: int = 3
    seq_len: int = 100
    alpha: float = 0.1

    def __post_init__(self) -> None:
        reasons = {"n_states": "a chain needs at least 2 states", "order": "an n-gram needs n >= 2 (one parent)"}
        for name, reason in reasons.items():
            value = getattr(self, name)
            if not is_integer(value) or value < 2:
                raise ToyConfigError(f"{name} must be an integer >= 2 ({reason}); got {value!r}.")
        if not is_integer(self.seq_len) or self.seq_len <= self.order:
            raise ToyConfigError(
                f"seq_len (L) must be an integer > order (n = {self.order}) so that the sequence holds "
                f"at least one transition; got {self.seq_len!r}."
            )
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not (
            self.alpha > 0 and math.isfinite(self.alpha)
        ):
            raise ToyConfigError(f"alpha (the Dirichlet concentration) must be a finite number > 0; got "
                                 f"{self.alpha!r}.")
        if self.n_states ** (self.order - 1) > 1_000_000:
            raise ToyConfigError(
                f"n_states ** (order - 1) = {self.n_states ** (self.order - 1)} parent contexts is too many "
                f"transition-kernel rows per sequence (at most 1,000,000); lower n_states or order."
            )

    @property
    def n_parents(self) -> int:
        return self.order - 1

    @property
    def n_contexts(self) -> int:
        return self.n_states**self.n_parents


@dataclass(frozen=True)
class MarkovBatch:
    """``tokens`` [batch, L + 1] (input = ``tokens[:, :L]``, target = ``tokens[:, L]``) and the
    per-sequence transition kernels [batch, S ** (n - 1), S] (row index = base-S context, oldest
    parent most significant)."""

    tokens: Int[Tensor, "batch pos"]
    kernels: Float[Tensor, "batch context d_vocab"]

    @property
    def inputs(self) -> Int[Tensor, "batch pos"]:
        return self.tokens[:, :-1]

    @property
    def targets(self) -> Int[Tensor, " batch"]:
        return self.tokens[:, -1]


def _numpy_rng(generator: torch.Generator) -> np.random.Generator:
    seed = int(torch.randint(0, 2**62, (1,), generator=generator))
    return np.random.default_rng(seed)


def sample_markov_icl(
    config: MarkovConfig, n_sequences: int, generator: torch.Generator | int
) -> MarkovBatch:
    """``n_sequences`` chains of ``L + 1`` tokens, each with a fresh Dirichlet kernel.

    Randomness comes only from ``generator`` (a torch.Generator, or an int seed), vectorised over
    sequences (one loop step per position).
    """
    integer("n_sequences", n_sequences, 1, error=ToyConfigError)
    if isinstance(generator, int):
        generator = torch.Generator().manual_seed(generator)
    rng = _numpy_rng(generator)
    S, n_ctx, length = config.n_states, config.n_contexts, config.seq_len + 1
    gamma = rng.standard_gamma(config.alpha, size=(n_sequences, n_ctx, S))
    totals = gamma.sum(-1, keepdims=True)
    kernels = np.where(totals > 0, gamma / np.where(totals > 0, totals, 1.0), 1.0 / S)
    kernels_t = torch.from_numpy(kernels).to(torch.float64)
    tokens = torch.empty(n_sequences, length, dtype=torch.long)
    tokens[:, : config.n_parents] = torch.randint(0, S, (n_sequences, config.n_parents), generator=generator)
    uniforms = torch.rand(n_sequences, length, generator=generator, dtype=torch.float64)
    cdf = kernels_t.cumsum(-1)
    cdf[..., -1] = 1.0
    rows = torch.arange(n_sequences)
    context = torch.zeros(n_sequences, dtype=torch.long)
    for i in range(config.n_parents):
        context = context * S + tokens[:, i]
    for i in range(config.n_parents, length):
        row_cdf = cdf[rows, context]
        tokens[:, i] = (row_cdf < uniforms[:, i, None]).sum(-1).clamp(max=S - 1)
        context = (context * S + tokens[:, i]) % n_ctx
    return MarkovBatch(tokens=tokens, kernels=kernels_t.float())


def context_ids(tokens: Int[Tensor, "batch pos"], n_parents: int, n_states: int) -> Int[Tensor, "batch pos"]:
    """``ctx[b, i]`` = base-``n_states`` id of the ``n_parents`` tokens *before* position ``i``
    (``-1`` where ``i < n_parents``: fewer parents than needed)."""
    n_batch, n_pos = tokens.shape
    ctx = torch.full((n_batch, n_pos), -1, dtype=torch.long, device=tokens.device)
    if n_pos > n_parents:
        acc = torch.zeros(n_batch, n_pos - n_parents, dtype=torch.long, device=tokens.device)
        for k in range(n_parents):  # oldest parent most significant
            acc = acc * n_states + tokens[:, k : n_pos - n_parents + k]
        ctx[:, n_parents:] = acc
    return ctx


def transition_counts(
    tokens: Int[Tensor, "batch pos"], n_parents: int, n_states: int
) -> Int[Tensor, "batch pos d_vocab"]:
    """``counts[b, q, s]``: the transitions ``k <= q`` (``k >= n_parents``) whose parents equal those token ``q + 1``
    will have (the ``n_parents`` tokens ending at ``q``; none where ``q < n_parents - 1``) and whose token is ``s``.

    Without a [batch q_pos k_pos] mask: each transition's key ``(parents * S + token) * pos + k`` is sorted once per
    sequence, so the transitions of one (parents, token) up to ``q`` are a run found by two binary searches.
    """
    n_batch, n_pos = tokens.shape
    ctx = context_ids(tokens, n_parents, n_states)
    next_ctx = torch.full_like(ctx, -1)  # parents of token q + 1 = the n_parents tokens ending at q
    if n_pos >= n_parents:
        next_ctx[:, n_parents - 1 :] = context_ids(
            torch.cat([tokens, tokens[:, :1]], dim=1), n_parents, n_states
        )[:, n_parents:]
    positions = torch.arange(n_pos, device=tokens.device)
    keys = torch.where(ctx >= 0, (ctx * n_states + tokens) * n_pos + positions, -1).sort(-1).values
    run_starts = (next_ctx[..., None] * n_states + torch.arange(n_states, device=tokens.device)) * n_pos
    first = torch.searchsorted(keys, run_starts.flatten(1))
    last = torch.searchsorted(keys, (run_starts + positions[:, None]).flatten(1), right=True)
    counts = (last - first).view(n_batch, n_pos, n_states)
    return torch.where(next_ctx[..., None] >= 0, counts, 0)


def in_context_ngram_probs(
    tokens: Int[Tensor, "batch pos"], n: int, n_states: int, alpha: float
) -> Float[Tensor, "batch pos d_vocab"]:
    """``probs[b, q]``: the in-context ``n``-gram estimate of ``P(x_{q+1} | x_0 .. x_q)``, the counts of the
    transitions ``j <= q`` in the sequence whose ``n - 1`` preceding tokens equal the last ``n - 1`` up to ``q``,
    add-``alpha`` smoothed: ``(N(ctx, s) + alpha) / (N(ctx) + S * alpha)``. ``n = 1``: the unigram (the counts of
    every token so far); ``n`` = the chain's order with its ``alpha``: the Bayes-optimal predictor.

    Example: ``in_context_ngram_probs(torch.tensor([[0, 0, 1]]), 1, 2, 1.0)[0, -1]`` is ``[3/5, 2/5]``.
    """
    if tokens.ndim != 2:
        raise ToyConfigError(f"tokens must be [batch, pos]; got shape {tuple(tokens.shape)}.")
    if not is_integer(n) or n < 1:
        raise ToyConfigError(f"n (the n-gram's length) must be an integer >= 1 (1: unigram); got {n!r}.")
    counts = (torch.nn.functional.one_hot(tokens, n_states).to(torch.float64).cumsum(1) if n == 1
              else transition_counts(tokens, n - 1, n_states).to(torch.float64))
    return (counts + alpha) / (counts.sum(-1, keepdim=True) + n_states * alpha)


def bayes_optimal_probs(
    tokens: Int[Tensor, "batch pos"], config: MarkovConfig
) -> Float[Tensor, "batch pos d_vocab"]:
    """``probs[b, q]`` = Bayes-optimal ``P(x_{q+1} | x_0 .. x_q)`` under the Dirichlet prior
    (row ``q`` predicts the token after position ``q``; see the module docstring)."""
    return in_context_ngram_probs(tokens, config.order, config.n_states, config.alpha)


def bayes_optimal_loss(
    tokens: Int[Tensor, "batch pos"],
    config: MarkovConfig,
    *,
    positions: Literal["last", "all"] = "last",
) -> float:
    """Mean NLL (nats) of the Bayes-optimal predictor on ``tokens`` [batch, L + 1].

    ``positions="last"``: the paper's task, predicting ``tokens[:, -1]`` from the rest, averaged
    over sequences. ``"all"``: every token from its prefix (positions 1 .. L), averaged over
    sequences and positions, as a language model is trained.
    """
    probs = bayes_optimal_probs(tokens[:, :-1], config)
    targets = tokens[:, 1:]
    logp = probs.gather(-1, targets[..., None]).squeeze(-1).log()
    if positions == "last":
        return float(-logp[:, -1].mean())
    if positions == "all":
        return float(-logp.mean())
    raise ToyConfigError(f"positions must be 'last' or 'all'; got {positions!r}.")
