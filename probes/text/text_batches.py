"""Stream documents into padded token batches for a model, with bounded memory."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch

from mechprobe.validation import integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.text.corpora import Document


def document_windows(token_ids: list[int], window: int, min_tokens: int) -> Iterator[list[int]]:
    """Consecutive windows of at most ``window`` ids; a last window shorter than ``min_tokens`` is dropped."""
    for start in range(0, len(token_ids), window):
        piece = token_ids[start : start + window]
        if len(piece) >= min_tokens:
            yield piece


def text_token_batches(
    documents: Iterable[Document | str],
    tokenizer: Any,
    info: ModelInfo,
    *,
    seq_len: int = 128,
    batch_size: int = 8,
    min_tokens: int = 16,
    max_batches: int | None = None,
) -> Iterator[TokenBatch]:
    """Tokenize documents one by one and yield right-padded batches of windows from single documents.

    Each row holds one window of one document (windows never mix documents), framed by the model's
    BOS/CLS and, for encoders, SEP; rows hold at most ``min(seq_len, info.n_ctx)`` tokens. Padding
    is masked out (``attention_mask``) and, like the special tokens, is never a query or target for
    the probes. Only the current batch is in memory.

    Example: ``next(text_token_batches(iter_documents(), model.tokenizer, ModelInfo.of(model)))``.
    """
    for name, value, low in (("seq_len", seq_len, 2), ("batch_size", batch_size, 1), ("min_tokens", min_tokens, 1),
                             ("max_batches", 1 if max_batches is None else max_batches, 1)):
        integer(name, value, low)
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Iterable):
        raise InputError(
            f"documents must be an iterable of Document or str; got {type(documents).__name__}. "
            f"Wrap a single text in a list, or pass iter_documents(...)."
        )
    if not isinstance(info, ModelInfo):
        raise InputError(f"info must be probes.ModelInfo.of(model); got {type(info).__name__}.")
    if tokenizer is None:
        raise InputError("The model has no tokenizer; tokenize the text yourself and pass token batches.")
    prefix = [info.bos_token_id] if info.bos_token_id is not None else []
    sep = getattr(tokenizer, "sep_token_id", None)
    suffix = [sep] if info.causal is False and sep is not None else []
    window = min(seq_len, info.n_ctx) - len(prefix) - len(suffix)
    if window < 1:
        raise ConfigError(f"seq_len {seq_len} leaves no room for text after the special tokens.")
    pad = getattr(tokenizer, "pad_token_id", None)
    pad = pad if pad is not None else (info.special_token_ids[0] if info.special_token_ids else 0)
    rows: list[list[int]] = []
    n_batches = 0

    def flush() -> TokenBatch:
        width = max(len(r) for r in rows)
        tokens = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            tokens[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        special = torch.zeros_like(mask, dtype=torch.bool)
        special[:, : len(prefix)] = True
        for i, row in enumerate(rows):
            special[i, len(row) - len(suffix) : len(row)] = True
        return TokenBatch(tokens, mask.bool() & ~special, mask)

    for document in documents:
        text = document.text if isinstance(document, Document) else document
        if not isinstance(text, str):
            raise InputError(f"Each document must be a probes.Document or a str; got {type(document).__name__}.")
        ids = tokenizer.encode(text, add_special_tokens=False)
        for piece in document_windows(ids, window, min_tokens):
            rows.append(prefix + piece + suffix)
            if len(rows) == batch_size:
                yield flush()
                rows = []
                n_batches += 1
                if max_batches is not None and n_batches >= max_batches:
                    return
    if rows:
        yield flush()
