"""gensim LDA topics: a corpus with known topics is recovered, scored on held-out text and incoherent topics
dropped; mapping onto real tokenizers."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import numpy as np
import pytest
from gensim.parsing.preprocessing import STOPWORDS

from probes import ConfigError, InputError
from probes.text.corpora import Document
from probes.text.token_topics import token_topic_labels
from probes.text.topic_coherence import held_out_split, npmi_per_topic
from probes.text.topics import (
    GENERIC_WORDS,
    LdaTopicConfig,
    LdaTopics,
    article_chunks,
    assign_word_topics,
    assign_words_from_phi,
    fit_lda_topics,
)

ANIMALS = ["tiger", "zebra", "monkey", "rabbit", "donkey", "giraffe", "camel", "beaver"]
METALS = ["copper", "silver", "nickel", "cobalt", "bronze", "platinum", "tungsten", "zinc"]


def two_topic_corpus(n_docs: int = 60, length: int = 40, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(ANIMALS if i % 2 else METALS) for _ in range(length)) for i in range(n_docs)]


@pytest.fixture(scope="module")
def two_topics() -> LdaTopics:
    config = LdaTopicConfig(n_topics=2, passes=10, no_below=1, no_above=1.0, assignment="threshold", threshold=0.9,
                            seed=0)
    return fit_lda_topics(two_topic_corpus(), config)


def test_lda_recovers_known_topics(two_topics):
    assignment = assign_word_topics(two_topics)
    assert set(assignment) == set(ANIMALS) | set(METALS)
    assert len({assignment[w] for w in ANIMALS}) == 1 and len({assignment[w] for w in METALS}) == 1
    assert assignment[ANIMALS[0]] != assignment[METALS[0]]
    # The default rule (each topic's top words, shared ones dropped) gives the same answer.
    config = dataclasses.replace(two_topics.config, assignment="top_words", top_words_per_topic=8)
    assert assign_word_topics(dataclasses.replace(two_topics, config=config)) == assignment


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
    assert loaded.held_out_texts == two_topics.held_out_texts and loaded.texts == two_topics.texts


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


class WordTokenizer:
    """Each known word is one id; every other word is the unknown id 0."""

    unk_token_id = 0

    def __init__(self, words: list[str]) -> None:
        self.ids = {w: i + 1 for i, w in enumerate(words)}

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [self.ids.get(w, 0) for w in text.split()]


def test_a_word_read_as_the_unknown_token_labels_nothing():
    tokenizer = WordTokenizer(["tiger", "copper"])
    mapping = token_topic_labels({"tiger": 0, "zebra": 0, "copper": 1}, tokenizer, 3)
    assert mapping.labels.tolist() == [-1, 0, 1]  # "zebra" is unknown: id 0 keeps no topic
    assert mapping.n_words_mapped == 2 and mapping.n_multi_token_words == 1
    with pytest.raises(InputError, match="None of the topic words"):
        token_topic_labels({"zebra": 0, "lion": 1}, tokenizer, 3)


@pytest.mark.parametrize("changes", [{"n_topics": 1}, {"no_above": 0.0}, {"threshold": 1.5}, {"assignment": "x"}])
def test_bad_topic_settings(changes):
    with pytest.raises(ConfigError):
        LdaTopicConfig(**changes)


def test_too_small_corpus():
    with pytest.raises(InputError, match="at least 2"):
        fit_lda_topics(["the and of"], LdaTopicConfig())


# --- topic quality: stop words, coherence, the top-words assignment ---------------------------------------------

PLANTED = LdaTopicConfig(n_topics=2, passes=10, no_below=1, no_above=1.0, seed=0)


def shuffled_word_corpus(n_docs: int = 60, length: int = 40, seed: int = 0) -> list[str]:
    """The planted corpus's words with the topic structure destroyed: every document draws from both lists."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(ANIMALS + METALS) for _ in range(length)) for _ in range(n_docs)]


def reference_npmi(texts: list[list[str]], words: list[str], window: int) -> float:
    """Mean NPMI over ordered pairs of ``words``, counted in every window of ``window`` tokens by nested loops."""
    windows = [set(t[i:i + window]) for t in texts for i in range(max(1, len(t) - window + 1))]
    values = []
    for a in words:
        for b in words:
            if a != b:
                p_a, p_b = (sum(w in win for win in windows) / len(windows) for w in (a, b))
                p_ab = sum(a in win and b in win for win in windows) / len(windows)
                values.append(math.log((p_ab + 1e-12) / (p_a * p_b)) / -math.log(p_ab + 1e-12))
    return sum(values) / len(values)


@pytest.mark.parametrize("window", [10, 3])
def test_coherence_matches_nested_loop_npmi(two_topics, window):
    # Words repeat inside every window here: gensim's own sliding window (4.4) undercounts such
    # windows (0.31 instead of 0.51 at window 10); LdaTopics.coherence counts exactly.
    for topic, score in enumerate(two_topics.coherence(topn=8, window_size=window)):
        expected = reference_npmi(two_topics.texts, two_topics.top_words(topic, 8), window)
        assert score == pytest.approx(expected, abs=1e-9)


def test_coherence_of_planted_topics_beats_shuffled_words(two_topics):
    # Planted: each topic's 8 words fill whole documents, so they share most windows of 10 tokens
    # (NPMI ~ 0.5); shuffled: the same words occur independently of each other (NPMI ~ 0).
    planted = two_topics.coherence(topn=8)
    shuffled = fit_lda_topics(shuffled_word_corpus(), PLANTED).coherence(topn=8)
    assert len(planted) == len(shuffled) == 2
    assert min(planted) > 0.3
    assert max(shuffled) < 0.1
    assert min(planted) > max(shuffled) + 0.2


def test_coherence_is_deterministic_and_survives_save_load(two_topics, tmp_path):
    again = fit_lda_topics(two_topic_corpus(), two_topics.config)
    assert again.coherence(topn=8) == two_topics.coherence(topn=8)
    # Raw documents as texts are tokenized exactly like the stored training texts.
    training, _ = held_out_split(60, two_topics.config.held_out_fraction, two_topics.config.seed)
    documents = two_topic_corpus()
    assert two_topics.coherence(texts=[documents[i] for i in training], topn=8) == two_topics.coherence(topn=8)
    two_topics.save(tmp_path / "topics")
    assert LdaTopics.load(tmp_path / "topics").coherence(topn=8) == two_topics.coherence(topn=8)


def test_coherence_of_assigned_words(two_topics):
    assignment = assign_word_topics(two_topics)
    assert two_topics.coherence(topn=8, word_topics=assignment) == pytest.approx(two_topics.coherence(topn=8))
    one_word = {ANIMALS[0]: assignment[ANIMALS[0]]}  # the other topic has no words -> NaN
    scores = two_topics.coherence(topn=8, word_topics=one_word)
    assert all(math.isnan(s) for s in scores)
    with pytest.raises(InputError, match="dictionary words"):
        two_topics.coherence(word_topics={"qzxjvkwplm": 0})


@pytest.mark.parametrize("arguments", [{"measure": "npmi"}, {"topn": 1}, {"window_size": 1}])
def test_bad_coherence_arguments(two_topics, arguments):
    with pytest.raises(ConfigError):
        two_topics.coherence(**arguments)


def test_generic_and_extra_stop_words_never_become_topic_words():
    rng = random.Random(1)
    noisy = [text + " " + " ".join(rng.choice(["isbn", "known", "new", "including", "Zorp"]) for _ in range(20))
             for text in two_topic_corpus()]
    dropped = {"isbn", "known", "new", "including", "zorp"}
    # Without the lists the noise words are frequent enough to be topic words: the check can fail.
    plain = fit_lda_topics(noisy, dataclasses.replace(PLANTED, generic_stop_words=False))
    assert dropped & {w for t in range(2) for w in plain.top_words(t, 12)}
    model = fit_lda_topics(noisy, dataclasses.replace(PLANTED, extra_stop_words=("Zorp",)))
    assert model.config.extra_stop_words == ("zorp",)
    assert not dropped & set(model.dictionary.token2id)
    assert not dropped & {w for text in model.texts for w in text}
    for rule in ({"assignment": "threshold", "threshold": 0.5}, {"assignment": "top_words", "top_words_per_topic": 8}):
        config = dataclasses.replace(model.config, **rule)
        assert not dropped & set(assign_word_topics(dataclasses.replace(model, config=config)))
    assert GENERIC_WORDS.isdisjoint(STOPWORDS) and "isbn" in GENERIC_WORDS


HAND_PHI = np.array([
    # a     b     c     d     e     f
    [0.40, 0.30, 0.20, 0.05, 0.04, 0.01],   # topic 0, by phi: a b c d e f
    [0.06, 0.35, 0.02, 0.50, 0.03, 0.04],   # topic 1: d b a f e c
    [0.01, 0.02, 0.03, 0.04, 0.10, 0.80],   # topic 2: f e d c b a
])
HAND_WORDS = ["a", "b", "c", "d", "e", "f"]


@pytest.mark.parametrize("n_top, expected", [
    (1, {"a": 0, "d": 1, "f": 2}),
    (2, {"a": 0, "d": 1, "e": 2, "f": 2}),   # b is in the top 2 of topics 0 and 1 -> dropped
    (3, {"c": 0, "e": 2, "f": 2}),           # a (topics 0, 1), b (0, 1), d (1, 2) dropped
    (6, {}),                                 # every topic claims every word
])
def test_top_words_assignment_on_hand_made_phi(n_top, expected):
    config = LdaTopicConfig(assignment="top_words", top_words_per_topic=n_top)
    assert assign_words_from_phi(HAND_PHI, HAND_WORDS, config) == expected
    # top_fraction is the same rule with N as a fraction of the dictionary
    same = LdaTopicConfig(assignment="top_fraction", top_fraction=n_top / len(HAND_WORDS))
    assert assign_words_from_phi(HAND_PHI, HAND_WORDS, same) == expected


def test_threshold_assignment_on_hand_made_phi():
    # p(top topic | word), phi normalised per column: a 0.85, b 0.52, c 0.80, d 0.85, e 0.59, f 0.94
    config = LdaTopicConfig(assignment="threshold", threshold=0.75)
    assert assign_words_from_phi(HAND_PHI, HAND_WORDS, config) == {"a": 0, "c": 0, "d": 1, "f": 2}
    with pytest.raises(InputError, match="one column per word"):
        assign_words_from_phi(HAND_PHI, HAND_WORDS[:5], config)


@pytest.mark.parametrize("changes", [
    {"assignment": "top_word"}, {"top_words_per_topic": 0}, {"top_words_per_topic": 2.5},
    {"top_words_per_topic": True}, {"extra_stop_words": "isbn"}, {"extra_stop_words": ("isbn", "")},
    {"extra_stop_words": (3,)}, {"generic_stop_words": "yes"}, {"alpha": "flat"}, {"no_below": 0},
    {"keep_n": 0}, {"seed": -1}, {"top_fraction": 0.0},
])
def test_bad_quality_settings(changes):
    with pytest.raises(ConfigError):
        LdaTopicConfig(**changes)


def test_config_survives_json_round_trip():
    config = LdaTopicConfig(extra_stop_words=("ibid",), assignment="top_words", top_words_per_topic=7)
    assert LdaTopicConfig(**json.loads(json.dumps(dataclasses.asdict(config)))) == config


# --- held-out text, article chunks, dropping incoherent topics ----------------------------------------------------

def test_held_out_split_is_disjoint_and_seeded():
    training, held_out = held_out_split(100, 0.2, seed=3)
    assert len(held_out) == 20 and sorted(training + held_out) == list(range(100))
    assert held_out_split(100, 0.2, seed=3) == (training, held_out)
    assert held_out_split(100, 0.2, seed=4)[1] != held_out
    assert held_out_split(5, 0.0, seed=0) == ([0, 1, 2, 3, 4], [])
    assert len(held_out_split(3, 0.9, seed=0)[0]) == 2  # at least 2 documents stay to fit
    with pytest.raises(InputError, match="at least 3"):
        held_out_split(2, 0.5, seed=0)


def test_fit_holds_out_the_drawn_documents(two_topics):
    documents = two_topic_corpus()
    training, held_out = held_out_split(60, 0.2, seed=0)
    assert len(two_topics.held_out_texts) == 12 and two_topics.n_documents == len(two_topics.texts) == 48
    assert two_topics.held_out_texts == [documents[i].split() for i in held_out]
    assert two_topics.texts == [documents[i].split() for i in training]
    other = fit_lda_topics(documents, dataclasses.replace(two_topics.config, seed=1))
    assert other.held_out_texts != two_topics.held_out_texts
    everything = fit_lda_topics(documents, dataclasses.replace(two_topics.config, held_out_fraction=0.0))
    assert everything.held_out_texts is None and everything.n_documents == 60
    assert everything.kept_topics() == [0, 1]
    with pytest.raises(InputError, match="held_out_fraction > 0"):
        everything.held_out_coherence()


def test_article_chunks_on_hand_made_articles():
    texts = [["a"] * 3, ["b"] * 2, ["c"] * 4, ["d"], ["e"] * 5, ["f"]]
    titles = ["A", "B", "A", None, "A", "B"]
    # A: 3 + 4 = 7 >= 5 -> chunk, then 5 -> chunk; B: 2 + 1 (shorter last chunk); untitled d alone
    assert article_chunks(texts, titles, 5) == [["a"] * 3 + ["c"] * 4, ["e"] * 5, ["b", "b", "f"], ["d"]]
    assert article_chunks(texts, titles, 0) == texts
    titles = ["x", "y"] * 30
    documents = [Document(text, title, "test") for text, title in zip(two_topic_corpus(), titles)]
    model = fit_lda_topics(documents, dataclasses.replace(PLANTED, chunk_words=100))
    training, _ = held_out_split(60, PLANTED.held_out_fraction, PLANTED.seed)
    # Texts of 40 words: three make a chunk of one title; gensim counts the documents of its first pass.
    n_chunks = sum(math.ceil(sum(titles[i] == title for i in training) / 3) for title in "xy")
    assert model.n_documents == 48 and model.lda.num_updates == n_chunks == 17


def test_npmi_on_a_hand_made_corpus():
    texts = [["a", "b"], ["a"], ["c"]]
    # p(a) = 2/3, p(b) = p(a, b) = 1/3: NPMI = log(1.5) / log(3); z never occurs: -1
    expected = math.log(1.5) / math.log(3)
    assert npmi_per_topic([["a", "b"], ["a", "z"], ["a"]], texts, None) == [pytest.approx(expected), -1.0,
                                                                           pytest.approx(float("nan"), nan_ok=True)]
    # windows of 2 tokens: ["a", "b"] is one window; the same counts
    assert npmi_per_topic([["a", "b"]], texts, 2) == [pytest.approx(expected)]
    with pytest.raises(ConfigError):
        npmi_per_topic([["a", "b"]], texts, 1)


@pytest.mark.parametrize("window", [None, 10, 3])
def test_held_out_npmi_matches_nested_loop_count(two_topics, window):
    scores = two_topics.held_out_coherence(topn=8, window_size=window)
    for topic, score in enumerate(scores):
        words = two_topics.top_words(topic, 8)
        assert score == pytest.approx(reference_npmi(two_topics.held_out_texts, words, window or 10**6), abs=1e-9)
    # Same counts as gensim's c_npmi where both apply (every word occurs in the training texts).
    assert npmi_per_topic([two_topics.top_words(t, 8) for t in range(2)], two_topics.texts, 10) == \
        pytest.approx(two_topics.coherence(topn=8), abs=1e-12)


def scattered_metals_held_out(rng: random.Random) -> list[list[str]]:
    """Held-out text where the animals still co-occur (every paragraph holds all 8) but each metal stands
    alone: the metal topic is noise on this text."""
    animals = [rng.sample(ANIMALS, len(ANIMALS)) for _ in range(10)]
    return animals + [[metal] for metal in METALS for _ in range(2)]


def test_incoherent_topic_gets_no_words(two_topics):
    config = dataclasses.replace(two_topics.config, assignment="top_words", top_words_per_topic=8)
    model = dataclasses.replace(two_topics, config=config, held_out_texts=scattered_metals_held_out(random.Random(0)))
    animal_topic = assign_word_topics(two_topics)["tiger"]
    metal_topic = 1 - animal_topic
    # 26 paragraphs; animals: p = p(a, b) = 10/26 -> NPMI 1; metals: p = 2/26, never together -> the epsilon floor
    p_metal = 2 / 26
    floor = math.log(1e-12 / p_metal ** 2) / -math.log(1e-12)
    scores = model.held_out_coherence(topn=8)
    assert scores[animal_topic] == pytest.approx(1.0) and scores[metal_topic] == pytest.approx(floor)
    assert model.kept_topics() == [animal_topic]
    every = assign_word_topics(dataclasses.replace(model, config=dataclasses.replace(config, min_held_out_npmi=-1.0)))
    assert set(every) == set(ANIMALS) | set(METALS)
    assert assign_word_topics(model) == {w: t for w, t in every.items() if t != metal_topic}
    assert set(assign_word_topics(model)) == set(ANIMALS)
    # A threshold above both topics drops every word.
    strict = dataclasses.replace(model, config=dataclasses.replace(config, min_held_out_npmi=1.0))
    assert assign_word_topics(strict) == {}


def test_model_saved_before_held_out_text_still_loads(two_topics, tmp_path):
    folder = two_topics.save(tmp_path / "old")
    (folder / "held_out_texts.json.gz").unlink()
    meta = json.loads((folder / "topic_config.json").read_text())
    for key in ("held_out_fraction", "chunk_words", "min_held_out_npmi", "eta"):
        del meta["config"][key]
    (folder / "topic_config.json").write_text(json.dumps(meta))
    old = LdaTopics.load(folder)
    # The fields it lacked take the behaviour of its time (nothing held out, one chunk a document).
    assert old.held_out_texts is None and old.config.held_out_fraction == 0.0 and old.config.chunk_words == 0
    assert old.kept_topics() == [0, 1]
    # no topic dropped for coherence: the corpus's known answer, every animal in one topic, every metal in the other
    animal = assign_word_topics(old)["tiger"]
    assert assign_word_topics(old) == {**{w: animal for w in ANIMALS}, **{w: 1 - animal for w in METALS}}
    assert old.coherence(topn=8) == two_topics.coherence(topn=8)
    with pytest.raises(InputError, match="no held-out text"):
        old.held_out_coherence()


@pytest.mark.parametrize("changes", [
    {"held_out_fraction": 1.0}, {"held_out_fraction": -0.1}, {"held_out_fraction": True}, {"chunk_words": -1},
    {"chunk_words": 2.5}, {"min_held_out_npmi": 1.5}, {"min_held_out_npmi": "0"}, {"eta": "asymmetric"},
])
def test_bad_held_out_settings(changes):
    with pytest.raises(ConfigError):
        LdaTopicConfig(**changes)
