"""Cost of the report's K-composition edge (issue 47) beside one forward of the same sequences, in one process.

Measured on ``--model`` (one thread by default), each timed once after a warm-up forward and then counted once with
``torch.utils.flop_counter.FlopCounterMode``:

1. one forward of the report's ``--sequences`` rows of [BOS] X X (|X| = ``--seq-len``);
2. the report's edge and its null (:func:`analyses.pretrained.circuit_edge.measure_circuit`: the sender's means, the
   edge with both effects, up to ``--draws`` random edges on the receiver's score alone, stopped sequentially, the
   bootstrap);
3. the random-weight control's same edge, measured the same way (its null usually stops after 10 draws);
4. for comparison, the edge with a null of both effects (``null_loss=True``: each random edge run to the loss).

The edge is the best previous-token head below the best induction head on two other batches of [BOS] X X, unless
``--edge`` names it. Printed: a table of seconds and GFLOP, each as a multiple of the forward, and the draws; the
issue's goal is (2) + (3) at most 20 forwards. Run::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/edge_cost.py --out runs/edge_cost.json
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import json
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

import probes
from analyses.ablate import parse_heads
from analyses.cli_checks import (
    ScriptParser,
    check_block_fits,
    count_arg,
    script_main,
    seed_arg,
    threads_arg,
)
from analyses.output_paths import check_output_file, write_output_file
from analyses.pretrained.circuit_edge import CircuitConfig, circuit_heads, circuit_protocol, measure_circuit
from analyses.toy_model_loader import check_pretrained_spec
from probes.causal import EFFECTS, edge_effect, repeated_half
from probes.core.errors import ConfigError


def timed_and_counted(run: Callable[[], Any]) -> tuple[float, int, Any]:
    """(seconds, FLOPs, result) of ``run()``: timed once, then counted once."""
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    counter = FlopCounterMode(display=False)
    with counter:
        run()
    return seconds, counter.get_total_flops(), result


def chosen_edge(model: Any, config: CircuitConfig, seed: int) -> tuple[tuple[int, int], tuple[int, int], tuple]:
    """The best previous-token head below the best induction head on two batches drawn apart from the measured
    ones."""
    info = probes.ModelInfo.of(model)
    generator = torch.Generator().manual_seed(seed + 2)
    batches = [probes.repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=config.sequences,
                                             generator=generator) for _ in range(2)]
    scores = probes.head_scores(model, batches, kinds=("previous_token", "induction"))
    heads = circuit_heads(scores.top_heads("previous_token", info.n_layers * info.n_heads),
                          scores.top_heads("induction", 1))
    if heads is None:
        raise ConfigError("No previous-token head lies below the best induction head; name the edge with --edge.")
    return heads


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--edge", help="SENDER,RECEIVER as LAYER.HEAD pairs, e.g. 16.0,18.6 (default: chosen)")
    parser.add_argument("--draws", type=count_arg(100), default=CircuitConfig.draws)
    parser.add_argument("--sequences", type=count_arg(2), default=CircuitConfig.sequences)
    parser.add_argument("--seq-len", type=count_arg(4), default=CircuitConfig.seq_len)
    parser.add_argument("--seed", type=seed_arg, default=0)
    parser.add_argument("--threads", type=threads_arg(1), default=1)
    parser.add_argument("--no-both", action="store_true", help="skip (4), the null of both effects")
    parser.add_argument("--out", dest="json", metavar="FILE.json", help="also write the measurements to this file")
    args = parser.parse_args()
    check_pretrained_spec("--model", args.model)
    edge = None if args.edge is None else parse_heads(args.edge, "--edge")
    if edge is not None and len(edge) != 2:
        parser.error(f"--edge takes two heads, the sender and the receiver; got {len(edge)}")
    if args.json is not None:
        check_output_file("--out", args.json)
    torch.set_num_threads(args.threads)
    config = CircuitConfig(enabled=True, draws=args.draws, seq_len=args.seq_len, sequences=args.sequences)

    model = probes.load_model(args.model)
    check_block_fits("--seq-len", args.seq_len, probes.ModelInfo.of(model))
    heads = chosen_edge(model, config, args.seed) if edge is None else (edge[0], edge[1], (float("nan"),) * 2)
    control = probes.random_weight_control(model, seed=args.seed)
    batch = circuit_protocol(probes.ModelInfo.of(model), config, args.seed)[0]
    with torch.inference_mode():
        model(batch.tokens)  # warm-up

        def forward() -> None:
            with torch.inference_mode():
                model(batch.tokens)

        rows: dict[str, tuple[float, int, int]] = {}
        seconds, flops, _ = timed_and_counted(forward)
        rows["one forward"] = (seconds, flops, 0)
    for name, on in (("edge + null (score)", model), ("control edge + null", control)):
        seconds, flops, measured = timed_and_counted(lambda on=on: measure_circuit(on, heads, config, n_boot=1000,
                                                                                    seed=args.seed))
        rows[name] = (seconds, flops, int(measured.edge.null.shape[0]))
        if on is model:
            own = measured
    rows["report (edge + control)"] = tuple(map(sum, zip(rows["edge + null (score)"], rows["control edge + null"])))
    if not args.no_both:
        seconds, flops, both = timed_and_counted(lambda: edge_effect(
            model, heads[0], heads[1], [batch], slice_fn=repeated_half(config.seq_len), input="k",
            method=config.method, n_draws=config.draws, seed=args.seed, stop_at=0.01))
        rows["edge + null (both effects)"] = (seconds, flops, int(both.null.shape[0]))

    base_seconds, base_flops, _ = rows["one forward"]
    print(f"{args.model}, {torch.get_num_threads()} thread(s): edge {own.edge.name}, {config.sequences} x "
          f"{batch.tokens.shape[1]} tokens, up to {config.draws} draws")
    print(f"{'':28s} {'seconds':>8s} {'x fwd':>7s} {'GFLOP':>8s} {'x fwd':>7s} {'draws':>6s}")
    table = {}
    for name, (seconds, flops, draws) in rows.items():
        table[name] = {"seconds": seconds, "seconds_x": seconds / base_seconds, "gflop": flops / 1e9,
                       "flops_x": flops / base_flops, "draws": draws}
        print(f"{name:28s} {seconds:8.2f} {seconds / base_seconds:7.1f} {flops / 1e9:8.2f} "
              f"{flops / base_flops:7.1f} {draws:6d}")
    finding, loss = own.finding(), float(own.edge.value[EFFECTS.index("loss_change")])
    print(f"score drop {finding.value:+.3f} [{finding.ci[0]:.3f}, {finding.ci[1]:.3f}], null q99 "
          f"{finding.null_value:+.3f}, p {finding.p_value:.4f}; loss change {loss:+.3f}")
    if args.json is not None:
        write_output_file(args.json, json.dumps({"model": args.model, "edge": own.edge.name,
                                                 "threads": torch.get_num_threads(),
                                                 "tokens": list(batch.tokens.shape), "rows": table}, indent=1))


if __name__ == "__main__":
    main()
