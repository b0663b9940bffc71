"""Topics of a real corpus with gensim LDA, a word -> topic assignment, and its mapping onto model tokens.

Pipeline: :func:`fit_lda_topics` (gensim's stop words and :data:`GENERIC_WORDS` removed, a seeded
fraction of the documents held out, the rest grouped into chunks of one article, ``filter_extremes``)
-> :func:`assign_word_topics` (top topic above a probability threshold, or each topic's top words with
words claimed by several topics dropped; topics incoherent on the held-out text get no words) ->
:func:`token_topic_labels` (:mod:`probes.text.token_topics`: which vocabulary ids of a model carry each
word's topic). :meth:`LdaTopics.held_out_coherence` scores each topic on text LDA never saw (NPMI of
its top words over held-out paragraphs), :meth:`LdaTopics.coherence` on the training texts, so topic
quality is a number that can fail. ``benchmarks/topic_coherence.py`` measured the defaults.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from mechprobe.validation import is_integer
from probes.core.atomic import atomic_directory
from probes.core.errors import ConfigError, InputError
from probes.text.corpora import Document
from probes.text.topic_coherence import SlidingWindows, held_out_split, npmi_per_topic

log = logging.getLogger(__name__)


# Corpus-generic words that name no subject, removed on top of gensim's STOPWORDS (which already
# holds also, first, may, used, using, well, ...). Measured on the default report corpus (the
# Wikipedia excerpt, 4,000 paragraphs of >= 200 characters from 97 articles): every word of the
# first four lines occurs in >= 30 % of the articles (median 48 %; ``new`` 76 %, ``time`` 74 %,
# ``including`` 72 %) and is an adverb, quantifier, time word, generic verb, adjective or noun;
# ``benchmarks/topic_coherence.py --generic-words`` prints each word's article fraction. Topical
# nouns that are as widespread (state, war, world, century, government, people) are kept. The last
# line is wiki-markup and citation leftovers found in the corpus (gallery captions, URLs, ISBNs).
GENERIC_WORDS: frozenset[str] = frozenset("""
    new early late later time times year years day today began beginning followed following second end old recent
    eventually number small large high long short little single total major main great far near known called use uses
    based include includes included including given considered related developed making having led seen taken held
    created named according took brought gave shown referred said different similar common general generally usually
    especially particular particularly certain important possible present typically largely widely highly nearly
    approximately instead despite outside addition able form forms way work place example term terms set case meaning
    means result point type fact basis like non
    isbn file jpg png thumb http www com org html pdf
""".split())  # noqa: SIM905 - one word list a line reads better than a 115-item literal

COHERENCE_MEASURES = ("c_npmi", "c_uci", "c_v", "u_mass")
Assignment = Literal["threshold", "top_fraction", "top_words"]


@dataclass(frozen=True)
class LdaTopicConfig:
    """Settings of the LDA topic model and of the word -> topic assignment.

    Words: lower-cased alphabetic words of at least ``min_word_length`` letters, minus gensim's
    STOPWORDS, minus :data:`GENERIC_WORDS` when ``generic_stop_words``, minus ``extra_stop_words``.
    ``held_out_fraction`` of the non-empty documents (drawn with ``seed``) are held out: never
    fitted, kept to score the topics (:meth:`LdaTopics.held_out_coherence`); 0 fits on every
    document. LDA is fitted on chunks: consecutive training documents of one article (same
    ``Document.title``) concatenated until a chunk holds at least ``chunk_words`` words (0: each
    document is its own chunk). ``filter_extremes`` then keeps words in at least ``no_below``
    chunks and at most a ``no_above`` fraction of them (at most ``keep_n`` words). The assignment
    rules are described in :func:`assign_words_from_phi`; topics whose held-out NPMI is below
    ``min_held_out_npmi`` get no words. Defaults chosen by ``benchmarks/topic_coherence.py`` on the
    report corpus (benchmarks/RESULTS.md, "LDA topic coherence").
    """

    n_topics: int = 20
    passes: int = 20
    iterations: int = 100
    chunksize: int = 500
    alpha: Literal["symmetric", "asymmetric", "auto"] = "symmetric"
    eta: Literal["symmetric", "auto"] = "symmetric"
    no_below: int = 10
    no_above: float = 0.3
    keep_n: int = 20000
    min_word_length: int = 3
    generic_stop_words: bool = True
    extra_stop_words: tuple[str, ...] = ()
    seed: int = 0
    assignment: Assignment = "top_words"
    threshold: float = 0.6
    top_fraction: float = 0.05
    top_words_per_topic: int = 50
    held_out_fraction: float = 0.2
    chunk_words: int = 400
    min_held_out_npmi: float = 0.0

    def __post_init__(self) -> None:
        for name in ("n_topics", "passes", "iterations", "chunksize", "keep_n", "min_word_length", "no_below",
                     "top_words_per_topic", "seed", "chunk_words"):
            value = getattr(self, name)
            non_negative = name in ("seed", "chunk_words")
            if not is_integer(value) or value < (0 if non_negative else 1):
                kind = "a non-negative" if non_negative else "a positive"
                raise ConfigError(f"{name} must be {kind} integer; got {value!r}.")
        if self.n_topics < 2:
            raise ConfigError(f"n_topics must be >= 2 to compare same vs different topics; got {self.n_topics}.")
        for name in ("no_above", "threshold", "top_fraction"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"{name} must be a number in (0, 1]; got {value!r}.")
        if not 0 < self.no_above <= 1:
            raise ConfigError(f"no_above is a fraction of documents in (0, 1]; got {self.no_above}.")
        if self.alpha not in ("symmetric", "asymmetric", "auto"):
            raise ConfigError(f"alpha must be 'symmetric', 'asymmetric' or 'auto'; got {self.alpha!r}.")
        if self.eta not in ("symmetric", "auto"):
            raise ConfigError(f"eta must be 'symmetric' or 'auto'; got {self.eta!r}.")
        fraction = self.held_out_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
            raise ConfigError(
                f"held_out_fraction is the fraction of documents held out, in [0, 1) (0: fit on all); got {fraction!r}."
            )
        threshold = self.min_held_out_npmi
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not -1 <= threshold <= 1:
            raise ConfigError(
                f"min_held_out_npmi is an NPMI in [-1, 1] (-1 keeps every topic); got {threshold!r}."
            )
        if self.assignment not in ("threshold", "top_fraction", "top_words"):
            raise ConfigError(
                f"assignment must be 'threshold', 'top_fraction' or 'top_words'; got {self.assignment!r}."
            )
        if not 0 < self.threshold <= 1 or not 0 < self.top_fraction <= 1:
            raise ConfigError(
                f"threshold and top_fraction must lie in (0, 1]; got {self.threshold} and {self.top_fraction}."
            )
        if not isinstance(self.generic_stop_words, bool):
            raise ConfigError(f"generic_stop_words must be true or false; got {self.generic_stop_words!r}.")
        extra = self.extra_stop_words
        if isinstance(extra, str) or not isinstance(extra, (tuple, list)) \
                or not all(isinstance(w, str) and w.strip() for w in extra):
            raise ConfigError(
                f"extra_stop_words must be a tuple of non-empty words, e.g. ('ibid', 'op'); got {extra!r}."
            )
        # Words are matched after lower-casing; a saved config reloads the tuple as a JSON list.
        object.__setattr__(self, "extra_stop_words", tuple(w.strip().lower() for w in extra))

    def stop_words(self) -> frozenset[str]:
        """Every word removed before LDA: gensim's STOPWORDS, GENERIC_WORDS (if enabled), extra_stop_words."""
        from gensim.parsing.preprocessing import STOPWORDS

        generic = GENERIC_WORDS if self.generic_stop_words else frozenset()
        return frozenset(STOPWORDS) | generic | frozenset(self.extra_stop_words)


def words_of(text: str, min_length: int = 3, stop_words: Iterable[str] | None = None) -> list[str]:
    """Lower-cased alphabetic words of ``text`` without ``stop_words`` (default: gensim's English STOPWORDS).

    Example: ``words_of("The isbn of the tiger", stop_words=LdaTopicConfig().stop_words()) == ["tiger"]``.
    """
    from gensim.parsing.preprocessing import STOPWORDS
    from gensim.utils import simple_preprocess

    stop = STOPWORDS if stop_words is None else stop_words
    if not isinstance(stop, (set, frozenset)):
        stop = frozenset(stop)
    return [w for w in simple_preprocess(text, min_len=min_length, max_len=30) if w not in stop and w.isalpha()]


# Config values that reproduce a model saved before a field existed (the behaviour of that time).
_FIELDS_BEFORE_HELD_OUT = {"held_out_fraction": 0.0, "chunk_words": 0, "eta": "symmetric"}


@dataclass
class LdaTopics:
    """A trained gensim LDA model with its dictionary, the config that made it and its tokenized texts.

    ``n_documents`` counts the training documents (before they are grouped into chunks). ``texts``
    (the training documents after stop-word removal, before ``filter_extremes``; strings interned:
    about 7 MB for the report corpus) are the reference corpus of :meth:`coherence`;
    ``held_out_texts`` (the held-out documents, tokenized the same way; None when nothing was held
    out or the model was saved before held-out text existed) that of :meth:`held_out_coherence`.
    """

    lda: Any
    dictionary: Any
    config: LdaTopicConfig
    n_documents: int
    texts: list[list[str]] | None = field(default=None, repr=False)
    held_out_texts: list[list[str]] | None = field(default=None, repr=False)

    def topic_word_probabilities(self) -> np.ndarray:
        """phi[topic, word id]: each topic's distribution over the dictionary."""
        phi: np.ndarray = self.lda.get_topics()
        return phi

    def top_words(self, topic: int, n: int = 10) -> list[str]:
        """The ``n`` words of highest phi[topic, word], best first."""
        return [word for word, _ in self.lda.show_topic(topic, topn=n)]

    def coherence(self, texts: Iterable[Sequence[str] | Document | str] | None = None, measure: str = "c_npmi",
                  topn: int = 10, *, window_size: int | None = None,
                  word_topics: Mapping[str, int] | None = None) -> list[float]:
        """Coherence of each topic's ``topn`` highest-phi words (gensim ``CoherenceModel``), one float per topic.

        ``c_npmi`` (default; Roeder et al. 2015, Bouma's normalised PMI): the mean over ordered pairs of
        the topic's words of log(p(a, b) / p(a) p(b)) / -log p(a, b), with probabilities estimated over
        sliding windows of ``window_size`` tokens (gensim's default for the measure: 10) of ``texts``;
        in [-1, 1], 0 when the words occur independently, 1 when they always co-occur; a window longer
        than every text counts co-occurrence in whole documents. Also ``c_uci``, ``c_v`` (windows of
        110) and ``u_mass`` (whole documents). Windows are handed to gensim one by one (see
        :class:`probes.text.topic_coherence.SlidingWindows`), so the counts are exact. ``texts`` default
        to the tokenized training texts; otherwise give token lists, or Documents / strings (tokenized
        like the training texts).
        ``word_topics`` (e.g. :func:`assign_word_topics`) scores the words an assignment kept instead:
        each topic's assigned words ranked by phi, top ``topn``; NaN for a topic with fewer than 2.
        Counting runs in one process, so the result is deterministic.

        Example: ``float(np.mean(fit_lda_topics(docs).coherence()))``.
        """
        from gensim.models import CoherenceModel
        from gensim.models.coherencemodel import SLIDING_WINDOW_SIZES

        if measure not in COHERENCE_MEASURES:
            raise ConfigError(f"measure must be one of {', '.join(COHERENCE_MEASURES)}; got {measure!r}.")
        if not is_integer(topn) or topn < 2:
            raise ConfigError(f"topn must be an integer >= 2 (coherence scores word pairs); got {topn!r}.")
        if window_size is not None and (not is_integer(window_size)
                                        or window_size < 2):
            raise ConfigError(
                f"window_size must be an integer >= 2 or None (the measure's default); got {window_size!r}."
            )
        reference = self.texts if texts is None else self._tokenized(texts)
        if reference is None:
            raise InputError(
                "This topic model has no stored training texts (saved by an older version); pass texts= "
                "(token lists or the documents it was trained on)."
            )
        if word_topics is None:
            topics = [self.top_words(t, topn) for t in range(self.config.n_topics)]
        else:
            topics = self._assigned_top_words(word_topics, topn)
        scored = [i for i, words in enumerate(topics) if len(words) >= 2]
        scores = [math.nan] * len(topics)
        if scored:
            if measure != "u_mass":
                window_size = window_size or SLIDING_WINDOW_SIZES[measure]
                windows: Any = SlidingWindows(reference, window_size)
            else:
                windows = reference
            model = CoherenceModel(topics=[topics[i] for i in scored], texts=windows, dictionary=self.dictionary,
                                   coherence=measure, topn=topn, window_size=window_size, processes=1)
            for i, value in zip(scored, model.get_coherence_per_topic()):
                scores[i] = float(value)
        return scores

    def held_out_coherence(self, topn: int = 10, window_size: int | None = None) -> list[float]:
        """NPMI of each topic's ``topn`` highest-phi words over the held-out documents, one float per topic.

        :func:`probes.text.topic_coherence.npmi_per_topic` (gensim's ``c_npmi`` formula, exact counts; a
        word absent from the held-out text scores -1 with every partner). ``window_size=None`` (default,
        the held-out NPMI the report uses): co-occurrence in the same held-out document (paragraph), the
        unit the topics are about; ``10``: gensim's standard sliding windows of 10 tokens, where on a
        held-out set of ~40,000 tokens most pairs of topical words never share a window and score the
        measure's floor for that (about -0.7 with gensim's epsilon).

        Example: ``float(np.median(fit_lda_topics(docs).held_out_coherence()))``.
        """
        if not is_integer(topn) or topn < 2:
            raise ConfigError(f"topn must be an integer >= 2 (coherence scores word pairs); got {topn!r}.")
        if not self.held_out_texts:
            raise InputError(
                "This topic model holds no held-out text (fitted with held_out_fraction=0, or saved by an older "
                "version); refit it with held_out_fraction > 0, or score it on your own text with coherence(texts=...)."
            )
        topics = [self.top_words(t, topn) for t in range(self.config.n_topics)]
        return npmi_per_topic(topics, self.held_out_texts, window_size)

    def kept_topics(self) -> list[int]:
        """The topics :func:`assign_word_topics` gives words: held-out NPMI (paragraph windows, top 10 words)
        at least ``config.min_held_out_npmi``; every topic when the model holds no held-out text.

        Example: ``set(assign_word_topics(model).values()) <= set(model.kept_topics())``.
        """
        if not self.held_out_texts:
            return list(range(self.config.n_topics))
        return [t for t, score in enumerate(self.held_out_coherence()) if score >= self.config.min_held_out_npmi]

    def _tokenized(self, texts: Any) -> list[list[str]]:
        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise InputError(
                f"texts must be an iterable of token lists, Documents or str; got {type(texts).__name__}."
            )
        stop = self.config.stop_words()
        out = []
        for text in texts:
            if isinstance(text, (Document, str)):
                out.append(words_of(_document_text(text), self.config.min_word_length, stop))
            elif isinstance(text, Sequence) and all(isinstance(w, str) for w in text):
                out.append(list(text))
            else:
                raise InputError(f"Each text must be a list of str tokens, a Document or a str; got {text!r:.80}.")
        if not any(out):
            raise InputError("texts hold no words (after stop-word removal); coherence needs a reference corpus.")
        return out

    def _assigned_top_words(self, word_topics: Mapping[str, int], topn: int) -> list[list[str]]:
        if not isinstance(word_topics, Mapping):
            raise InputError(
                f"word_topics must map word -> topic (assign_word_topics(...)); got {type(word_topics).__name__}."
            )
        phi = self.topic_word_probabilities()
        by_topic: list[list[tuple[float, str]]] = [[] for _ in range(self.config.n_topics)]
        for word, topic in word_topics.items():
            index = self.dictionary.token2id.get(word)
            if index is None or isinstance(topic, bool) or not isinstance(topic, (int, np.integer)) \
                    or not 0 <= topic < self.config.n_topics:
                raise InputError(
                    f"word_topics must map dictionary words to topics 0..{self.config.n_topics - 1}; "
                    f"got {word!r} -> {topic!r}."
                )
            by_topic[topic].append((-float(phi[topic, index]), word))
        return [[word for _, word in sorted(pairs)[:topn]] for pairs in by_topic]

    def save(self, folder: str | Path) -> Path:
        """Save into ``folder`` (replaced atomically), training and held-out texts included; reload with
        :meth:`load`."""
        with atomic_directory(folder) as tmp:
            self.lda.save(str(tmp / "lda.gensim"))
            self.dictionary.save(str(tmp / "dictionary.gensim"))
            (tmp / "topic_config.json").write_text(
                json.dumps({"config": asdict(self.config), "n_documents": self.n_documents}), encoding="utf-8"
            )
            for name, texts in (("texts", self.texts), ("held_out_texts", self.held_out_texts)):
                if texts is not None:
                    with gzip.open(tmp / f"{name}.json.gz", "wt", encoding="utf-8") as handle:
                        json.dump(texts, handle, separators=(",", ":"))
        return Path(folder)

    @classmethod
    def load(cls, folder: str | Path) -> LdaTopics:
        from gensim.corpora import Dictionary
        from gensim.models import LdaModel

        folder = Path(folder)
        if not (folder / "topic_config.json").is_file():
            raise InputError(f"{folder} is not a saved topic model (no topic_config.json); train one first.")
        meta = json.loads((folder / "topic_config.json").read_text(encoding="utf-8"))
        texts: dict[str, list[list[str]] | None] = {"texts": None, "held_out_texts": None}
        for name in texts:
            if (folder / f"{name}.json.gz").is_file():
                with gzip.open(folder / f"{name}.json.gz", "rt", encoding="utf-8") as handle:
                    texts[name] = [[sys.intern(w) for w in text] for text in json.load(handle)]
        # A model saved before a config field existed was made without it: its old behaviour, not today's default.
        config = LdaTopicConfig(**{**_FIELDS_BEFORE_HELD_OUT, **meta["config"]})
        return cls(LdaModel.load(str(folder / "lda.gensim")), Dictionary.load(str(folder / "dictionary.gensim")),
                   config, int(meta["n_documents"]), **texts)


def _document_text(document: Any) -> str:
    if isinstance(document, Document):
        return document.text
    if isinstance(document, str):
        return document
    raise InputError(f"Each document must be a probes.Document or a str; got {type(document).__name__}.")


def article_chunks(texts: Sequence[list[str]], titles: Sequence[str | None], chunk_words: int) -> list[list[str]]:
    """The units LDA is fitted on: consecutive ``texts`` of one article concatenated into chunks of >= ``chunk_words``.

    Texts are grouped by title (articles in order of first appearance, texts in their given order);
    within an article, texts are appended to the current chunk until it holds at least
    ``chunk_words`` tokens, and an article's last chunk may be shorter. A text without a title
    (``None``, a plain string document) is a chunk of its own; so is every text when ``chunk_words`` is 0.

    Example: ``article_chunks([["a"], ["b"], ["c"]], ["A", "A", "B"], 2) == [["a", "b"], ["c"]]``.
    """
    if chunk_words == 0:
        return [list(t) for t in texts]
    articles: dict[Any, list[list[str]]] = {}
    for number, (text, title) in enumerate(zip(texts, titles)):
        articles.setdefault(number if title is None else ("title", title), []).append(list(text))
    chunks = []
    for members in articles.values():
        chunk: list[str] = []
        for text in members:
            chunk.extend(text)
            if len(chunk) >= chunk_words:
                chunks.append(chunk)
                chunk = []
        if chunk:
            chunks.append(chunk)
    return chunks


def fit_lda_topics(documents: Iterable[Document | str], config: LdaTopicConfig = LdaTopicConfig()) -> LdaTopics:
    """Fit LDA on ``documents`` less a held-out fraction (bag of words of article chunks, stop words removed,
    rare/common words filtered); see :class:`LdaTopicConfig`.

    Deterministic given ``config.seed`` (the held-out draw and single-process gensim ``LdaModel``).
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
    stop = config.stop_words()
    tokenized = [([sys.intern(w) for w in words_of(_document_text(d), config.min_word_length, stop)],
                  d.title if isinstance(d, Document) else None) for d in documents]
    tokenized = [(text, title) for text, title in tokenized if text]
    if len(tokenized) < 2:
        raise InputError(f"LDA needs at least 2 non-empty documents; the corpus gave {len(tokenized)}. Give a corpus "
                         f"with more documents (paragraphs, or articles).")
    training, held_out = held_out_split(len(tokenized), config.held_out_fraction, config.seed)
    texts = [tokenized[i][0] for i in training]
    chunks = article_chunks(texts, [tokenized[i][1] for i in training], config.chunk_words)
    dictionary = Dictionary(chunks)
    dictionary.filter_extremes(no_below=min(config.no_below, len(chunks)), no_above=config.no_above,
                               keep_n=config.keep_n)
    if len(dictionary) < config.n_topics:
        raise InputError(
            f"After filter_extremes only {len(dictionary)} words remain, fewer than n_topics={config.n_topics}. "
            f"Use a larger corpus or lower no_below."
        )
    bows = [dictionary.doc2bow(t) for t in chunks]
    lda = LdaModel(bows, id2word=dictionary, num_topics=config.n_topics, passes=config.passes,
                   iterations=config.iterations, chunksize=config.chunksize, alpha=config.alpha,
                   eta=None if config.eta == "symmetric" else config.eta, random_state=config.seed)
    log.info("trained LDA: %d topics, %d words, %d documents in %d chunks, %d held out", config.n_topics,
             len(dictionary), len(texts), len(chunks), len(held_out))
    return LdaTopics(lda, dictionary, config, len(texts), texts, [tokenized[i][0] for i in held_out] or None)


def assign_words_from_phi(phi: np.ndarray, words: Sequence[str], config: LdaTopicConfig) -> dict[str, int]:
    """word -> topic from a topic-word matrix ``phi`` [n_topics, n_words] under ``config.assignment``.

    ``threshold``: p(topic | word) = phi[t, w] / sum_t phi[t, w] (uniform topic prior); a word gets
    its top topic when that probability is at least ``threshold``.
    ``top_words`` (Li, Li & Risteski 2023's selection of high-likelihood words): each topic claims its
    ``top_words_per_topic`` words of highest phi[t, w]; words claimed by several topics are dropped,
    so every kept word is among the top words of exactly one topic. ``top_fraction`` is the same
    rule with N = round(``top_fraction`` x number of words) (at least 1).

    Example: ``assign_words_from_phi(np.array([[.5, .3, .2], [.1, .3, .6]]), ["a", "b", "c"],
    LdaTopicConfig(assignment="top_words", top_words_per_topic=2)) == {"a": 0, "c": 1}``.
    """
    phi = np.asarray(phi, dtype=np.float64)
    if phi.ndim != 2 or phi.shape[1] != len(words) or phi.shape[0] < 1:
        raise InputError(
            f"phi must be [n_topics, n_words] with one column per word; got shape {phi.shape} for {len(words)} words."
        )
    if config.assignment == "threshold":
        posterior = phi / phi.sum(axis=0, keepdims=True)
        best = posterior.argmax(axis=0)
        keep = posterior.max(axis=0) >= config.threshold
        return {words[int(i)]: int(best[i]) for i in np.nonzero(keep)[0]}
    if config.assignment == "top_words":
        n_top = config.top_words_per_topic
    else:
        n_top = max(1, round(config.top_fraction * phi.shape[1]))
    top = np.argsort(-phi, axis=1, kind="stable")[:, :n_top]          # [topic, rank] word ids
    claims = np.bincount(top.ravel(), minlength=phi.shape[1])
    return {words[int(i)]: topic for topic in range(phi.shape[0]) for i in top[topic] if claims[i] == 1}


def assign_word_topics(topic_model: LdaTopics) -> dict[str, int]:
    """word -> topic under the model's config (see :func:`assign_words_from_phi` for the rules), without the
    words of topics that :meth:`LdaTopics.kept_topics` drops (held-out NPMI below ``min_held_out_npmi``).

    Example: ``assign_word_topics(fit_lda_topics(docs))["tiger"]``.
    """
    phi = topic_model.topic_word_probabilities()
    words = [topic_model.dictionary[i] for i in range(phi.shape[1])]
    kept = set(topic_model.kept_topics())
    return {word: topic for word, topic in assign_words_from_phi(phi, words, topic_model.config).items()
            if topic in kept}
