"""Topic quality of gensim LDA on the report corpus: NPMI coherence over a small grid of settings.

Corpus: the report's default, ``iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200,
max_documents=4000)``. Each setting changes one or two fields of the previous defaults (``BASE``)
and is fitted with every ``--seeds`` seed; coherence is ``LdaTopics.coherence(texts=reference)``
(c_npmi of each topic's 10 highest-phi words) with one common reference for every row: the corpus
tokenized with gensim's STOPWORDS only, so rows with and without the generic stop list are scored on
the same windows. Two window choices: gensim's 10 tokens (the c_npmi standard) and whole paragraphs
(``window_size=PARAGRAPH``, the unit LDA was fitted on). Table 1 gives the mean over topics (then
mean +- sd over seeds), the worst topic and the topics below 0 (10-token windows), the dictionary
size and the fit time. Table 2 compares word -> topic assignment rules on the new default fits:
words assigned, how many are a single SmolLM2 token (skipped when the converted model is not in the
cache), the c_npmi of each topic's 10 highest-phi *assigned* words, and the paragraph c_npmi over
*all* of a topic's assigned words (the words the topic probes label), averaged over topics.

    .venv/bin/python benchmarks/topic_coherence.py                 # ~7 min on 2 cores
    .venv/bin/python benchmarks/topic_coherence.py --seeds 0       # ~3 min
    .venv/bin/python benchmarks/topic_coherence.py --generic-words # article fraction of each GENERIC_WORDS entry
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import statistics
import time
from collections import Counter
from typing import Any

import numpy as np

from probes.text.corpora import iter_documents
from probes.core.loading import cache_dir
from probes.text.topics import GENERIC_WORDS, LdaTopicConfig, assign_word_topics, fit_lda_topics, words_of
from probes.text.token_topics import token_topic_labels

PARAGRAPH = 100_000  # a window longer than every paragraph: co-occurrence in the same paragraph

# The defaults before this benchmark (issue "findings that can fail", item 5).
BASE = LdaTopicConfig(generic_stop_words=False, no_below=5, no_above=0.3, passes=5, n_topics=20, alpha="symmetric",
                      assignment="threshold", threshold=0.6)

G = {"generic_stop_words": True}
SETTINGS: list[tuple[str, dict[str, Any]]] = [
    ("previous defaults (BASE)", {}),
    ("generic stop list", G),
    ("generic, no_below=3", {**G, "no_below": 3}),
    ("generic, no_below=10", {**G, "no_below": 10}),
    ("generic, no_below=20", {**G, "no_below": 20}),
    ("generic, no_above=0.1", {**G, "no_above": 0.1}),
    ("generic, no_above=0.05", {**G, "no_above": 0.05}),
    ("generic, passes=10", {**G, "passes": 10}),
    ("generic, passes=15", {**G, "passes": 15}),
    ("generic, passes=10, alpha=auto", {**G, "passes": 10, "alpha": "auto"}),
    ("generic, passes=10, n_topics=10", {**G, "passes": 10, "n_topics": 10}),
    ("generic, passes=10, n_topics=15", {**G, "passes": 10, "n_topics": 15}),
    ("generic, passes=10, chunksize=4000 (batch)", {**G, "passes": 10, "chunksize": 4000}),
    ("no generic list, passes=10", {"passes": 10}),
    ("LdaTopicConfig() (new default)", {"__default__": True}),
]

ASSIGNMENTS: list[tuple[str, dict[str, Any]]] = [
    ("threshold 0.6 (previous default)", {"assignment": "threshold", "threshold": 0.6}),
    ("threshold 0.8", {"assignment": "threshold", "threshold": 0.8}),
    ("top_fraction 0.05", {"assignment": "top_fraction", "top_fraction": 0.05}),
    ("top_words 30", {"assignment": "top_words", "top_words_per_topic": 30}),
    ("top_words 50", {"assignment": "top_words", "top_words_per_topic": 50}),
    ("top_words 100", {"assignment": "top_words", "top_words_per_topic": 100}),
    ("top_words 200", {"assignment": "top_words", "top_words_per_topic": 200}),
]


def config_for(changes: dict[str, Any], seed: int) -> LdaTopicConfig:
    if changes.get("__default__"):
        return dataclasses.replace(LdaTopicConfig(), seed=seed)
    return dataclasses.replace(BASE, seed=seed, **changes)


def smollm2_tokenizer() -> Any | None:
    folder = cache_dir() / "models" / "smollm2-135m"
    if not (folder / "tokenizer.json").is_file():
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(folder)


def print_generic_words(documents: list) -> None:
    articles: dict[str, set[str]] = {}
    for document in documents:
        articles.setdefault(document.title, set()).update(words_of(document.text))
    counts = Counter(w for words in articles.values() for w in words)
    rows = sorted(((counts[w] / len(articles), w) for w in GENERIC_WORDS), reverse=True)
    print(f"GENERIC_WORDS ({len(GENERIC_WORDS)}): fraction of the {len(articles)} articles containing each")
    print(", ".join(f"{w} {f:.2f}" for f, w in rows))


def mean_sd(values: list[float]) -> str:
    """Mean +- standard deviation over seeds."""
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{np.mean(values):+.3f} +- {sd:.3f}"


def table_settings(documents: list, reference: list[list[str]], seeds: list[int]) -> None:
    print(f"\nTable 1: LDA settings, c_npmi of the top 10 words per topic, {len(seeds)} seed(s) {seeds}")
    print("| setting | topics | dictionary | c_npmi, 10-token windows | c_npmi, paragraphs | worst topic | topics < 0 "
          "| fit s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, changes in SETTINGS:
        means, paragraph, worst, negative, fit_s = [], [], [], [], []
        for seed in seeds:
            config = config_for(changes, seed)
            start = time.perf_counter()
            topics = fit_lda_topics(documents, config)
            fit_s.append(time.perf_counter() - start)
            scores = topics.coherence(texts=reference)
            means.append(float(np.mean(scores)))
            worst.append(min(scores))
            negative.append(sum(s < 0 for s in scores))
            paragraph.append(float(np.mean(topics.coherence(texts=reference, window_size=PARAGRAPH))))
        print(f"| {label} | {config.n_topics} | {len(topics.dictionary):,} | {mean_sd(means)} | {mean_sd(paragraph)} | "
              f"{np.mean(worst):+.3f} | {np.mean(negative):.1f} | {np.mean(fit_s):.1f} |", flush=True)
    example = fit_lda_topics(documents, LdaTopicConfig())
    scores = example.coherence(texts=reference)
    paragraph = example.coherence(texts=reference, window_size=PARAGRAPH)
    print("\nLdaTopicConfig() topics (seed 0): c_npmi (10-token windows, paragraphs) and top 8 words:")
    for t in np.argsort(scores)[::-1]:
        print(f"  {scores[t]:+.3f} {paragraph[t]:+.3f}  {', '.join(example.top_words(int(t), 8))}")


def table_assignments(documents: list, reference: list[list[str]], seeds: list[int]) -> None:
    tokenizer = smollm2_tokenizer()
    print(f"\nTable 2: word -> topic rules on LdaTopicConfig() fits, mean over seed(s) {seeds}"
          + ("" if tokenizer else " (SmolLM2 tokenizer not in the cache: single-token column skipped)"))
    print("| rule | words assigned | single SmolLM2 token | topics with >= 10 words | c_npmi of assigned top 10 "
          "(10-token windows) | (paragraphs) | c_npmi of all assigned words (paragraphs) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    fits = [fit_lda_topics(documents, dataclasses.replace(LdaTopicConfig(), seed=seed)) for seed in seeds]
    for label, changes in ASSIGNMENTS:
        n_words, n_single, n_full, npmi, npmi_paragraph, npmi_all = [], [], [], [], [], []
        for topics in fits:
            topics = dataclasses.replace(topics, config=dataclasses.replace(topics.config, **changes))
            words = assign_word_topics(topics)
            n_words.append(len(words))
            per_topic = Counter(words.values())
            n_full.append(sum(per_topic[t] >= 10 for t in range(topics.config.n_topics)))
            if tokenizer is not None and words:
                n_single.append(token_topic_labels(words, tokenizer, len(tokenizer)).n_words_mapped)
            npmi.append(float(np.nanmean(topics.coherence(texts=reference, word_topics=words))))
            npmi_paragraph.append(float(np.nanmean(topics.coherence(texts=reference, word_topics=words,
                                                                    window_size=PARAGRAPH))))
            largest = max(max(per_topic.values(), default=0), 2)
            npmi_all.append(float(np.nanmean(topics.coherence(texts=reference, word_topics=words, topn=largest,
                                                              window_size=PARAGRAPH))))
        single = f"{np.mean(n_single):,.0f}" if n_single else "—"
        print(f"| {label} | {np.mean(n_words):,.0f} | {single} | {np.mean(n_full):.1f} | {np.mean(npmi):+.3f} | "
              f"{np.mean(npmi_paragraph):+.3f} | {np.mean(npmi_all):+.3f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-documents", type=int, default=4000, help="paragraphs of the report corpus")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="LDA seeds per setting")
    parser.add_argument("--generic-words", action="store_true", help="print GENERIC_WORDS' article fractions and exit")
    args = parser.parse_args()
    logging.getLogger("gensim").setLevel(logging.WARNING)
    documents = list(iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200,
                                    max_documents=args.max_documents))
    if args.generic_words:
        print_generic_words(documents)
        return
    reference = [words_of(d.text, BASE.min_word_length) for d in documents]
    print(f"{len(documents)} paragraphs; reference for c_npmi: {sum(map(len, reference)):,} tokens "
          f"(gensim STOPWORDS removed, windows of 10)")
    table_settings(documents, reference, args.seeds)
    table_assignments(documents, reference, args.seeds)


if __name__ == "__main__":
    main()
