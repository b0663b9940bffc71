"""The standard induction protocol: a random block of tokens repeated once, BOS handled explicitly."""

from __future__ import annotations

import torch

from mechprobe.validation import integer, is_integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo


def repeated_random_tokens(
    info: ModelInfo,
    *,
    seq_len: int,
    n_sequences: int,
    generator: torch.Generator,
    prepend_bos: bool | None = None,
) -> TokenBatch:
    """``n_sequences`` rows of ``[BOS] X X`` with X a random block of ``seq_len`` tokens.

    X never contains special tokens, and has no repeated token inside the block when the
    vocabulary allows it, so in the second copy every query's only earlier copy is exactly
    ``seq_len`` positions back: a perfect induction head scores 1.0 and the first block has no
    induction targets at all. ``prepend_bos=None`` prepends the model's BOS (or CLS) when it has
    one; the BOS position is marked invalid (never a query or a target).

    Example: ``repeated_random_tokens(info, seq_len=50, n_sequences=8, generator=torch.Generator().manual_seed(0))``.
    """
    if not is_integer(seq_len) or seq_len < 2:
        raise ConfigError(f"seq_len must be an integer >= 2 (the length of the repeated block); got {seq_len!r}.")
    integer("The number of sequences", n_sequences, 1)
    bos = info.bos_token_id if prepend_bos is None or prepend_bos else None
    if prepend_bos and bos is None:
        raise ConfigError(
            "prepend_bos=True, but the model has no BOS/CLS token id. Pass prepend_bos=None or False."
        )
    total = 2 * seq_len + (bos is not None)
    if total > info.n_ctx:
        raise InputError(
            f"The repeated block needs {total} positions (2 x seq_len {seq_len}"
            f"{' + BOS' if bos is not None else ''}), more than the model's context of {info.n_ctx}. "
            f"Use seq_len <= {(info.n_ctx - (bos is not None)) // 2}."
        )
    allowed = torch.ones(info.d_vocab, dtype=torch.bool)
    allowed[list(info.special_token_ids)] = False
    candidates = allowed.nonzero().squeeze(1)
    if len(candidates) == 0:
        raise InputError("The model's vocabulary has no non-special token to sample from.")
    weights = torch.ones(n_sequences, len(candidates))
    replacement = len(candidates) < seq_len
    block = candidates[torch.multinomial(weights, seq_len, replacement=replacement, generator=generator)]
    tokens = torch.cat([block, block], dim=1)
    valid = torch.ones_like(tokens, dtype=torch.bool)
    if bos is not None:
        tokens = torch.cat([torch.full((n_sequences, 1), bos, dtype=torch.long), tokens], dim=1)
        valid = torch.cat([torch.zeros(n_sequences, 1, dtype=torch.bool), valid], dim=1)
    return TokenBatch(tokens, valid)
