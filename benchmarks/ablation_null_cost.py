"""Cost of the random-head null of head ablation beside one bare forward pass over the same batches.

Times (1) one bare forward per batch, (2) :func:`probes.causal.ablation_sums` with the measured heads and
``--draws`` random head sets (the clean pass, the measured set and the draws, ``--max-rows`` rows per forward),
and prints the ratio (2)/(1) and the peak memory of each. The issue's target: the 200-draw null at most 20x one
forward. Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ablation_null_cost.py --model smollm2-135m --draws 200
"""

from __future__ import annotations

import argparse
import resource
import time

import torch

import probes
from probes.causal import AblationPlan, ablation_sums, head_output_means, repeated_half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", default="", help="L.H,... (default: the top --k induction heads)")
    parser.add_argument("--k", type=int, default=5)
    parser.add_argument("--method", default="mean", choices=probes.ABLATION_METHODS)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=50)
    parser.add_argument("--max-rows", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = probes.load_model(args.model, device=args.device)
    info = probes.ModelInfo.of(model)
    g = torch.Generator().manual_seed(0)
    batches = [probes.repeated_random_tokens(info, seq_len=args.seq_len, n_sequences=args.batch_size, generator=g)
               .to(args.device) for _ in range(args.batches)]
    if args.heads:
        heads = [tuple(int(v) for v in pair.split(".")) for pair in args.heads.split(",")]
    else:
        heads = [(l, h) for l, h, _ in probes.head_scores(model, batches, kinds=("induction",)).top_heads("induction", args.k)]
    plan = AblationPlan.build(info, heads, method=args.method, n_draws=args.draws, seed=0)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    with torch.inference_mode():
        model(batches[0].tokens)  # warm-up
        sync()
        start = time.perf_counter()
        for batch in batches:
            model(batch.tokens)
        sync()
        bare = time.perf_counter() - start
        if args.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        means = head_output_means(model, plan.layers, batches) if args.method == "mean" else None
        sums = ablation_sums(model, plan, batches, {"repeated_half": repeated_half(args.seq_len)}, means=means,
                             max_rows=args.max_rows)
        sync()
        null = time.perf_counter() - start
    peak = (torch.cuda.max_memory_allocated() / 2**20 if args.device.startswith("cuda")
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10)
    change = sums.loss_change()[:, 0]
    print(f"{info.name} on {args.device} ({args.threads} threads), {args.batches} batches x {args.batch_size} rows x "
          f"{batches[0].shape[1]} tokens, heads {heads}, method {args.method}, {args.draws} draws, "
          f"max_rows {args.max_rows}")
    print(f"bare forward: {bare:.2f} s; ablation + null: {null:.2f} s; ratio {null / bare:.1f}x "
          f"({null / bare / max(1, args.draws + 1):.2f}x per head set); peak memory {peak:.0f} MiB")
    print(f"loss change of the heads {float(change[0]):+.3f}; null q99 "
          f"{float(torch.quantile(change[1:], 0.99)) if args.draws else float('nan'):+.3f}")


if __name__ == "__main__":
    main()
