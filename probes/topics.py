"""Topics of a real corpus with gensim LDA, a word -> topic assignment, and its mapping onto model tokens.

Pipeline: :func:`fit_lda_topics` (stop words removed, ``filter_extremes``) ->
:func:`assign_word_topics` (top topic above a probability threshold, or the top fraction of
words per topic) -> :func:`token_topic_labels` (which vocabulary ids of a model carry each word's
topic: BPE leading-space and capitalised variants, WordPiece lower case; words that are not a
single token are reported, not guessed).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from probes.atomic import atomic_directory
from probes.corpora import Document
from probes.errors import ConfigError, InputError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LdaTopicConfig:
    """Settings of the LDA topic model and of the word -> topic assignment."""

    n_topics: int = 20
    passes: int = 5
    iterations: int = 100
    chunksize: int = 500
    alpha: Literal["symmetric", "asymmetric", "auto"] = "symmetric"
    no_below: int = 5
    no_above: float = 0.3
    keep_n: int = 20000
    min_word_length: int = 3
    seed: int = 0
    assignment: Literal["threshold", "top_fraction"] = "threshold"
    threshold: float = 0.6
    top_fraction: float = 0.05

    def __post_init__(self) -> None:
        for name in ("n_topics", "passes", "iterations", "chunksize", "keep_n", "min_word_length", "no_below"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
        if self.n_topics < 2:
            raise ConfigError(f"n_topics must be >= 2 to compare same vs different topics; got {self.n_topics}.")
        for name in ("no_above", "threshold", "top_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name} must be a number in (0, 1]; got {value!r}.")
        if not 0 < self.no_above <= 1:
            raise ConfigError(f"no_above is a fraction of documents in (0, 1]; got {self.no_above}.")
        if self.assignment not in ("threshold", "top_fraction"):
            raise ConfigError(f"assignment must be 'threshold' or 'top_fraction'; got {self.assignment!r}.")
        if not 0 < self.threshold <= 1 or not 0 < self.top_fraction <= 1:
            raise ConfigError(
                f"threshold and top_fraction must lie in (0, 1]; got {self.threshold} and {self.top_fraction}."
            )


def words_of(text: str, min_length: int = 3) -> list[str]:
    """Lower-cased alphabetic words of ``text`` without gensim's English stop words."""
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess

    return [w for w in simple_preprocess(text, min_len=min_length, max_len=30) if w not in STOPWORDS and w.isalpha()]


@dataclass
class LdaTopics:
    """A trained gensim LDA model with its dictionary and the config that made it."""

    lda: Any
    dictionary: Any
    config: LdaTopicConfig
    n_documents: int

    def topic_word_probabilities(self) -> np.ndarray:
        """phi[topic, word id]: each topic's distribution over the dictionary."""
        return self.lda.get_topics()

    def top_words(self, topic: int, n: int = 10) -> list[str]:
        return [word for word, _ in self.lda.show_topic(topic, topn=n)]

    def save(self, folder: str | Path) -> Path:
        """Save into ``folder`` (replaced atomically); reload with :meth:`load`."""
        with atomic_directory(folder) as tmp:
            self.lda.save(str(tmp / "lda.gensim"))
            self.dictionary.save(str(tmp / "dictionary.gensim"))
            (tmp / "topic_config.json").write_text(
                json.dumps({"config": asdict(self.config), "n_documents": self.n_documents}), encoding="utf-8"
            )
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> "LdaTopics":
        from gensim.corpora import Dictionary
        from gensim.models import LdaModel

        folder = Path(folder)
        if not (folder / "topic_config.json").is_file():
            raise InputError(f"{folder} is not a saved topic model (no topic_config.json); train one first.")
        meta = json.loads((folder / "topic_config.json").read_text(encoding="utf-8"))
        return cls(LdaModel.load(str(folder / "lda.gensim")), Dictionary.load(str(folder / "dictionary.gensim")),
                   LdaTopicConfig(**meta["config"]), int(meta["n_documents"]))


def _document_text(document: Any) -> str:
    if isinstance(document, Document):
        return document.text
    if isinstance(document, str):
        return document
    raise InputError(f"Each document must be a probes.Document or a str; got {type(document).__name__}.")


def fit_lda_topics(documents: Iterable[Document | str], config: LdaTopicConfig = LdaTopicConfig()) -> LdaTopics:
    """Fit LDA on ``documents`` (bag of words, stop words removed, rare/common words filtered).

    Example: ``fit_lda_topics(iter_documents("wikipedia-excerpt", unit="article"), LdaTopicConfig(n_topics=10))``.
    """
    from gensim.corpora import Dictionary
    from gensim.models import LdaModel

    if not isinstance(config, LdaTopicConfig):
        raise ConfigError(f"config must be a probes.LdaTopicConfig; got {type(config).__name__}.")
    if isinstance(documents, (str, bytes)) or not isinstance(documents, Iterable):
        raise InputError(
            f"documents must be an iterable of Document or str (one per document); got {type(documents).__name__}. "
            f"Wrap a single text in a list, or pass iter_documents(...)."
        )
    texts = [words_of(_document_text(d), config.min_word_length) for d in documents]
    texts = [t for t in texts if t]
    if len(texts) < 2:
        raise InputError(f"LDA needs at least 2 non-empty documents; the corpus gave {len(texts)}.")
    dictionary = Dictionary(texts)
    dictionary.filter_extremes(no_below=min(config.no_below, len(texts)), no_above=config.no_above,
                               keep_n=config.keep_n)
    if len(dictionary) < config.n_topics:
        raise InputError(
            f"After filter_extremes only {len(dictionary)} words remain, fewer than n_topics={config.n_topics}. "
            f"Use a larger corpus or lower no_below."
        )
    bows = [dictionary.doc2bow(t) for t in texts]
    lda = LdaModel(bows, id2word=dictionary, num_topics=config.n_topics, passes=config.passes,
                   iterations=config.iterations, chunksize=config.chunksize, alpha=config.alpha, random_state=config.seed)
    log.info("trained LDA: %d topics, %d words, %d documents", config.n_topics, len(dictionary), len(texts))
    return LdaTopics(lda, dictionary, config, len(texts))


def assign_word_topics(topic_model: LdaTopics) -> dict[str, int]:
    """word -> topic under the config's rule.

    ``threshold``: p(topic | word) = phi[t, w] / sum_t phi[t, w] (uniform topic prior); a word gets
    its top topic when that probability is at least ``threshold``. ``top_fraction``: each topic
    claims its top ``top_fraction`` of the dictionary by phi[t, w]; words claimed by several topics
    are dropped.
    """
    config = topic_model.config
    phi = topic_model.topic_word_probabilities()
    words = [topic_model.dictionary[i] for i in range(phi.shape[1])]
    if config.assignment == "threshold":
        posterior = phi / phi.sum(axis=0, keepdims=True)
        best = posterior.argmax(axis=0)
        keep = posterior.max(axis=0) >= config.threshold
        return {words[i]: int(best[i]) for i in np.nonzero(keep)[0]}
    n_top = max(1, int(round(config.top_fraction * phi.shape[1])))
    claims: dict[int, set[int]] = {}
    for topic in range(phi.shape[0]):
        for index in np.argsort(-phi[topic])[:n_top]:
            claims.setdefault(int(index), set()).add(topic)
    return {words[i]: next(iter(topics)) for i, topics in claims.items() if len(topics) == 1}


@dataclass(frozen=True)
class TokenTopicMap:
    """``labels[token id]`` = topic of that vocabulary entry, -1 when it carries no (or an ambiguous) topic."""

    labels: Int[Tensor, "d_vocab"]
    n_words: int
    n_words_mapped: int
    n_multi_token_words: int
    n_conflicting_tokens: int

    @property
    def coverage(self) -> float:
        """Fraction of topic words that landed on at least one single token."""
        return self.n_words_mapped / self.n_words if self.n_words else 0.0


def word_variants(word: str) -> list[str]:
    """Surface forms whose single token carries the word: bare, leading space, capitalised."""
    forms = [word, " " + word, word.capitalize(), " " + word.capitalize()]
    return list(dict.fromkeys(forms))


def token_topic_labels(word_topics: Mapping[str, int], tokenizer: Any, d_vocab: int) -> TokenTopicMap:
    """Label the vocabulary ids of ``tokenizer`` with the topics of the words they spell.

    A word contributes each variant (see :func:`word_variants`) that encodes to exactly one token.
    A token claimed by words of different topics is marked -1 (ambiguous). Words with no
    single-token variant are counted in ``n_multi_token_words`` and left out.
    """
    if not isinstance(word_topics, Mapping):
        raise InputError(
            f"word_topics must map word -> topic (e.g. assign_word_topics(...)); got {type(word_topics).__name__}."
        )
    if not word_topics:
        raise InputError("The word -> topic assignment is empty; lower the threshold or train more topics.")
    bad = next(((w, t) for w, t in word_topics.items()
                if not isinstance(w, str) or isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0),
               None)
    if bad is not None:
        raise InputError(f"word_topics must map str words to topic ids >= 0; got {bad[0]!r} -> {bad[1]!r}.")
    if not callable(getattr(tokenizer, "encode", None)):
        raise InputError(
            f"tokenizer must have encode(text, add_special_tokens=False) (a Hugging Face tokenizer such as "
            f"model.tokenizer); got {type(tokenizer).__name__}."
        )
    if isinstance(d_vocab, bool) or not isinstance(d_vocab, int) or d_vocab < 1:
        raise InputError(f"d_vocab must be a positive integer (the model's vocabulary size); got {d_vocab!r}.")
    labels = torch.full((d_vocab,), -1, dtype=torch.long)
    owner: dict[int, int] = {}
    conflicts: set[int] = set()
    mapped = multi = 0
    for word, topic in word_topics.items():
        hit = False
        for form in word_variants(word):
            ids = tokenizer.encode(form, add_special_tokens=False)
            if len(ids) != 1 or not 0 <= ids[0] < d_vocab:
                continue
            hit = True
            token = ids[0]
            if owner.setdefault(token, topic) != topic:
                conflicts.add(token)
        mapped += hit
        multi += not hit
    for token, topic in owner.items():
        labels[token] = -1 if token in conflicts else topic
    if not (labels >= 0).any():
        raise InputError(
            "None of the topic words is a single token of this model's vocabulary; the topic probes "
            "would have nothing to measure. Use more topics/words or a model with a word-level vocabulary."
        )
    return TokenTopicMap(labels, len(word_topics), mapped, multi, len(conflicts))
