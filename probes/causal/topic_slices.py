"""Slices of natural text by topic: queries whose next token's topic already appeared in the row, and those whose
topic did not (Li et al.'s claim read causally: heads that attend within a topic should matter more for tokens
whose topic the context already shows).

A slice marks query positions ``q`` (the loss of predicting ``tokens[:, q + 1]``, as in
:mod:`probes.causal.slices`). Only targets with a topic label count (``labels[token] >= 0``); unlabelled
targets are in neither slice.
"""

from __future__ import annotations

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from probes.causal.slices import SliceFn, predicted_positions
from probes.core.batch import TokenBatch
from probes.core.errors import InputError


def _seen_and_labelled(batch: TokenBatch, labels: Int[Tensor, " vocab"]) -> tuple[Tensor, Tensor]:
    """``(seen, labelled)`` [batch pos]: the next token has a topic label, and that topic labels some valid token
    at or before the query."""
    if labels.ndim != 1 or labels.dtype.is_floating_point:
        raise InputError(f"Topic labels must be an integer vector [d_vocab] (-1 = no topic); got dtype {labels.dtype} "
                         f"and shape {tuple(labels.shape)}. Use probes.token_topic_labels(...).labels.")
    if int(batch.tokens.max()) >= labels.shape[0]:
        raise InputError(f"Token id {int(batch.tokens.max())} has no topic label: the labels cover {labels.shape[0]} "
                         f"ids. Build them with the model's d_vocab.")
    labels = labels.to(batch.tokens.device)
    valid = batch.valid.bool()
    if batch.attention_mask is not None:
        valid = valid & batch.attention_mask.bool()
    own = torch.where(valid, labels[batch.tokens], -1)  # [batch pos]
    target = own.roll(-1, 1)
    target[:, -1] = -1
    n = own.shape[1]
    upto = torch.ones(n, n, dtype=torch.bool, device=own.device).tril()  # key p <= query q
    same = (own[:, None, :] == target[:, :, None]) & upto & (own[:, None, :] >= 0)
    return same.any(-1), target >= 0


def topic_seen_slice(labels: Int[Tensor, " vocab"]) -> SliceFn:
    """Queries whose next token's topic labels a valid token at or before the query.

    Example: with ``labels`` giving ``a`` and ``c`` topic 0 and ``b`` topic 1, on ``[BOS] a b c`` the query at
    ``b`` (predicting ``c``, topic 0, already shown by ``a``) is marked; the query at ``a`` (predicting ``b``) is
    not.
    """

    def mask(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
        seen, labelled = _seen_and_labelled(batch, labels)
        return seen & labelled & predicted_positions(batch)

    return mask


def topic_unseen_slice(labels: Int[Tensor, " vocab"]) -> SliceFn:
    """Queries whose next token has a topic that no valid token at or before the query has: the control slice
    of :func:`topic_seen_slice`."""

    def mask(batch: TokenBatch) -> Bool[Tensor, "batch pos"]:
        seen, labelled = _seen_and_labelled(batch, labels)
        return ~seen & labelled & predicted_positions(batch)

    return mask
