"""Documents -> padded token batches: framing, masks, no mixing of documents, bounded batches."""

from __future__ import annotations

import torch

import probes
from probes.text.text_batches import text_token_batches


def test_encoder_batches_are_framed_and_masked(minilm):
    info = probes.ModelInfo.of(minilm)
    docs = ["the cat sat on the mat " * 10, "a short one with enough tokens in it to keep", "tiny"]
    batches = list(text_token_batches(docs, minilm.tokenizer, info, seq_len=16, batch_size=3, min_tokens=5))
    rows = torch.cat([b.tokens for b in batches]), torch.cat([b.valid for b in batches])
    tokens, valid = rows
    cls, sep = minilm.tokenizer.cls_token_id, minilm.tokenizer.sep_token_id
    assert bool((tokens[:, 0] == cls).all()) and not bool(valid[:, 0].any())
    first_doc = minilm.tokenizer.encode(docs[0], add_special_tokens=False)
    windows = [first_doc[i : i + 14] for i in range(0, len(first_doc), 14)]
    kept = [w for w in windows if len(w) >= 5]  # a tail shorter than min_tokens is dropped
    n_windows = len(kept)
    recovered = [tokens[i][valid[i]].tolist() for i in range(n_windows)]
    assert recovered == kept  # windows of one document, in order
    for batch in batches:
        lengths = batch.attention_mask.sum(1)
        for i, length in enumerate(lengths):
            assert batch.tokens[i, length - 1] == sep
    assert len(batches[-1].tokens) <= 3 and tokens.shape[1] <= 16
    # "tiny" has fewer than min_tokens tokens and is dropped
    assert n_windows + 1 == tokens.shape[0]


def test_batches_feed_the_runner(minilm):
    info = probes.ModelInfo.of(minilm)
    docs = [d.text for d in probes.text.corpora.iter_documents("wikipedia-excerpt", max_documents=6, min_chars=200)]
    batches = list(text_token_batches(docs, minilm.tokenizer, info, seq_len=32, batch_size=4, max_batches=2))
    assert len(batches) == 2
    (result,) = probes.run_probes(minilm, [probes.HeadScoreProbe()], batches, progress=False)
    assert result.rows == int(sum(b.valid.sum() for b in batches))
