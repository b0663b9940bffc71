"""Wall time of our head-score probes against a bare forward pass, a full run_with_cache and detect_head.

All routes see the same model and the same repeated-random-token sequences ([BOS] X X). The
routes run round-robin ``--repeats`` times and the median of each is reported, so background
load hits them alike; the ratios are the result, not the absolute times.

    .venv/bin/python benchmarks/head_scores_speed.py --model smollm2-135m --seq-len 50 --batch-size 8 --batches 2

detect_head takes one string at a time and re-tokenizes it, so it gets each sequence decoded to
text (its token count is printed beside ours) and runs its own full cache per call, as its API does.
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch
from transformer_lens.head_detector import detect_head

import probes
from analyses.cli_checks import (
    ScriptParser,
    check_block_fits,
    check_detect_sequences,
    count_arg,
    script_main,
    threads_arg,
)
from analyses.toy_model_loader import check_pretrained_spec


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seq-len", type=count_arg(2), default=50)
    parser.add_argument("--batch-size", type=count_arg(1), default=8)
    parser.add_argument("--batches", type=count_arg(1), default=2)
    parser.add_argument("--repeats", type=count_arg(1), default=3)
    parser.add_argument("--detect-sequences", type=count_arg(1), default=4,
                        help="sequences given to detect_head (its time is scaled to all sequences)")
    parser.add_argument("--threads", type=threads_arg(0), default=0, help="torch threads (0 = torch's default)")
    args = parser.parse_args()
    check_pretrained_spec("--model", args.model)
    check_detect_sequences(args.detect_sequences, args.batch_size)
    if args.threads:
        torch.set_num_threads(args.threads)

    model = probes.load_model(args.model)
    info = probes.ModelInfo.of(model)
    check_block_fits("--seq-len", args.seq_len, info)
    generator = torch.Generator().manual_seed(0)
    batches = [probes.repeated_random_tokens(info, seq_len=args.seq_len, n_sequences=args.batch_size,
                                             generator=generator) for _ in range(args.batches)]
    n_sequences = args.batch_size * args.batches
    texts = [model.to_string(row[1:]) for row in batches[0].tokens[: args.detect_sequences]]

    def bare_forward() -> None:
        with torch.inference_mode():
            for batch in batches:
                model(batch.tokens)

    def our_probes() -> None:
        probes.run_probes(model, [probes.HeadScoreProbe()], batches, progress=False)

    def full_cache() -> None:
        with torch.inference_mode():
            for batch in batches:
                model.run_with_cache(batch.tokens)

    def detect_head_three_kinds() -> None:
        with torch.inference_mode():
            for text in texts:
                for name in ("induction_head", "previous_token_head", "duplicate_token_head"):
                    detect_head(model, text, name)

    routes = {"bare forward": bare_forward, "mechprobe head scores (3 kinds)": our_probes,
              "run_with_cache, no filter": full_cache, "detect_head x 3 kinds": detect_head_three_kinds}
    our_probes()  # warm-up (first-call allocations)
    times: dict[str, list[float]] = {name: [] for name in routes}
    for _ in range(args.repeats):
        for name, fn in routes.items():
            times[name].append(timed(fn))
    medians = {name: statistics.median(values) for name, values in times.items()}
    medians["detect_head x 3 kinds"] *= n_sequences / len(texts)
    base = medians["bare forward"]
    detect_tokens = [model.to_tokens(t).shape[1] for t in texts]
    print(f"model {args.model}; {n_sequences} sequences of {batches[0].tokens.shape[1]} tokens "
          f"(detect_head's re-tokenized lengths: {detect_tokens}); torch threads {torch.get_num_threads()}; "
          f"median of {args.repeats}")
    print(f"{'route':<34} {'seconds':>8} {'x bare forward':>15}")
    for name, seconds in medians.items():
        print(f"{name:<34} {seconds:>8.3f} {seconds / base:>15.2f}")


if __name__ == "__main__":
    main()
