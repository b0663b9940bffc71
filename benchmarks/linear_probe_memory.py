"""Peak RSS of a LinearProbe run as the corpus grows (target: flat), and its fitting time.

Each size runs in a fresh Python process (this script re-invoked with ``--child N``): it loads the model,
streams N batches of Wikipedia-excerpt windows (one batch in memory at a time) through
``probes.feed_probes`` with one ``LinearProbe`` (previous tokens at distances 1 and 2 among the 20 most
frequent tokens of the first batch, every residual hook), then fits it. The child reports
``ru_maxrss`` after loading the model, after streaming and after fitting, the reservoir's size, and the
seconds spent streaming and fitting. What a probe that kept every labelled activation would hold is
printed beside it.

    .venv/bin/python benchmarks/linear_probe_memory.py --model minilm-l6 --base-batches 2 --scales 1,4,16,64
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

from analyses.cli_checks import ScriptParser, count_arg, list_arg, script_main
from analyses.toy_model_loader import check_pretrained_spec

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def child(model_name: str, n_batches: int, max_examples: int) -> None:
    import itertools

    import torch

    import probes
    from probes.text.corpora import iter_documents

    torch.set_num_threads(1)
    model = probes.load_model(model_name)
    info = probes.ModelInfo.of(model)
    documents = iter_documents("wikipedia-excerpt", unit="paragraph", min_chars=200)
    batches = probes.text_token_batches(documents, model.tokenizer, info, seq_len=128, batch_size=8,
                                        max_batches=n_batches)
    first = next(batches)
    labels = probes.PreviousTokenLabels((1, 2), probes.most_frequent_tokens([first], 20))
    probe = probes.LinearProbe(labels, hooks=probes.residual_hooks(model), max_examples=max_examples, n_boot=200)
    loaded = peak_mib()
    start = time.perf_counter()
    probes.feed_probes(model, [probe], itertools.chain([first], batches), progress=False)
    streamed_s, streamed = time.perf_counter() - start, peak_mib()
    reservoir = sum(t.numel() * t.element_size() for t in probe._features.values()) / 2**20
    labelled = int(probe._state["labelled"].sum())
    width = sum(t.shape[1] for t in probe._features.values())
    start = time.perf_counter()
    result = probe.compute()
    fit_s = time.perf_counter() - start
    print(json.dumps({"batches": n_batches, "peak_loaded_mib": loaded, "peak_streamed_mib": streamed,
                      "peak_fitted_mib": peak_mib(), "kept": probe.n_kept, "labelled_seen": labelled,
                      "reservoir_mib": reservoir, "keep_all_mib": labelled * width * 4 / 2**20,
                      "stream_s": streamed_s, "fit_s": fit_s, "hooks": len(result.hooks),
                      "accuracy_1_best": float(result.accuracy["1"].max())}))


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm-l6")
    parser.add_argument("--base-batches", type=count_arg(1), default=2, help="batches of 8 x 128 tokens at 1x")
    parser.add_argument("--scales", type=list_arg(count_arg(1)), default=[1, 2, 4, 8, 16])
    parser.add_argument("--max-examples", type=count_arg(1), default=2000)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    check_pretrained_spec("--model", args.model)
    if args.child is not None:
        child(args.model, args.child, args.max_examples)
        return
    print("| corpus | batches | labelled seen | kept | reservoir MiB | keep-all MiB | peak RSS loaded / streamed / "
          "fitted MiB | stream s | fit s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |")
    for scale in args.scales:
        n = scale * args.base_batches
        out = subprocess.run([sys.executable, __file__, "--model", args.model, "--max-examples", str(args.max_examples),
                              "--child", str(n)], check=True, capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"| {scale}x | {n} | {r['labelled_seen']} | {r['kept']} | {r['reservoir_mib']:.1f} | "
              f"{r['keep_all_mib']:.1f} | {r['peak_loaded_mib']:.0f} / {r['peak_streamed_mib']:.0f} / "
              f"{r['peak_fitted_mib']:.0f} | {r['stream_s']:.1f} | {r['fit_s']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
