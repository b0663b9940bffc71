"""gensim LDA topics: a corpus with known topics is recovered; mapping onto real tokenizers."""

from __future__ import annotations

import random

import pytest

from probes import ConfigError, InputError
from probes.topics import LdaTopicConfig, LdaTopics, assign_word_topics, token_topic_labels, fit_lda_topics

ANIMALS = ["tiger", "zebra", "monkey", "rabbit", "donkey", "giraffe", "camel", "beaver"]
METALS = ["copper", "silver", "nickel", "cobalt", "bronze", "platinum", "tungsten", "zinc"]


def two_topic_corpus(n_docs: int = 60, length: int = 40, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(ANIMALS if i % 2 else METALS) for _ in range(length)) for i in range(n_docs)]


@pytest.fixture(scope="module")
def two_topics() -> LdaTopics:
    config = LdaTopicConfig(n_topics=2, passes=10, no_below=1, no_above=1.0, threshold=0.9, seed=0)
    return fit_lda_topics(two_topic_corpus(), config)


def test_lda_recovers_known_topics(two_topics):
    assignment = assign_word_topics(two_topics)
    assert set(assignment) == set(ANIMALS) | set(METALS)
    assert len({assignment[w] for w in ANIMALS}) == 1 and len({assignment[w] for w in METALS}) == 1
    assert assignment[ANIMALS[0]] != assignment[METALS[0]]


def test_top_fraction_assignment(two_topics):
    config = LdaTopicConfig(n_topics=2, passes=10, no_below=1, no_above=1.0, assignment="top_fraction",
                         top_fraction=0.25, seed=0)
    model = LdaTopics(two_topics.lda, two_topics.dictionary, config, two_topics.n_documents)
    assignment = assign_word_topics(model)
    assert len(assignment) == 8  # each topic claims the top 4 of 16 words, no overlap
    topics = {assignment[w] for w in assignment if w in ANIMALS}
    assert len(topics) == 1


def test_save_and_load_gives_the_same_assignment(two_topics, tmp_path):
    two_topics.save(tmp_path / "topics")
    loaded = LdaTopics.load(tmp_path / "topics")
    assert assign_word_topics(loaded) == assign_word_topics(two_topics)
    assert loaded.config == two_topics.config


def test_mapping_onto_wordpiece_and_bpe(two_topics, minilm):
    assignment = assign_word_topics(two_topics)
    mapping = token_topic_labels(assignment, minilm.tokenizer, minilm.cfg.d_vocab)
    tiger = minilm.tokenizer.convert_tokens_to_ids("tiger")
    assert mapping.labels[tiger] == assignment["tiger"]
    assert mapping.n_words == 16 and mapping.n_words_mapped + mapping.n_multi_token_words == 16
    assert 0 < mapping.coverage <= 1


def test_conflicting_and_missing_words(minilm):
    # uncased WordPiece: "river" and "River" are the same token, claimed by two topics -> ambiguous
    with pytest.raises(InputError, match="None of the topic words"):
        token_topic_labels({"river": 0, "River": 1}, minilm.tokenizer, minilm.cfg.d_vocab)
    mapping = token_topic_labels({"river": 0, "River": 1, "music": 2}, minilm.tokenizer, minilm.cfg.d_vocab)
    assert mapping.n_conflicting_tokens == 1
    assert int((mapping.labels >= 0).sum()) == 1
    with pytest.raises(InputError, match="None of the topic words"):
        token_topic_labels({"qzxjvkwplm": 0}, minilm.tokenizer, minilm.cfg.d_vocab)


@pytest.mark.parametrize("changes", [{"n_topics": 1}, {"no_above": 0.0}, {"threshold": 1.5}, {"assignment": "x"}])
def test_bad_topic_settings(changes):
    with pytest.raises(ConfigError):
        LdaTopicConfig(**changes)


def test_too_small_corpus():
    with pytest.raises(InputError, match="at least 2"):
        fit_lda_topics(["the and of"], LdaTopicConfig())
