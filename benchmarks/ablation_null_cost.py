"""Cost of the random-head null of head ablation beside one bare forward pass and the probe suite, on the same batches.

Two fresh processes, so each peak memory is its own (``ru_maxrss`` of the process on CPU, model weights included;
``torch.cuda.max_memory_allocated`` on CUDA):

1. the probe suite: :func:`probes.head_scores` (every head-score kind) over the batches; it also picks the top
   ``--k`` induction heads unless ``--heads`` names them;
2. the ablation: one bare forward per batch (timed after a warm-up), then the heads' means (``--method mean``) and
   :func:`probes.causal.ablation_sums` with the measured heads and ``--draws`` random head sets matched by layer.

Printed: both times, the ratio of (2) to one bare forward over the batches (and per head set), both peaks and their
ratio, and the route the ablation took; with ``--count``, a third run of both counted instead of timed: FLOPs
(``FlopCounterMode``) and aten operator calls (on a GPU each is a launch, about 5 microseconds) of (2) against the
bare forwards. The issue's targets: the 200-draw null at most 20x one forward, peak memory
within 1.5x of the probe suite's. Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/ablation_null_cost.py --draws 200 --batches 2 --batch-size 4 \
        --seq-len 20
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import probes
from analyses.ablate import parse_heads
from analyses.cli_checks import (
    ScriptParser,
    check_block_fits,
    count_arg,
    device_arg,
    first_repeated,
    script_main,
    threads_arg,
)
from analyses.output_paths import check_output_file, write_output_file
from analyses.toy_model_loader import check_pretrained_spec
from probes.causal import AblationPlan, ablation_sums, head_output_means, repeated_half
from probes.causal.pass_size import PASS_BYTES
from probes.core.errors import ConfigError, InputError


def _batches(model, args):
    info = probes.ModelInfo.of(model)
    check_block_fits("--seq-len", args.seq_len, info)
    g = torch.Generator().manual_seed(0)
    return [probes.repeated_random_tokens(info, seq_len=args.seq_len, n_sequences=args.batch_size, generator=g)
            .to(args.device) for _ in range(args.batches)]


def _peak_mib(device: str) -> float:
    if device.startswith("cuda"):
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10


class OperatorCalls(TorchDispatchMode):
    """Counts the aten operator calls made inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls += 1
        return func(*args, **(kwargs or {}))


def counted(run) -> tuple[int, int]:
    """(FLOPs, aten operator calls) of ``run()``."""
    calls, flops = OperatorCalls(), FlopCounterMode(display=False)
    with flops, calls:
        run()
    return flops.get_total_flops(), calls.calls


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


ROUTES: list[str] = []


def logging_setup() -> None:
    """Keep the route :func:`probes.causal.routes.choose_route` logs (and its warnings)."""
    import logging

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            ROUTES.append(record.getMessage())

    logger = logging.getLogger("probes.causal.routes")
    logger.setLevel(logging.INFO)
    logger.addHandler(Keep())


def probe_suite(args) -> dict:
    """Child 1: head_scores over the batches; its time, peak and the top induction heads."""
    model = probes.load_model(args.model, device=args.device)
    batches = _batches(model, args)
    start = time.perf_counter()
    scores = probes.head_scores(model, batches)
    _sync(args.device)
    seconds = time.perf_counter() - start
    top = [[layer, head] for layer, head, _ in scores.top_heads("induction", args.k)]
    return {"seconds": seconds, "peak_mib": _peak_mib(args.device), "top_induction": top}


def ablation(args) -> dict:
    """Child 2: bare forwards, then means + ablation_sums with the null."""
    logging_setup()
    model = probes.load_model(args.model, device=args.device)
    info = probes.ModelInfo.of(model)
    batches = _batches(model, args)
    heads = [tuple(pair) for pair in json.loads(args.heads_json)]
    plan = AblationPlan.build(info, heads, method=args.method, n_draws=args.draws, seed=0)
    with torch.inference_mode():
        model(batches[0].tokens)  # warm-up
        _sync(args.device)
        start = time.perf_counter()
        for batch in batches:
            model(batch.tokens)
        _sync(args.device)
        bare = time.perf_counter() - start
    bare_peak = _peak_mib(args.device)
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    means = head_output_means(model, plan.layers, batches) if args.method == "mean" else None
    sums = ablation_sums(model, plan, batches, {"repeated_half": repeated_half(args.seq_len)}, means=means,
                         max_rows=args.max_rows, pass_bytes=args.pass_mib * 2**20, shortcuts=not args.no_shortcuts)
    _sync(args.device)
    null = time.perf_counter() - start
    change = sums.loss_change()[:, 0]
    counts = {}
    if args.count:
        def bare_run() -> None:
            with torch.inference_mode():
                for batch in batches:
                    model(batch.tokens)

        def null_run() -> None:
            means = head_output_means(model, plan.layers, batches) if args.method == "mean" else None
            ablation_sums(model, plan, batches, {"repeated_half": repeated_half(args.seq_len)}, means=means,
                          max_rows=args.max_rows, pass_bytes=args.pass_mib * 2**20, shortcuts=not args.no_shortcuts)

        (bare_flops, bare_calls), (null_flops, null_calls) = counted(bare_run), counted(null_run)
        counts = {"flops_x": null_flops / bare_flops, "calls_x": null_calls / bare_calls, "bare_flops": bare_flops,
                  "bare_calls": bare_calls}
    return {**counts, "bare": bare, "null": null, "bare_peak_mib": bare_peak, "peak_mib": _peak_mib(args.device),
            "change": float(change[0]), "null_q99": float(torch.quantile(change[1:], 0.99)) if args.draws else None,
            "tokens": batches[0].shape[1], "route": ROUTES[-1] if ROUTES else "plain"}


def _child(args, role: str, extra: list[str]) -> dict:
    command = [sys.executable, __file__, "--role", role, *sys.argv[1:], *extra]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:  # its own error is one line (script_main): said once, exit 2 (it was exit 1)
        said = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
        raise InputError(f"the {role} process failed: {said.removeprefix(f'{Path(__file__).name}: error: ')}")
    return json.loads(done.stdout.strip().splitlines()[-1])


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--heads", help="L.H,... (default: the top --k induction heads)")
    parser.add_argument("--k", type=count_arg(1), default=5)
    parser.add_argument("--method", default="mean", choices=probes.ABLATION_METHODS)
    parser.add_argument("--draws", type=count_arg(0), default=200)
    parser.add_argument("--batches", type=count_arg(1), default=2)
    parser.add_argument("--batch-size", type=count_arg(1), default=8)
    parser.add_argument("--seq-len", type=count_arg(2), default=50)
    parser.add_argument("--max-rows", type=count_arg(1), default=256)
    parser.add_argument("--pass-mib", type=count_arg(1), default=PASS_BYTES // 2**20,
                        help="activations one grouped pass may hold (probes.causal.pass_size)")
    parser.add_argument("--no-shortcuts", action="store_true", help="every pass through the whole model, full logits")
    parser.add_argument("--device", type=device_arg, default="cpu")
    parser.add_argument("--threads", type=threads_arg(1), default=1)
    parser.add_argument("--count", action="store_true",
                        help="also count FLOPs and aten operator calls of the null and the bare forwards")
    parser.add_argument("--json", help="also write both processes' measurements to this file")
    parser.add_argument("--role", choices=("suite", "ablation"), help=argparse.SUPPRESS)
    parser.add_argument("--heads-json", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    check_pretrained_spec("--model", args.model)
    heads = None if args.heads is None else [list(pair) for pair in parse_heads(args.heads)]
    twice = first_repeated(heads or [])
    if heads is not None and twice is not None:  # checked here, before the suite's process runs (the ablation's
        layer, head = heads[twice]                # would refuse it)
        raise ConfigError(f"--heads {args.heads} names {layer}.{head} twice; name each head once.")
    if args.json is not None:
        check_output_file("--json", args.json)
    torch.set_num_threads(args.threads)
    if args.role == "suite":
        print(json.dumps(probe_suite(args)))
        return
    if args.role == "ablation":
        print(json.dumps(ablation(args)))
        return
    if heads is None:  # the suite's process picks them
        suite = _child(args, "suite", [])
        heads = suite["top_induction"]
        run = _child(args, "ablation", ["--heads-json", json.dumps(heads)])
    else:  # named heads are checked against the model (in range, a null possible) before the suite's process runs
        run = _child(args, "ablation", ["--heads-json", json.dumps(heads)])
        suite = _child(args, "suite", [])
    ratio = run["null"] / run["bare"]
    print(f"{args.model} on {args.device} ({args.threads} threads), {args.batches} batches x {args.batch_size} rows x "
          f"{run['tokens']} tokens, heads {[tuple(h) for h in heads]}, method {args.method}, {args.draws} draws, "
          f"max_rows {args.max_rows}, pass budget {args.pass_mib} MiB")
    print(f"route: {run['route']}")
    print(f"bare forward: {run['bare']:.2f} s; ablation + null: {run['null']:.2f} s; ratio {ratio:.1f}x "
          f"({ratio / (args.draws + 1):.3f}x per head set)")
    if "flops_x" in run:
        print(f"counted: FLOPs {run['flops_x']:.1f}x, aten operator calls {run['calls_x']:.1f}x one bare forward "
              f"({run['bare_flops'] / 1e9:.1f} GFLOP, {run['bare_calls']} calls); time {ratio:.1f}x")
    print(f"peak memory (fresh processes): ablation {run['peak_mib']:.0f} MiB (after the bare forwards "
          f"{run['bare_peak_mib']:.0f} MiB); probe suite (head_scores, {suite['seconds']:.1f} s) "
          f"{suite['peak_mib']:.0f} MiB; ratio {run['peak_mib'] / suite['peak_mib']:.2f}x")
    q99 = run["null_q99"]
    print(f"loss change of the heads {run['change']:+.3f}; null q99 {q99 if q99 is None else f'{q99:+.3f}'}")
    if args.json is not None:
        write_output_file(args.json, json.dumps({"suite": suite, "ablation": run, "heads": heads, "draws": args.draws,
                                                 "x_bare_forward": ratio,
                                                 "peak_x_suite": run["peak_mib"] / suite["peak_mib"]}, indent=1))


if __name__ == "__main__":
    main()
