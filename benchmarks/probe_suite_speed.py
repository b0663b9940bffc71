"""Wall time of the pretrained probe suite against a bare forward pass, run_with_cache and detect_head, on real text.

One model, the same text batches for every route (Wikipedia-excerpt paragraphs cut into windows
by probes.text_token_batches, topic labels from a small gensim LDA). Routes run round-robin
``--repeats`` times; the median of each is reported as a ratio to the bare forward pass:

- bare forward: ``model(tokens, attention_mask=...)`` under ``torch.inference_mode``;
- the suite through ``probes.run_probes``: HeadScoreProbe, GeneralizedInductionProbe(3),
  TopicAttentionProbe(labels), KeyTokenAttentionProbe(top-100 labelled tokens x same);
- each probe alone through ``probes.run_probes`` (where the suite's cost goes), and the runner's
  ``capture`` of the suite's hooks with no probe math (the forward pass the probes pay for);
- ``run_with_cache`` with no filter;
- ``transformer_lens.head_detector.detect_head`` for its three kinds, one decoded sequence per
  call as its API works, timed on ``--detect-sequences`` rows and scaled to all rows.

    .venv/bin/python benchmarks/probe_suite_speed.py --model minilm-l6
    .venv/bin/python benchmarks/probe_suite_speed.py --model smollm2-135m   # ~5 min on 2 cores
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import logging
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformer_lens.head_detector import detect_head

import probes
from analyses.cli_checks import (
    ScriptParser,
    check_detect_sequences,
    count_arg,
    script_main,
    sized_by,
    threads_arg,
)
from analyses.toy_model_loader import check_pretrained_spec
from probes.text.corpora import iter_documents
from probes.text.token_topics import token_topic_labels
from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics

DETECT_KINDS = ("induction_head", "previous_token_head", "duplicate_token_head")
# A small LDA on a few hundred paragraphs: every paragraph its own chunk, nothing held out. LdaTopicConfig()'s
# defaults are for the whole excerpt (400-word article chunks, words in >= 10 of them, 20 % held out); on 600
# paragraphs they leave ~100 words, which 10 topics x 50 top words claim several times over: no word is assigned.
SMALL_CORPUS_TOPICS = LdaTopicConfig(n_topics=10, passes=2, iterations=50, chunk_words=0, no_below=5,
                                     held_out_fraction=0.0)


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def frequent_labelled_tokens(batches: list[probes.TokenBatch], labels: torch.Tensor, k: int) -> list[int]:
    """The ``k`` most frequent topic-labelled ids among the valid positions of ``batches``."""
    counts = torch.zeros(labels.shape[0], dtype=torch.long)
    for batch in batches:
        counts += torch.bincount(batch.tokens[batch.valid], minlength=labels.shape[0])[: labels.shape[0]]
    counts[labels < 0] = 0
    return sorted(int(t) for t in counts.topk(min(k, int((counts > 0).sum()))).indices)


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="minilm-l6", help="minilm-l6 or smollm2-135m (any probes.load_model spec)")
    parser.add_argument("--seq-len", type=count_arg(18), default=128,
                        help="tokens a text row holds (>= 18: at least 16 of text besides BOS and SEP)")
    parser.add_argument("--batch-size", type=count_arg(1), default=8)
    parser.add_argument("--batches", type=count_arg(1), default=2)
    parser.add_argument("--repeats", type=count_arg(1), default=3)
    parser.add_argument("--lda-documents", type=count_arg(1), default=600, help="paragraphs the small LDA is fitted on")
    parser.add_argument("--pair-tokens", type=count_arg(1), default=100)
    parser.add_argument("--detect-sequences", type=count_arg(1), default=1,
                        help="sequences given to detect_head (its time is scaled to all sequences)")
    parser.add_argument("--threads", type=threads_arg(0), default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    check_pretrained_spec("--model", args.model)
    check_detect_sequences(args.detect_sequences, args.batch_size)
    logging.getLogger("gensim").setLevel(logging.WARNING)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = probes.load_model(args.model)
    info = probes.ModelInfo.of(model)
    documents = list(iter_documents("wikipedia-excerpt", min_chars=200, max_documents=args.lda_documents))
    with sized_by("--lda-documents", args.lda_documents, "600"):
        topic_model = fit_lda_topics(documents, SMALL_CORPUS_TOPICS)
        labels = token_topic_labels(assign_word_topics(topic_model), model.tokenizer, info.d_vocab).labels
    batches = list(probes.text_token_batches(documents, model.tokenizer, info, seq_len=args.seq_len,
                                             batch_size=args.batch_size, max_batches=args.batches))
    pair_tokens = frequent_labelled_tokens(batches, labels, args.pair_tokens)
    n_rows = sum(b.tokens.shape[0] for b in batches)
    texts = [model.tokenizer.decode(row[mask.bool()].tolist(), skip_special_tokens=True)
             for row, mask in zip(batches[0].tokens, batches[0].attention_mask)][: args.detect_sequences]

    def make_probes() -> dict[str, probes.Probe]:
        return {
            "HeadScoreProbe": probes.HeadScoreProbe(),
            "GeneralizedInductionProbe(3)": probes.GeneralizedInductionProbe(3),
            "TopicAttentionProbe": probes.TopicAttentionProbe(labels),
            f"KeyTokenAttentionProbe({len(pair_tokens)}x{len(pair_tokens)})":
                probes.KeyTokenAttentionProbe(pair_tokens, pair_tokens, query_position="all"),
        }

    def bare_forward() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(batch.tokens, attention_mask=batch.attention_mask)

    hook_names = sorted({name for probe in make_probes().values() for name in probe.hook_names(info)})

    def capture_only() -> None:
        with torch.inference_mode():
            for batch in batches:
                probes.capture(model, batch, hook_names)

    def suite() -> None:
        probes.run_probes(model, list(make_probes().values()), batches, progress=False)

    def alone(name: str):
        return lambda: probes.run_probes(model, [make_probes()[name]], batches, progress=False)

    def full_cache() -> None:
        with torch.inference_mode():
            for batch in batches:
                model.run_with_cache(batch.tokens, attention_mask=batch.attention_mask)

    def detect_head_three_kinds() -> None:
        with torch.inference_mode():
            for text in texts:
                for kind in DETECT_KINDS:
                    detect_head(model, text, kind)

    routes = {"bare forward": bare_forward, "capture only (suite's hooks, no probe math)": capture_only,
              "probe suite (4 probes)": suite}
    routes.update({f"  {name} alone": alone(name) for name in make_probes()})
    routes.update({"run_with_cache, no filter": full_cache, "detect_head x 3 kinds": detect_head_three_kinds})
    suite()  # warm-up (first-call allocations)
    times: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(args.repeats):
        for name, fn in routes.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["detect_head x 3 kinds"] *= n_rows / len(texts)
    base = medians["bare forward"]
    n_tokens = sum(int(b.attention_mask.sum()) for b in batches)
    print(f"model {args.model} ({info.n_layers} layers x {info.n_heads} heads); {n_rows} rows in {len(batches)} "
          f"batches of <= {args.seq_len} tokens ({n_tokens} real tokens); {int((labels >= 0).sum())} topic-labelled "
          f"vocabulary ids, {len(pair_tokens)} pair tokens; torch threads {torch.get_num_threads()}; "
          f"median of {args.repeats} round-robin repeats; detect_head timed on {len(texts)} rows, scaled")
    print(f"{'route':<46} {'seconds':>8} {'x bare forward':>15}")
    for name, seconds in medians.items():
        print(f"{name:<46} {seconds:>8.3f} {seconds / base:>15.2f}")
    print(f"suite / bare forward = {medians['probe suite (4 probes)'] / base:.2f} (target <= 1.15)")


if __name__ == "__main__":
    main()
