"""Wall time of gensim LDA (probes.text.topics.fit_lda_topics, default LdaTopicConfig) on the embedded corpus and
WikiText-2.

Corpora: the embedded Wikipedia excerpt (``iter_documents("wikipedia-excerpt", min_chars=200,
max_documents=4000)`` paragraphs) and the WikiText-2 test split
(``../shared/data/wikitext-2-raw/wiki.test.raw`` paragraphs of >= 200 characters; skipped with
a message when the file is absent). Reading the corpus, the fit (tokenizing, dictionary,
``filter_extremes``, LdaModel) and the word -> topic assignment are timed separately.

    .venv/bin/python benchmarks/lda_speed.py
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import logging
import time
from pathlib import Path

from analyses.cli_checks import ScriptParser, count_arg, script_main, sized_by
from probes.text.corpora import iter_documents
from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics

WIKITEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.test.raw"


def measure(name: str, spec: object, max_documents: int | None, config: LdaTopicConfig) -> None:
    start = time.perf_counter()
    documents = list(iter_documents(spec, min_chars=200, max_documents=max_documents))
    read_s = time.perf_counter() - start
    start = time.perf_counter()
    topics = fit_lda_topics(documents, config)
    fit_s = time.perf_counter() - start
    start = time.perf_counter()
    words = assign_word_topics(topics)
    assign_s = time.perf_counter() - start
    n_chars = sum(len(d.text) for d in documents)
    print(f"{name:<22} {len(documents):>9} {n_chars / 1e6:>7.2f} {len(topics.dictionary):>11} {read_s:>7.2f} "
          f"{fit_s:>7.2f} {assign_s:>8.3f} {len(words):>12}")


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-documents", type=count_arg(1), default=4000, help="paragraphs of the embedded corpus")
    args = parser.parse_args()
    logging.getLogger("gensim").setLevel(logging.WARNING)
    config = LdaTopicConfig()
    print(f"LdaTopicConfig(): {config.n_topics} topics, {config.passes} passes, {config.iterations} iterations, "
          f"chunksize {config.chunksize}; gensim LdaModel (single process)")
    print(f"{'corpus':<22} {'documents':>9} {'M chars':>7} {'dictionary':>11} {'read s':>7} {'fit s':>7} "
          f"{'assign s':>8} {'topic words':>12}")
    with sized_by("--max-documents", args.max_documents, "4000"):
        measure("wikipedia-excerpt", "wikipedia-excerpt", args.max_documents, config)
    if WIKITEXT.is_file():
        measure("wikitext-2 test", WIKITEXT, None, config)
    else:
        print(f"wikitext-2 test: skipped, {WIKITEXT} is absent")


if __name__ == "__main__":
    main()
