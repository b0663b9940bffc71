"""The per-token loss a head ablation measures, and its sums on slices without full-vocabulary logits everywhere.

Two kinds, chosen from the model's direction (:func:`default_loss`): ``"next"`` (causal models) is the loss of
predicting ``tokens[:, q + 1]`` from position ``q``; ``"masked"`` (encoders, ``ModelInfo.causal is False``)
replaces every position of the slices by the tokenizer's mask token and predicts the original token at the same
position. :class:`LossInputs` holds what the model reads and what it must predict.

Sums are read at the union of the slices only, in chunks of at most :data:`LOGIT_CHUNK_BYTES` of float32 logits,
either from full logits (:func:`token_losses_from_logits`) or from the unembedding's input
(:func:`token_losses_from_unembed_input`, which applies ``model.unembed`` at those positions only);
:func:`slice_sums` adds them up per slice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechprobe import forward
from mechprobe.validation import is_integer
from probes.causal.slices import maskable_positions, predicted_positions
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel

LOSS_KINDS = ("next", "masked")

LOGIT_CHUNK_BYTES = 64 * 2**20
"""Float32 logits computed at once when summing the loss: ``LOGIT_CHUNK_BYTES / (4 d_vocab)`` positions."""


def default_loss(info: ModelInfo) -> str:
    """``"masked"`` for an encoder (``info.causal is False``), else ``"next"``."""
    return "masked" if info.causal is False else "next"


def check_loss(loss: str) -> str:
    if loss not in LOSS_KINDS:
        raise ConfigError(f"Unknown loss {loss!r}; use 'next' (next-token, causal models) or 'masked' (masked-token, "
                          f"encoders), or leave it out to take it from the model's attention direction.")
    return loss


def counted_positions(batch: TokenBatch, loss: str) -> Bool[Tensor, "batch pos"]:
    """Positions a slice may mark under ``loss``: a valid next token (``next``) or a valid own token (``masked``)."""
    return predicted_positions(batch) if loss == "next" else maskable_positions(batch)


def mask_token_id(model: HookedModel) -> int:
    """The id of the model's tokenizer's mask token, else :class:`ModelError`."""
    token = getattr(getattr(model, "tokenizer", None), "mask_token_id", None)
    if not is_integer(token):
        raise ModelError("The masked-token loss replaces the slice positions by the mask token, but this model's "
                         "tokenizer has no mask_token_id. Give the model a tokenizer with a mask token, or measure "
                         "the next-token loss with loss='next'.")
    return token


@dataclass(frozen=True)
class LossInputs:
    """What the model reads (``tokens``: the batch, with every slice position masked for ``masked``) and what the
    loss at each position predicts (``targets``); ``masks[s]`` the positions of slice ``s``."""

    loss: str
    tokens: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]
    masks: Bool[Tensor, "slice batch pos"]

    @classmethod
    def of(cls, model: HookedModel, batch: TokenBatch, masks: Bool[Tensor, "slice batch pos"], loss: str) -> LossInputs:
        """The inputs of ``batch`` with slice ``masks`` under ``loss`` (``model`` gives the mask token)."""
        if loss == "next":
            return cls(loss, batch.tokens, batch.tokens.roll(-1, 1), masks)
        masked = batch.tokens.masked_fill(masks.any(0), mask_token_id(model))
        return cls(loss, masked, batch.tokens, masks)


def _nll(logits: Float[Tensor, "n d_vocab"], targets: Int[Tensor, " n"]) -> Float[Tensor, " n"]:
    logits = logits.float()
    return (logits.logsumexp(-1) - logits.gather(-1, targets[:, None])[:, 0]).double()


def _chunked_nll(logits_of: Callable[[slice], Tensor], targets: Int[Tensor, " n"], d_vocab: int) -> Float[Tensor, " n"]:
    """``-log softmax`` of ``logits_of(chunk)`` at ``targets[chunk]``, over chunks of the ``n`` positions."""
    step = max(1, LOGIT_CHUNK_BYTES // (4 * d_vocab))
    out = [_nll(logits_of(slice(start, start + step)), targets[start : start + step])
           for start in range(0, targets.shape[0], step)]
    return torch.cat(out) if out else targets.new_zeros(0, dtype=torch.float64)


def slice_sums(nll: Float[Tensor, "copy token"], inputs: LossInputs) -> Float[Tensor, "copy slice"]:
    """Per-copy sums of the per-token losses at the union of the slices (in ``nonzero`` order) on each slice."""
    return torch.einsum("ct,st->cs", nll, inputs.masks[:, inputs.masks.any(0)].double())


def token_losses_from_logits(logits: Float[Tensor, "row pos d_vocab"], inputs: LossInputs, copies: int
                             ) -> Float[Tensor, "copy token"]:
    """The loss at each position of the union of the slices (``nonzero`` order) for each of the ``copies`` repeats
    of the batch in ``logits``."""
    union = inputs.masks.any(0)
    rows, pos = union.nonzero(as_tuple=True)
    n_rows, n_pos = union.shape
    if logits.ndim != 3 or tuple(logits.shape[:2]) != (copies * n_rows, n_pos):
        raise ModelError(f"Head ablation reads logits [batch pos d_vocab] of {copies * n_rows} x {n_pos} positions "
                         f"from the model's output; got "
                         f"{tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__}.")
    by_copy = logits.view(copies, n_rows, n_pos, -1)
    n = rows.shape[0]

    def logits_of(part: slice) -> Tensor:
        index = torch.arange(copies * n, device=rows.device)[part]
        return by_copy[index // n, rows[index % n], pos[index % n]]

    return _chunked_nll(logits_of, inputs.targets[union].repeat(copies), logits.shape[-1]).view(copies, n)


def token_losses_from_unembed_input(unembed: Any, hidden: Float[Tensor, "row pos d_model"], inputs: LossInputs,
                                    copies: int, d_vocab: int) -> Float[Tensor, "copy token"]:
    """:func:`token_losses_from_logits` of ``unembed(hidden)``, applying ``unembed`` at those positions only."""
    union = inputs.masks.any(0)
    n_rows, n_pos = union.shape
    if not isinstance(hidden, Tensor) or hidden.ndim != 3 or tuple(hidden.shape[:2]) != (copies * n_rows, n_pos):
        got = tuple(hidden.shape) if isinstance(hidden, Tensor) else type(hidden).__name__
        raise ModelError(f"The unembedding's input should be [batch pos d_model] with {copies * n_rows} x {n_pos} "
                         f"positions; got {got}.")
    picked = hidden.reshape(copies, n_rows, n_pos, -1)[:, union]  # [copy, token, d_model]
    flat = picked.reshape(-1, picked.shape[-1])
    targets = inputs.targets[union].repeat(copies)
    return _chunked_nll(lambda part: forward.run(unembed, flat[part][None])[0], targets, d_vocab).view(copies, -1)
