"""Topic quality of gensim LDA on the report corpus, scored on held-out paragraphs: a grid of settings over seeds.

Corpus: the Wikipedia excerpt's paragraphs of >= 200 characters, all of them (4,544; ``--max-documents``
caps them) or, for the first row, the first 4,000 (the report corpus before this benchmark). Every row
holds out ``held_out_fraction`` (0.2) of the paragraphs with its seed, fits LDA on the rest and scores
each topic's 10 highest-phi words by NPMI (``LdaTopics.held_out_coherence``: gensim's c_npmi formula,
exact counts) on the held-out paragraphs, co-occurrence counted in the same paragraph ("held-out
NPMI", the number the report uses) and in gensim's 10-token windows. Per seed: the median over topics
and the topics above 0; then mean +- sd over ``--seeds``. Also: the same words' paragraph NPMI on the
training paragraphs, on all of them and on a random sample of them as large as the held-out set
(NPMI falls with the size of the reference: that column tells how much of the held-out gap is size,
not overfitting), the dictionary, the LDA chunks, the words ``assign_word_topics`` gives the topic probes
(the topics with held-out NPMI >= ``min_held_out_npmi``, 0) and the fit time.

Rows change named fields of ``BASE`` (the defaults before this benchmark, held-out scoring added);
``S1``..``S3`` are steps that later rows build on (``S3`` is the new default). "Phrases bigrams" is
not a config field: it joins the bigrams gensim ``Phrases`` finds (min_count 5, threshold 10, on the
tokenized paragraphs) into one word before fitting (a benchmark-only variant). Table 2 shows the
default's topics (seed 0); table 3 the effect of dropping incoherent topics (``min_held_out_npmi``)
and other held-out windows.

    .venv/bin/python benchmarks/topic_coherence.py                 # ~8 min on 2 cores
    .venv/bin/python benchmarks/topic_coherence.py --seeds 0       # ~3 min
    .venv/bin/python benchmarks/topic_coherence.py --generic-words # article fraction of each GENERIC_WORDS entry
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import contextlib
import dataclasses
import logging
import random
import statistics
import time
from collections import Counter
from typing import Any

import numpy as np

from analyses.cli_checks import ScriptParser, count_arg, script_main, seed_arg, sized_by
from probes.text.corpora import Document, iter_documents
from probes.text.topic_coherence import held_out_split, npmi_per_topic
from probes.text.topics import (
    GENERIC_WORDS,
    LdaTopicConfig,
    LdaTopics,
    article_chunks,
    assign_word_topics,
    fit_lda_topics,
    words_of,
)

# The defaults before this benchmark (issue 25), scored on held-out paragraphs.
BASE = LdaTopicConfig(n_topics=20, passes=10, no_below=5, chunk_words=0, held_out_fraction=0.2)
OLD_REPORT_PARAGRAPHS = 4000

S1 = {"chunk_words": 400}
S2 = {**S1, "no_below": 10}
S3 = {**S2, "passes": 20}
PHRASES = "__phrases__"
DEFAULT = "__default__"
ROWS: list[tuple[str, dict[str, Any], int | None]] = [  # label, changes to BASE, paragraphs (None: all)
    ("BASE (previous defaults), first 4,000 paragraphs", {}, OLD_REPORT_PARAGRAPHS),
    ("BASE, all paragraphs", {}, None),
    ("BASE, no_below=10", {"no_below": 10}, None),
    ("BASE, passes=20", {"passes": 20}, None),
    ("BASE, chunk_words=100", {"chunk_words": 100}, None),
    ("BASE, chunk_words=200", {"chunk_words": 200}, None),
    ("S1 = BASE, chunk_words=400", S1, None),
    ("BASE, chunk_words=100000 (whole articles)", {"chunk_words": 100_000}, None),
    ("S2 = S1, no_below=10", S2, None),
    ("S1, no_below=20", {**S1, "no_below": 20}, None),
    ("S1, no_below=40", {**S1, "no_below": 40}, None),
    ("S2, no_above=0.15", {**S2, "no_above": 0.15}, None),
    ("S2, keep_n=1000", {**S2, "keep_n": 1000}, None),
    ("S2, Phrases bigrams", {**S2, PHRASES: True}, None),
    ("S2, alpha=auto", {**S2, "alpha": "auto"}, None),
    ("S2, eta=auto", {**S2, "eta": "auto"}, None),
    ("S2, n_topics=15", {**S2, "n_topics": 15}, None),
    ("S2, n_topics=25", {**S2, "n_topics": 25}, None),
    ("S2, n_topics=30", {**S2, "n_topics": 30}, None),
    ("S3 = S2, passes=20 = LdaTopicConfig() (new default)", {DEFAULT: True}, None),
    ("S3, first 4,000 paragraphs", {DEFAULT: True}, OLD_REPORT_PARAGRAPHS),
    ("S2, passes=30", {**S2, "passes": 30}, None),
    ("S2, chunksize=5000 (batch), passes=20", {**S2, "chunksize": 5000, "passes": 20}, None),
    ("S3, chunk_words=200", {**S3, "chunk_words": 200}, None),
    ("S3, n_topics=25", {**S3, "n_topics": 25}, None),
    ("S3, held_out_fraction=0.3", {**S3, "held_out_fraction": 0.3}, None),
]


def config_for(changes: dict[str, Any], seed: int) -> LdaTopicConfig:
    if changes.get(DEFAULT):
        # The row's label says the default is S3: fail loudly once it is not.
        if dataclasses.replace(BASE, **S3) != LdaTopicConfig():
            raise SystemExit("LdaTopicConfig() is no longer BASE + S3: update S3 and the row labels.")
        return dataclasses.replace(LdaTopicConfig(), seed=seed)
    return dataclasses.replace(BASE, seed=seed, **{k: v for k, v in changes.items() if k != PHRASES})


def with_phrases(documents: list[Document], config: LdaTopicConfig) -> list[Document]:
    """The documents with gensim ``Phrases`` bigrams joined into one word (``new york`` -> ``newyork``)."""
    from gensim.models.phrases import Phrases

    stop = config.stop_words()
    texts = [words_of(d.text, config.min_word_length, stop) for d in documents]
    phrases = Phrases(texts, min_count=5, threshold=10, delimiter="")
    return [Document(" ".join(phrases[t]), d.title, d.source) for d, t in zip(documents, texts)]


def sized_sample_npmi(topics: LdaTopics, seed: int) -> list[float]:
    """Paragraph NPMI on a random sample of the training paragraphs as large as the held-out set."""
    sample = random.Random(seed).sample(topics.texts, len(topics.held_out_texts))
    return npmi_per_topic([topics.top_words(t, 10) for t in range(topics.config.n_topics)], sample, None)


def mean_sd(values: list[float], digits: int = 3, sign: bool = True) -> str:
    """Mean +- standard deviation over seeds."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{np.mean(values):{'+' if sign else ''}.{digits}f} +- {sd:.{digits}f}"


def table_settings(documents: list[Document], seeds: list[int]) -> None:
    print(f"\nTable 1: held-out NPMI of each topic's top 10 words, {len(seeds)} seed(s) {seeds}: median over topics "
          f"and topics > 0 per seed, mean +- sd over seeds")
    print("| setting | topics | paragraphs | held-out NPMI, paragraphs: median | topics > 0 | held-out, 10-token "
          "windows: median | topics > 0 | training paragraphs: median | training, held-out-sized sample: median "
          "| dictionary | LDA chunks | words for the probes | fit s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    phrased: dict[int, list[Document]] = {}
    for label, changes, n_paragraphs in ROWS:
        columns: dict[str, list[float]] = {k: [] for k in ("median", "above", "median10", "above10", "training",
                                                           "sized", "dictionary", "chunks", "words", "fit")}
        corpus = documents[:n_paragraphs] if n_paragraphs else documents
        for seed in seeds:
            config = config_for(changes, seed)
            if changes.get(PHRASES):
                corpus = phrased.setdefault(len(corpus), with_phrases(corpus, config))
            start = time.perf_counter()
            topics = fit_lda_topics(corpus, config)
            columns["fit"].append(time.perf_counter() - start)
            held = topics.held_out_coherence()
            held10 = topics.held_out_coherence(window_size=10)
            words = [topics.top_words(t, 10) for t in range(config.n_topics)]
            columns["median"].append(float(np.median(held)))
            columns["above"].append(sum(s > 0 for s in held))
            columns["median10"].append(float(np.median(held10)))
            columns["above10"].append(sum(s > 0 for s in held10))
            columns["training"].append(float(np.median(npmi_per_topic(words, topics.texts, None))))
            columns["sized"].append(float(np.median(sized_sample_npmi(topics, seed))))
            columns["dictionary"].append(len(topics.dictionary))
            columns["chunks"].append(chunk_count(corpus, config))
            columns["words"].append(len(assign_word_topics(topics)))
        print(f"| {label} | {config.n_topics} | {len(corpus):,} | {mean_sd(columns['median'])} | "
              f"{mean_sd(columns['above'], 1, False)} | {mean_sd(columns['median10'])} | "
              f"{mean_sd(columns['above10'], 1, False)} | {mean_sd(columns['training'])} | "
              f"{mean_sd(columns['sized'])} | {np.mean(columns['dictionary']):,.0f} | "
              f"{np.mean(columns['chunks']):,.0f} | {np.mean(columns['words']):,.0f} | "
              f"{np.mean(columns['fit']):.1f} |", flush=True)


def training_split(documents: list[Document], config: LdaTopicConfig) -> tuple[list, list]:
    """``(training, held_out)`` as (tokens, title) pairs, split exactly as ``fit_lda_topics`` splits."""
    stop = config.stop_words()
    tokenized = [(words_of(d.text, config.min_word_length, stop), d.title) for d in documents]
    tokenized = [pair for pair in tokenized if pair[0]]
    training, held_out = held_out_split(len(tokenized), config.held_out_fraction, config.seed)
    return [tokenized[i] for i in training], [tokenized[i] for i in held_out]


def chunk_count(documents: list[Document], config: LdaTopicConfig) -> int:
    training, _ = training_split(documents, config)
    return len(article_chunks([t for t, _ in training], [title for _, title in training], config.chunk_words))


def table_default(documents: list[Document], seeds: list[int]) -> None:
    default = LdaTopicConfig()
    print(f"\nTable 2: LdaTopicConfig() topics, seed 0: held-out NPMI (paragraphs, 10-token windows), training NPMI "
          f"(10-token windows, the report's training column), used by the probes (held-out >= "
          f"{default.min_held_out_npmi}), top 8 words")
    topics = fit_lda_topics(documents, default)
    held, held10 = topics.held_out_coherence(), topics.held_out_coherence(window_size=10)
    training = npmi_per_topic([topics.top_words(t, 10) for t in range(default.n_topics)], topics.texts, 10)
    kept = set(topics.kept_topics())
    print("| held-out, paragraphs | held-out, 10-token | training, 10-token | used | top words |")
    print("| ---: | ---: | ---: | --- | --- |")
    for t in np.argsort(held)[::-1]:
        print(f"| {held[t]:+.3f} | {held10[t]:+.3f} | {training[t]:+.3f} | {'yes' if t in kept else 'no'} | "
              f"{', '.join(topics.top_words(int(t), 8))} |")

    print(f"\nTable 3: LdaTopicConfig() over seed(s) {seeds}, mean +- sd: dropping topics with held-out NPMI < "
          f"{default.min_held_out_npmi}, and the held-out NPMI with other windows (median over topics)")
    rows: dict[str, list[float]] = {k: [] for k in ("kept", "words_all", "words_kept", "median_kept", "chunks200",
                                                    "articles", "fit", "fit_old")}
    old = dataclasses.replace(BASE, held_out_fraction=0.0)
    old_documents = documents[:OLD_REPORT_PARAGRAPHS]
    for seed in seeds:
        config = dataclasses.replace(default, seed=seed)
        start = time.perf_counter()
        topics = fit_lda_topics(documents, config)
        rows["fit"].append(time.perf_counter() - start)
        start = time.perf_counter()
        fit_lda_topics(old_documents, dataclasses.replace(old, seed=seed))
        rows["fit_old"].append(time.perf_counter() - start)
        held = topics.held_out_coherence()
        kept = topics.kept_topics()
        keep_all = dataclasses.replace(config, min_held_out_npmi=-1.0)
        every = assign_word_topics(dataclasses.replace(topics, config=keep_all))
        rows["kept"].append(len(kept))
        rows["words_all"].append(len(every))
        rows["words_kept"].append(len(assign_word_topics(topics)))
        rows["median_kept"].append(float(np.median([held[t] for t in kept])) if kept else float("nan"))
        _, held_out = training_split(documents, config)
        words = [topics.top_words(t, 10) for t in range(config.n_topics)]
        for key, chunk_words in (("chunks200", 200), ("articles", 100_000)):
            units = article_chunks([t for t, _ in held_out], [title for _, title in held_out], chunk_words)
            rows[key].append(float(np.median(npmi_per_topic(words, units, None))))
    print("| topics kept | words assigned, all topics | words assigned, kept topics | held-out NPMI of the kept "
          "topics: median (selected on the same text) | held-out windows: ~200 words of one article | held-out "
          "windows: whole held-out article | fit s | previous default's fit s (4,000 paragraphs, no hold-out) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print(f"| {mean_sd(rows['kept'], 1, False)} | {mean_sd(rows['words_all'], 0, False)} | "
          f"{mean_sd(rows['words_kept'], 0, False)} | {mean_sd(rows['median_kept'])} | {mean_sd(rows['chunks200'])} | "
          f"{mean_sd(rows['articles'])} | {mean_sd(rows['fit'], 1, False)} | {mean_sd(rows['fit_old'], 1, False)} |")


def print_generic_words(documents: list[Document]) -> None:
    articles: dict[str, set[str]] = {}
    for document in documents:
        articles.setdefault(document.title, set()).update(words_of(document.text))
    counts = Counter(w for words in articles.values() for w in words)
    rows = sorted(((counts[w] / len(articles), w) for w in GENERIC_WORDS), reverse=True)
    print(f"GENERIC_WORDS ({len(GENERIC_WORDS)}): fraction of the {len(articles)} articles containing each")
    print(", ".join(f"{w} {f:.2f}" for f, w in rows))


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-documents", type=count_arg(1), default=None,
                        help="paragraphs of the corpus (default: all)")
    parser.add_argument("--seeds", type=seed_arg, nargs="+", default=[0, 1, 2], help="seeds (held-out draw and LDA)")
    parser.add_argument("--generic-words", action="store_true", help="print GENERIC_WORDS' article fractions and exit")
    args = parser.parse_args()
    logging.getLogger("gensim").setLevel(logging.WARNING)
    documents = list(iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200,
                                    max_documents=args.max_documents))
    if args.generic_words:
        print_generic_words(documents)
        return
    print(f"{len(documents):,} paragraphs of >= 200 characters from {len({d.title for d in documents})} articles")
    with sized_by("--max-documents", args.max_documents, "4000 (or leave it out: every paragraph)") \
            if args.max_documents else contextlib.nullcontext():
        table_settings(documents, args.seeds)
        table_default(documents, args.seeds)


if __name__ == "__main__":
    main()
