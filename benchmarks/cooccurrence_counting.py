"""Co-occurrence counting throughput: probes.text.cooccurrence.count_cooccurrence vs a plain Python dict count.

Same corpus (WikiText-2 test tokenized with MiniLM's tokenizer into windows, or the embedded
Wikipedia excerpt when ../shared is absent), same pairs (each query position holding one of the
K most frequent tokens, every earlier position holding one of them), same counts (checked). Both routes
are timed round robin after one warm-up call of ours; the medians are compared.

    .venv/bin/python benchmarks/cooccurrence_counting.py --windows 400 --seq-len 128 --top-k 200
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import os
import statistics
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch

import probes
from analyses.cli_checks import ScriptParser, count_arg, script_main
from probes.core.errors import InputError
from probes.text.cooccurrence import count_cooccurrence
from probes.text.corpora import iter_documents

WIKITEXT = Path(__file__).resolve().parents[2] / "shared" / "data" / "wikitext-2-raw" / "wiki.test.raw"


def python_count(rows: list[list[int]], tracked: set[int]) -> Counter:
    counts: Counter = Counter()
    for row in rows:
        for q, query in enumerate(row):
            if query not in tracked:
                continue
            for key in row[:q]:
                if key in tracked:
                    counts[(query, key)] += 1
    return counts


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=count_arg(1), default=400)
    parser.add_argument("--seq-len", type=count_arg(1), default=128)
    parser.add_argument("--top-k", type=count_arg(1), default=200)
    parser.add_argument("--repeats", type=count_arg(1), default=5, help="timed repeats of each route (median reported)")
    args = parser.parse_args()
    tokenizer = probes.load_model("minilm-l6").tokenizer
    corpus = WIKITEXT if WIKITEXT.is_file() else "wikipedia-excerpt"
    ids: list[int] = []
    for document in iter_documents(corpus, min_chars=100):
        ids += tokenizer.encode(document.text, add_special_tokens=False)
        if len(ids) >= args.windows * args.seq_len:
            break
    needed, name = args.windows * args.seq_len, corpus if isinstance(corpus, str) else corpus.name
    if len(ids) < needed:
        raise InputError(f"--windows {args.windows} x --seq-len {args.seq_len} = {needed:,} tokens, but the corpus "
                         f"{name} gives {len(ids):,}; give fewer --windows or a shorter --seq-len.")
    distinct = len(set(ids[:needed]))
    if args.top_k > distinct:
        raise InputError(f"--top-k {args.top_k}: the {needed:,} tokens counted hold {distinct:,} distinct tokens, so "
                         f"tokens never seen would be tracked; give --top-k {distinct} or fewer, or more --windows.")
    tokens = torch.tensor(ids[:needed]).reshape(args.windows, args.seq_len)
    top = torch.bincount(tokens.flatten()).topk(args.top_k).indices.sort().values.tolist()

    rows, tracked = tokens.tolist(), set(top)
    count_cooccurrence(tokens, top, top)  # warm-up: first calls pay for allocator and kernel set-up
    ours_times, python_times = [], []
    for _ in range(args.repeats):  # round robin, so load changes hit both routes alike
        start = time.perf_counter()
        ours = count_cooccurrence(tokens, top, top, query_position="all", causal=True, exclude_self=True)
        ours_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        reference = python_count(rows, tracked)
        python_times.append(time.perf_counter() - start)
    ours_s, python_s = statistics.median(ours_times), statistics.median(python_times)

    position = {t: i for i, t in enumerate(top)}
    dense = torch.zeros(len(top), len(top), dtype=torch.float64)
    for (query, key), count in reference.items():
        dense[position[query], position[key]] = count
    same = torch.equal(dense, ours)
    n_tokens = tokens.numel()
    print(f"corpus {corpus if isinstance(corpus, str) else corpus.name}: {n_tokens} tokens in {args.windows} windows "
          f"of {args.seq_len}; {args.top_k} tracked tokens; {int(ours.sum())} pairs; torch threads "
          f"{torch.get_num_threads()}")
    print(f"load average {Path('/proc/loadavg').read_text().split()[:3]}; median of {args.repeats} repeats")
    print(f"{'route':<28} {'seconds':>8} {'tokens/s':>12}")
    print(f"{'count_cooccurrence':<28} {ours_s:>8.3f} {n_tokens / ours_s:>12.0f}")
    print(f"{'python dict':<28} {python_s:>8.3f} {n_tokens / python_s:>12.0f}")
    print(f"speed-up {python_s / ours_s:.1f}x; identical counts: {same}")


if __name__ == "__main__":
    main()
