"""Exact NPMI of word lists over the windows of a reference text, and the seeded held-out split of a corpus.

:func:`npmi_per_topic` scores topics on any tokenized text (the held-out paragraphs of
:func:`probes.text.topics.fit_lda_topics`, see :meth:`LdaTopics.held_out_coherence`) with the formula of
gensim's ``c_npmi`` and exact window counts; unlike gensim it also scores a word that never occurs in
the reference (its pairs score -1), which happens on held-out text. :func:`held_out_split` picks the
held-out documents; :class:`SlidingWindows` feeds gensim's ``CoherenceModel`` exact windows
(:meth:`LdaTopics.coherence`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np
from scipy import sparse

from mechprobe.validation import is_integer
from probes.core.errors import ConfigError, InputError

# gensim's smoothing constant of the log ratio (gensim.topic_coherence.direct_confirmation_measure.EPSILON).
EPSILON = 1e-12


def held_out_split(n_documents: int, fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """``(training, held_out)`` document indices, each sorted: ``round(fraction * n_documents)`` held out.

    The held-out documents are a uniform draw without replacement (numpy ``default_rng(seed)``), so
    the split depends only on ``n_documents``, ``fraction`` and ``seed``. ``fraction`` 0 holds out
    nothing. At least 2 documents stay for training and, when ``fraction`` > 0, at least 1 is held out.

    Example: ``held_out_split(10, 0.2, seed=0)[1]`` holds 2 of the indices 0..9.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction < 1:
        raise ConfigError(f"held_out_fraction must be a number in [0, 1); got {fraction!r}.")
    if fraction == 0:
        return list(range(n_documents)), []
    n_held = min(max(1, round(fraction * n_documents)), n_documents - 2)
    if n_held < 1:
        raise InputError(
            f"Holding out text needs at least 3 non-empty documents (2 to fit, 1 to hold out); got {n_documents}. "
            f"Use a larger corpus or set held_out_fraction=0."
        )
    held = np.sort(np.random.default_rng(seed).choice(n_documents, size=n_held, replace=False))
    held_set = set(held.tolist())
    return [i for i in range(n_documents) if i not in held_set], held.tolist()


def _window_incidence(texts: Sequence[Sequence[str]], words: Sequence[str],
                      window_size: int | None) -> sparse.csr_matrix:
    """[word, window] sparse 0/1: whether each word occurs in each window (sliding windows of ``window_size``
    tokens of each text, a text no longer than that is one window; ``None``: each whole text is one window)."""
    index = {word: i for i, word in enumerate(words)}
    counts = [1 if window_size is None or len(t) <= window_size else len(t) - window_size + 1 for t in texts]
    columns: list[list[np.ndarray]] = [[] for _ in words]
    start = 0
    for text, count in zip(texts, counts):
        width = len(text) if window_size is None else window_size
        for position, token in enumerate(text):
            row = index.get(token)
            if row is None:
                continue
            if count == 1:
                columns[row].append(np.array([start]))
            else:  # the windows that contain this position: those starting at position - window_size + 1 .. position
                columns[row].append(np.arange(start + max(0, position - width + 1),
                                              start + min(position, count - 1) + 1))
        start += count
    unique = [np.unique(np.concatenate(c)) if c else np.zeros(0, dtype=np.int64) for c in columns]
    indptr = np.concatenate([[0], np.cumsum([len(u) for u in unique])])
    indices = np.concatenate(unique) if unique else np.zeros(0, dtype=np.int64)
    return sparse.csr_matrix((np.ones(len(indices)), indices, indptr), shape=(len(words), start))


def npmi_per_topic(topics: Sequence[Sequence[str]], texts: Sequence[Sequence[str]],
                   window_size: int | None = 10) -> list[float]:
    """NPMI coherence of each word list in ``topics`` over the windows of ``texts``, one float per topic.

    The mean over ordered pairs (a, b), a != b, of log((p(a, b) + e) / p(a) p(b)) / -log(p(a, b) + e),
    probabilities over all windows of all texts, e = 1e-12: gensim's ``c_npmi`` with exact counts.
    A pair with a word that occurs in no window scores -1 (the measure's minimum; gensim would divide
    by zero). Windows: every run of ``window_size`` consecutive tokens of a text (a shorter text is
    one window), or each whole text with ``window_size=None``. A topic of fewer than 2 words is NaN.

    Example: ``npmi_per_topic([["tiger", "zebra"]], [["tiger", "zebra"], ["copper"]], None)`` is ``[1.0]`` (to 1e-12).
    """
    if window_size is not None and (not is_integer(window_size)
                                    or window_size < 2):
        raise ConfigError(f"window_size must be an integer >= 2 or None (whole texts); got {window_size!r}.")
    if isinstance(texts, (str, bytes)) or not all(isinstance(t, Sequence) and not isinstance(t, str) for t in texts):
        raise InputError("texts must be a list of token lists (e.g. LdaTopics.held_out_texts).")
    if not any(texts):
        raise InputError("texts hold no words; NPMI needs a reference text.")
    vocabulary = sorted({w for words in topics for w in words})
    incidence = _window_incidence(texts, vocabulary, window_size)
    together = (incidence @ incidence.T).toarray() / incidence.shape[1]  # [word, word] p(a, b), exact counts
    alone = np.diag(together)                                           # p(a)
    row = {w: i for i, w in enumerate(vocabulary)}
    scores = []
    for words in topics:
        ids = list(dict.fromkeys(row[w] for w in words))
        if len(ids) < 2:
            scores.append(math.nan)
            continue
        values = []
        for a in ids:
            for b in ids:
                if a == b:
                    continue
                if alone[a] == 0 or alone[b] == 0:
                    values.append(-1.0)
                    continue
                joint = together[a, b] + EPSILON
                values.append(math.log(joint / (alone[a] * alone[b])) / -math.log(joint))
        scores.append(float(np.mean(values)))
    return scores


class SlidingWindows:
    """Each window of ``window_size`` consecutive tokens of each text as its own text (a shorter text: one window).

    gensim 4.4's ``WordOccurrenceAccumulator`` slides one window per text and, when a token leaves it,
    marks that word absent even while another copy is still inside: texts ``[["a", "a", "b"]]`` with
    windows of 2 count ``a`` in 1 window instead of 2 and the pair (a, b) in none instead of 1. Topic
    words repeat within 10 tokens (an article's name), so that bias lowers NPMI. Handed every window
    as a separate text, gensim counts each one afresh: the same windows, the same number of them,
    exact counts. Iterating is lazy, so no copy of the corpus is kept.
    """

    def __init__(self, texts: Sequence[Sequence[str]], window_size: int) -> None:
        self.texts = texts
        self.window_size = window_size

    def __iter__(self) -> Iterator[Sequence[str]]:
        size = self.window_size
        for text in self.texts:
            if len(text) <= size:
                yield text
            else:
                for start in range(len(text) - size + 1):
                    yield text[start:start + size]
