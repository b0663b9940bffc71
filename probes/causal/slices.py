"""Slices of positions an ablation is measured on: boolean masks over *query* positions.

A slice mask ``[batch pos]`` marks the positions ``q`` whose next-token loss is counted: the loss of
predicting ``tokens[:, q + 1]`` from the logits at ``q``. So the last position is never in a slice, and neither
is a position whose own token or next token is invalid (BOS/CLS/SEP, padding: ``TokenBatch.valid``).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from jaxtyping import Bool
from torch import Tensor

from probes.core.batch import TokenBatch
from probes.core.errors import InputError

SliceFn = Callable[[TokenBatch], Bool[Tensor, "batch pos"]]
"""Maps a batch to the query positions whose next-token loss is counted."""


def predicted_positions(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
    """Positions ``q`` whose token and next token are both valid: every query a slice may count."""
    valid = batch.valid.bool()
    if batch.attention_mask is not None:
        valid = valid & batch.attention_mask.bool()
    out = torch.zeros_like(valid)
    out[:, :-1] = valid[:, :-1] & valid[:, 1:]
    return out


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
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 2:
        raise InputError(f"seq_len must be an integer >= 2 (the length of the repeated block); got {seq_len!r}.")

    def mask(batch: TokenBatch) -> Tensor:
        n_pos = batch.tokens.shape[1]
        if n_pos not in (2 * seq_len, 2 * seq_len + 1):
            raise InputError(
                f"repeated_half({seq_len}) expects rows of [BOS] X X with X of {seq_len} tokens "
                f"({2 * seq_len} or {2 * seq_len + 1} positions); got {n_pos}. Pass the seq_len the batches were made with."
            )
        out = torch.zeros(batch.tokens.shape, dtype=torch.bool, device=batch.tokens.device)
        out[:, n_pos - seq_len : n_pos - 1] = True
        return out & predicted_positions(batch)

    return mask
