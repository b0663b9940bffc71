"""Peak RSS of a streaming probe run as the corpus grows 1x, 4x, 16x batches (target: flat).

Each size runs in a fresh Python process (this script re-invoked with ``--child N``), which loads
minilm-l6, fits the same small LDA for topic labels, and streams N text batches from the
Wikipedia excerpt (probes.text_token_batches, one batch in memory at a time) through
probes.feed_probes with the four pretrained probes (HeadScoreProbe, GeneralizedInductionProbe(3),
TopicAttentionProbe, KeyTokenAttentionProbe over a fixed list of 100 labelled tokens). The child
reports ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` before probing and at the end, so the
peaks of different sizes never mix.

    .venv/bin/python benchmarks/probe_memory.py --base-batches 2
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from analyses.cli_checks import ScriptParser, count_arg, script_main

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def child(n_batches: int, seq_len: int, batch_size: int) -> None:
    import logging

    import torch

    import probes
    from probes.text.corpora import iter_documents
    from probes.text.token_topics import token_topic_labels
    from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics

    logging.getLogger("gensim").setLevel(logging.WARNING)
    model = probes.load_model("minilm-l6")
    info = probes.ModelInfo.of(model)
    lda_docs = list(iter_documents("wikipedia-excerpt", min_chars=200, max_documents=600))
    topic_model = fit_lda_topics(lda_docs, LdaTopicConfig(n_topics=10, passes=2, iterations=50, chunk_words=0,
                                                         no_below=5, held_out_fraction=0.0))  # small-corpus settings
    labels = token_topic_labels(assign_word_topics(topic_model), model.tokenizer, info.d_vocab).labels
    del lda_docs, topic_model
    pair_tokens = sorted(int(t) for t in torch.nonzero(labels >= 0).flatten()[:100])
    suite = [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3), probes.TopicAttentionProbe(labels),
             probes.KeyTokenAttentionProbe(pair_tokens, pair_tokens, query_position="all")]
    before = peak_mib()
    batches = probes.text_token_batches(iter_documents("wikipedia-excerpt", min_chars=200), model.tokenizer, info,
                                        seq_len=seq_len, batch_size=batch_size, max_batches=n_batches)
    start = time.perf_counter()
    widths = []

    def widest(batch_stream):
        for batch in batch_stream:
            widths.append(batch.tokens.shape[1])
            yield batch

    probes.feed_probes(model, suite, widest(batches), progress=False)
    [probe.compute() for probe in suite]
    print(json.dumps({"batches": len(widths), "width": max(widths), "peak_before_mib": before,
                      "peak_mib": peak_mib(), "seconds": time.perf_counter() - start}))


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-batches", type=count_arg(1), default=2, help="batches of the 1x corpus")
    parser.add_argument("--factors", type=count_arg(1), nargs="+", default=[1, 4, 16])
    parser.add_argument("--seq-len", type=count_arg(18), default=128,
                        help="tokens a text row holds (>= 18: at least 16 of text besides BOS and SEP)")
    parser.add_argument("--batch-size", type=count_arg(1), default=8)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.seq_len, args.batch_size)
        return
    rows = []
    for factor in args.factors:
        n = factor * args.base_batches
        out = subprocess.run([sys.executable, __file__, "--child", str(n), "--seq-len", str(args.seq_len),
                              "--batch-size", str(args.batch_size)], capture_output=True, text=True, check=True)
        rows.append((factor, json.loads(out.stdout.strip().splitlines()[-1])))
    print(f"minilm-l6, 4 probes, batches of {args.batch_size} x <= {args.seq_len} tokens, one fresh process per size")
    print(f"{'corpus':>6} {'batches':>8} {'widest':>7} {'peak before probing MiB':>24} {'peak MiB':>9} "
          f"{'growth MiB':>11} {'seconds':>8}")
    first = rows[0][1]["peak_mib"]
    for factor, r in rows:
        print(f"{factor:>5}x {r['batches']:>8} {r['width']:>7} {r['peak_before_mib']:>24.0f} {r['peak_mib']:>9.0f} "
              f"{r['peak_mib'] - first:>11.0f} {r['seconds']:>8.1f}")
    last = rows[-1][1]["peak_mib"]
    print(f"peak at {rows[-1][0]}x / peak at {rows[0][0]}x = {last / first:.3f} (target: flat)")


if __name__ == "__main__":
    main()
