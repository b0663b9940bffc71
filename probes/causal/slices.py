"""Slices of positions an ablation is measured on: boolean masks over *query* positions.

Causal models (loss ``"next"``): a slice mask ``[batch pos]`` marks the positions ``q`` whose next-token loss is
counted: the loss of predicting ``tokens[:, q + 1]`` from the logits at ``q``. So the last position is never in a
slice, and neither is a position whose own token or next token is invalid (BOS/CLS/SEP, padding:
``TokenBatch.valid``).

Encoders (loss ``"masked"``): a slice marks positions whose own token is replaced by the mask token and predicted
at that position (:func:`masked_positions`); only valid, attended positions (:func:`maskable_positions`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Bool
from torch import Tensor

from mechprobe.validation import is_integer
from probes.core.batch import TokenBatch
from probes.core.errors import InputError

SliceFn = Callable[[TokenBatch], Bool[Tensor, "batch pos"]]
"""Maps a batch to the query positions whose loss (next-token or masked-token) is counted."""


def predicted_positions(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
    """Positions ``q`` whose token and next token are both valid: every query a slice may count."""
    valid = batch.valid.bool()
    if batch.attention_mask is not None:
        valid = valid & batch.attention_mask.bool()
    out = torch.zeros_like(valid)
    out[:, :-1] = valid[:, :-1] & valid[:, 1:]
    return out


def maskable_positions(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
    """Positions whose own token is valid and attended: every position a masked-token slice may count."""
    valid = batch.valid.bool()
    return valid if batch.attention_mask is None else valid & batch.attention_mask.bool()


def masked_positions(fraction: float = 0.15, *, seed: int = 0) -> SliceFn:
    """The slice of a fixed random ``fraction`` of each row's maskable positions (at least one per row that has
    any): ``round(fraction * n)`` of the row's ``n`` valid positions, uniformly without replacement. The draw is
    fixed by ``seed`` and the batch's shape and valid positions, so the clean pass and every ablated copy (and a
    rerun) mask the same positions. Every position of every slice is replaced by the mask token in the input
    (all of them, not BERT's 80/10/10) and its original token is the target.

    Example: ``slices={"masked": masked_positions(0.15, seed=0)}`` for an encoder.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise InputError(f"fraction must be a number in (0, 1] (the share of valid positions masked); got "
                         f"{fraction!r}.")
    if not is_integer(seed):
        raise InputError(f"seed must be an integer; got {seed!r}.")

    def mask(batch: TokenBatch) -> Tensor:
        maskable = maskable_positions(batch)
        generator = torch.Generator().manual_seed(seed)
        scores = torch.rand(batch.shape, generator=generator).to(maskable.device).masked_fill(~maskable, 2.0)
        ranks = scores.argsort(-1).argsort(-1)
        n_valid = maskable.sum(-1, keepdim=True)
        n_masked = torch.where(n_valid > 0, (n_valid * fraction).round().clamp(min=1), 0)
        return (ranks < n_masked) & maskable

    return mask


def earlier_occurrence_mask(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
    """Queries whose current token occurred at an earlier valid position of the row (the document):
    induction targets, whose next token an induction head can copy.

    Example: on ``[BOS] a b a b`` the third and fourth tokens (``a``, ``b``) are marked but the last is not
    (it has no next token).
    """
    tokens, counted = batch.tokens, predicted_positions(batch)
    valid = batch.valid.bool() if batch.attention_mask is None else batch.valid.bool() & batch.attention_mask.bool()
    n = tokens.shape[1]
    earlier = torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril(-1)
    same = (tokens[:, :, None] == tokens[:, None, :]) & earlier & valid[:, None, :]
    return same.any(-1) & counted


def first_occurrence_mask(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
    """Queries whose current token did not occur earlier in the row: the complement of
    :func:`earlier_occurrence_mask` among the predicted positions (the control slice of natural text)."""
    return predicted_positions(batch) & ~earlier_occurrence_mask(batch)


def repeated_half(seq_len: int) -> SliceFn:
    """The slice of the second copy of ``[BOS] X X`` (X of ``seq_len`` tokens, from
    :func:`probes.repeated_random_tokens`): queries on the second copy that have a next token, i.e. the
    ``seq_len - 1`` positions where copying from the first copy predicts the next token.

    Example: ``slices={"repeated_half": repeated_half(50)}``.
    """
    if not is_integer(seq_len) or seq_len < 2:
        raise InputError(f"seq_len must be an integer >= 2 (the length of the repeated block); got {seq_len!r}.")

    def mask(batch: TokenBatch) -> Tensor:
        n_pos = batch.tokens.shape[1]
        if n_pos not in (2 * seq_len, 2 * seq_len + 1):
            raise InputError(
                f"repeated_half({seq_len}) expects rows of [BOS] X X with X of {seq_len} tokens "
                f"({2 * seq_len} or {2 * seq_len + 1} positions); got {n_pos}. Pass the seq_len the batches were made "
                f"with."
            )
        out = torch.zeros(batch.tokens.shape, dtype=torch.bool, device=batch.tokens.device)
        out[:, n_pos - seq_len : n_pos - 1] = True
        return out & predicted_positions(batch)

    return mask
