"""Token batches as the runner and the probes see them, validated once at the boundary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from probes.core.errors import InputError
from probes.core.model_info import ModelInfo


@dataclass(frozen=True)
class TokenBatch:
    """Token ids and which positions count.

    ``valid[b, p]`` is False at positions that are neither queries nor targets for any probe
    (padding, BOS/CLS/SEP and other special tokens). ``attention_mask`` (1 = attend) is passed to
    the model when given, for padded batches.
    """

    tokens: Int[Tensor, "batch pos"]
    valid: Bool[Tensor, "batch pos"]
    attention_mask: Int[Tensor, "batch pos"] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.tokens.shape[0]), int(self.tokens.shape[1]))

    def to(self, device: torch.device | str) -> TokenBatch:
        mask = None if self.attention_mask is None else self.attention_mask.to(device)
        return TokenBatch(self.tokens.to(device), self.valid.to(device), mask)


def as_token_batch(batch: Any, info: ModelInfo) -> TokenBatch:
    """Validate ``batch`` (a TokenBatch or an integer tensor [batch, pos]) against the model.

    Special-token positions are marked invalid. Raises :class:`InputError` for a wrong rank,
    dtype, empty batch, ids outside the vocabulary, or sequences longer than the context.
    """
    if isinstance(batch, TokenBatch):
        tokens, valid, attention_mask = batch.tokens, batch.valid, batch.attention_mask
    elif isinstance(batch, Tensor):
        tokens, valid, attention_mask = batch, None, None
    else:
        raise InputError(
            f"A batch must be an integer tensor [batch, pos] or a probes.TokenBatch; got "
            f"{type(batch).__name__}. Convert lists with torch.tensor(ids, dtype=torch.long)."
        )
    if tokens.ndim != 2:
        raise InputError(
            f"Tokens must have rank 2 [batch, pos]; got shape {tuple(tokens.shape)}. "
            f"Add a batch dimension with tokens.unsqueeze(0)."
        )
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool or tokens.dtype.is_complex:
        raise InputError(
            f"Tokens must be integer ids (torch.long); got dtype {tokens.dtype}. Use tokens.long()."
        )
    n_batch, n_pos = tokens.shape
    if n_batch == 0 or n_pos == 0:
        raise InputError(f"The batch is empty (shape {tuple(tokens.shape)}); pass at least one token.")
    if n_pos > info.n_ctx:
        raise InputError(
            f"Sequences of {n_pos} tokens are longer than the model's context of {info.n_ctx}. "
            f"Split or truncate them to at most {info.n_ctx} tokens."
        )
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= info.d_vocab:
        raise InputError(
            f"Token ids must lie in [0, {info.d_vocab}) for this model; got ids from {lo} to {hi}. "
            f"Tokenize with the model's own tokenizer."
        )
    tokens = tokens.long()
    special = torch.zeros_like(tokens, dtype=torch.bool)
    for token_id in info.special_token_ids:
        special |= tokens == token_id
    if valid is None:
        valid = ~special
    else:
        if valid.shape != tokens.shape:
            raise InputError(
                f"`valid` must have the same shape as `tokens`. Got {tuple(valid.shape)} vs "
                f"{tuple(tokens.shape)}."
            )
        valid = valid.bool() & ~special
    if attention_mask is not None:
        if attention_mask.shape != tokens.shape:
            raise InputError(
                f"`attention_mask` must have the same shape as `tokens`. Got "
                f"{tuple(attention_mask.shape)} vs {tuple(tokens.shape)}."
            )
        valid = valid & attention_mask.bool()
    return TokenBatch(tokens, valid, attention_mask)
