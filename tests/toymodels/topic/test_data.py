"""LDA documents and masking: layout, statistics, determinism, speed, bad settings."""

from __future__ import annotations

import time

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.topic.data import LDAConfig, MaskingConfig, mask_documents, sample_documents


def test_vocabulary_layout_and_documents():
    config = LDAConfig(n_topics=3, words_per_topic=4, min_len=5, max_len=9)
    assert (config.n_words, config.mask_id, config.pad_id, config.vocab_size) == (12, 12, 13, 14)
    assert config.token_topics().tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [-1, -1]
    docs = sample_documents(config, 200, torch.Generator().manual_seed(0))
    assert docs.tokens.shape == (200, int(docs.lengths.max()))
    assert int(docs.lengths.min()) >= 5 and int(docs.lengths.max()) <= 9
    words = docs.is_word
    assert (docs.is_word.sum(-1) == docs.lengths).all()
    assert (docs.tokens[~words] == config.pad_id).all()
    # every word lies in the topic it was drawn from: topic = word // words_per_topic
    assert (docs.tokens[words] // 4 == docs.word_topics[words]).all()
    torch.testing.assert_close(docs.theta.sum(-1), torch.ones(200))


def test_topic_frequencies_follow_theta_and_dirichlet_mean():
    config = LDAConfig(n_topics=4, words_per_topic=3, alpha=0.5, min_len=400, max_len=400)
    docs = sample_documents(config, 300, torch.Generator().manual_seed(1))
    counts = torch.nn.functional.one_hot(docs.word_topics, 4).float().mean(1)
    assert (counts - docs.theta).abs().max() < 0.12
    assert docs.theta.mean(0).sub(0.25).abs().max() < 0.05   # E[theta] = 1/T
    # Var[theta_t] = (1/T)(1 - 1/T) / (T alpha + 1) = 0.0625 for T = 4, alpha = 0.5
    assert float(docs.theta.var(0).mean()) == pytest.approx(0.0625, rel=0.2)
    sparse = sample_documents(LDAConfig(alpha=0.05), 300, torch.Generator().manual_seed(1))
    assert float(sparse.theta.max(-1).values.mean()) > 0.7   # small alpha -> few topics per document


def test_fixed_length_and_determinism():
    config = LDAConfig()
    a = sample_documents(config, 20, torch.Generator().manual_seed(3), length=17)
    b = sample_documents(config, 20, torch.Generator().manual_seed(3), length=17)
    assert a.tokens.shape == (20, 17) and a.is_word.all()
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens, sample_documents(config, 20, torch.Generator().manual_seed(4), length=17).tokens)


def test_masking_fractions():
    config = LDAConfig()
    docs = sample_documents(config, 400, torch.Generator().manual_seed(0))
    masked = mask_documents(docs, MaskingConfig(), torch.Generator().manual_seed(1), lda=config)
    assert not masked.selected[~docs.is_word].any()
    assert float(masked.selected.sum() / docs.is_word.sum()) == pytest.approx(0.15, abs=0.01)
    selected = masked.selected
    assert float((masked.inputs[selected] == config.mask_id).float().mean()) == pytest.approx(0.8, abs=0.02)
    changed = (masked.inputs != masked.targets) & (masked.inputs != config.mask_id)
    # random replacements: 10% of selected, minus the 1/100 that draw the same word
    assert float(changed[selected].float().mean()) == pytest.approx(0.1 * 0.99, abs=0.015)
    assert torch.equal(masked.inputs[~selected], docs.tokens[~selected])
    assert torch.equal(masked.targets, docs.tokens)
    assert int(masked.inputs[masked.is_word].max()) <= config.mask_id


def test_documents_cost_time_in_proportion_to_their_number():
    """Sampling and masking are vectorised over documents: 4,000 take about 10 times what 400 take (~0.5 s on one
    loaded core), not the 100 times of work that grows with the square. Compared with a reference measured in the
    same run (best of 3 each), not with a wall-clock limit that a slower or busier machine would miss."""
    def best_of_three(n_docs: int) -> float:
        times = []
        for repeat in range(3):
            generator = torch.Generator().manual_seed(repeat)
            start = time.perf_counter()
            docs = sample_documents(LDAConfig(), n_docs, generator)
            mask_documents(docs, MaskingConfig(), generator, lda=LDAConfig())
            times.append(time.perf_counter() - start)
        return min(times)

    best_of_three(400)  # warm-up
    assert best_of_three(4000) < 30 * best_of_three(400)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": -1.0}, "alpha"),
        ({"alpha": float("nan")}, "alpha"),
        ({"min_len": 1, "max_len": 5}, "min_len"),
        ({"min_len": 10, "max_len": 5}, "min_len"),
        ({"n_topics": 0}, "n_topics"),
        ({"n_topics": 10, "words_per_topic": 10, "d_vocab": 101}, "does not fit"),
    ],
)
def test_bad_lda_settings(kwargs, message):
    with pytest.raises(ToyConfigError, match=message):
        LDAConfig(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"p_select": 1.5}, "p_select"),
        ({"p_select": 0.0}, "p_select"),
        ({"frac_mask": -0.1, "frac_random": 0.6, "frac_keep": 0.5}, "frac_mask"),
        ({"frac_mask": 0.8, "frac_random": 0.2, "frac_keep": 0.1}, "sum to 1"),
    ],
)
def test_bad_masking_settings(kwargs, message):
    with pytest.raises(ToyConfigError, match=message):
        MaskingConfig(**kwargs)


def test_document_length_below_two_is_rejected():
    with pytest.raises(ToyConfigError, match="length"):
        sample_documents(LDAConfig(), 3, torch.Generator(), length=1)
