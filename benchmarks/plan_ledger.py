"""The cost ledger's table for benchmarks/RESULTS.md: the probe suite and the 200-draw ablation null against the bare
SDPA forward at GPU shapes and lengths, measured on the CPU (meta weights, the CUDA branch; analyses/plan).

For each shape and length: peak live bytes (what the route adds to the weights), FLOPs, device operator calls per
layer, the attention route of the layers, and the estimated time on an H100 and an H200 ("OOM" where weights plus
peak exceed the card). Then the GPU rows of issue 44 beside their estimates (analyses.plan.calibrate). Run::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/plan_ledger.py --json ledger.json      # ~30 min on 2 cores
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import json
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from analyses.cli_checks import ScriptParser, count_arg, script_main
from analyses.output_paths import check_output_file, write_output_file
from analyses.plan.command import MAX_TOKENS, layer_routes, ledger_record
from analyses.plan.estimate import GPUS, estimate
from analyses.plan.routes import ROUTES, run
from analyses.plan.shapes import SHAPES, meta_models


def _cell(ledger, gpu) -> str:
    found = estimate(ledger, gpu)
    return f"{found.seconds:.3g}" if found.fits else "OOM"


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=sorted(SHAPES))
    parser.add_argument("--lengths", nargs="+", type=count_arg(2), default=[8192, 32768, 131072])
    parser.add_argument("--routes", nargs="+", default=["bare", "suite", "null"], choices=ROUTES)
    parser.add_argument("--json", help="also write every ledger to this file")
    parser.add_argument("--no-calibration", action="store_true", help="skip the issue's GPU rows")
    args = parser.parse_args()
    if max(args.lengths) > MAX_TOKENS:
        parser.error(f"argument --lengths: at most {MAX_TOKENS} tokens; got {max(args.lengths)}")
    if args.json is not None:
        check_output_file("--json", args.json)
    records = []
    print("| shape | tokens | route | peak GiB (x bare) | TFLOP (x bare) | calls/layer (x bare) | attention | "
          "H100 s | H200 s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for shape in args.shapes:
        for n_pos in args.lengths:
            models = meta_models(shape, n_pos=n_pos)
            bare = None
            for route in args.routes:
                start = time.perf_counter()
                ledger = run(models, route, n_pos)
                bare = ledger if route == "bare" else bare

                def ratio(value: float, base: float | None, same: bool = ledger is bare) -> str:
                    return "" if same or not base else f" ({value / base:.2f}x)"

                print(f"| {shape} | {n_pos:,} | {route} | {ledger.peak_bytes / 2**30:,.2f}"
                      f"{ratio(ledger.peak_bytes, bare and bare.peak_bytes)} | {ledger.flops / 1e12:,.1f}"
                      f"{ratio(ledger.flops, bare and bare.flops)} | {ledger.calls_per_layer:,.0f}"
                      f"{ratio(ledger.calls_per_layer, bare and bare.calls_per_layer)} | {layer_routes(ledger)} | "
                      f"{_cell(ledger, GPUS['h100'])} | {_cell(ledger, GPUS['h200'])} |", flush=True)
                record = ledger_record(ledger, [estimate(ledger, gpu) for gpu in GPUS.values()])
                records.append({"shape": shape, "metered_s": time.perf_counter() - start, **record})
                if args.json:
                    write_output_file(args.json, json.dumps(records, indent=1))
    if not args.no_calibration:
        from analyses.plan import calibrate

        print()
        calibrate.main()


if __name__ == "__main__":
    main()
