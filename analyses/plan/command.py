"""``mechprobe plan``: will a route fit on a GPU, and how long will it take, answered on the CPU before renting one.

The routes run on ``meta`` weights at the model's shape (:mod:`analyses.plan.routes`); each row gives the memory
needed (weights plus the pass's peak), whether it fits each GPU, the estimated time there
(:mod:`analyses.plan.estimate`), FLOPs, device operator calls per layer, each layer's attention route and the
largest tensor. :data:`PLAN` is the command's record.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from analyses.cli_checks import count_arg, first_repeated, naming, text_arg
from analyses.cli_command import Command
from analyses.output_paths import check_not_read, check_output_file
from analyses.plan.estimate import GPUS, Estimate, estimate
from analyses.plan.routes import ROUTES, RouteLedger, run, why_not
from analyses.plan.shapes import SHAPES
from probes.core.errors import ConfigError
from probes.core.model_info import ModelInfo

MAX_TOKENS = 1 << 20
DEFAULT_ROUTES = ("bare", "bridge", "suite", "null")


def add_arguments(plan: argparse.ArgumentParser) -> None:
    """``plan``'s own flags (:data:`PLAN`; its --dtype is of the routes it plans, not the shared one)."""
    plan.add_argument("--model", required=True, metavar="M", type=text_arg,
                      help=f"a named shape ({', '.join(SHAPES)}) or a folder with a Hugging Face config.json")
    plan.add_argument("--tokens", required=True, type=count_arg(2), metavar="T",
                      help=f"tokens per sequence (2 .. {MAX_TOKENS:,})")
    plan.add_argument("--gpu", choices=sorted(GPUS), action="append",
                      help="the GPU to answer for (repeatable; default: both)")
    plan.add_argument("--routes", metavar="R,...",
                      help=f"comma-separated routes among {', '.join(ROUTES)} (default {','.join(DEFAULT_ROUTES)}, "
                      f"less those the model's shape has no heads for)")
    plan.add_argument("--batch", type=count_arg(1), default=1, metavar="B", help="sequences per batch (default 1)")
    plan.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="bfloat16",
                      help="weights and activations (default bfloat16)")
    plan.add_argument("--json", metavar="PATH", help="also write every number as JSON to PATH")


def parse_routes(text: str) -> tuple[str, ...]:
    """The routes ``--routes`` names: each known, none empty (``bare,,suite``) nor given twice (measured twice)."""
    routes = tuple(part.strip() for part in text.split(","))
    unknown = [r for r in routes if r not in ROUTES]
    if unknown:
        raise ConfigError(f"--routes takes a comma-separated list of {', '.join(ROUTES)}; got {text!r}.")
    twice = first_repeated(routes)
    if twice is not None:
        raise ConfigError(f"--routes {text}: {routes[twice]} is named twice; name each route once.")
    return routes


def check_plan_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The routes asked for; :class:`ConfigError` for a bad number (checked before any model is built)."""
    if args.tokens > MAX_TOKENS:
        raise ConfigError(f"--tokens must be at most {MAX_TOKENS:,}; got {args.tokens:,}.")
    if args.batch * args.tokens > MAX_TOKENS * 64:
        raise ConfigError(f"--batch x --tokens must be at most {MAX_TOKENS * 64:,}; got {args.batch * args.tokens:,}.")
    if args.json is not None:
        check_output_file("--json", args.json)
        check_not_read("--json", args.json, "--model", args.model)
    return DEFAULT_ROUTES if args.routes is None else parse_routes(args.routes)


def runnable_routes(routes: tuple[str, ...], info: Any, *, named: bool) -> tuple[tuple[str, ...], dict[str, str]]:
    """``routes`` less those the shape cannot run (:func:`~analyses.plan.routes.why_not`), and why each was left
    out; a route named in ``--routes`` (``named``) that cannot run is refused before any route runs."""
    left_out = {route: why for route in routes if (why := why_not(route, info)) is not None}
    if named and left_out:
        route, why = next(iter(left_out.items()))
        raise ConfigError(f"--routes {route}: the {route} route cannot run at this model's shape ({why}); leave "
                          f"{route} out of --routes.")
    return tuple(route for route in routes if route not in left_out), left_out


def _gib(nbytes: float) -> str:
    return f"{nbytes / 2**30:,.2f}"


def _time(found: Estimate) -> str:
    return f"{found.seconds:.3g} s" if found.fits else "does not fit"


def ledger_record(ledger: RouteLedger, estimates: list[Estimate]) -> dict[str, Any]:
    """One route's numbers as JSON."""
    return {
        "route": ledger.route, "tokens": ledger.n_pos, "batch": ledger.batch, "weight_bytes": ledger.weight_bytes,
        "peak_bytes": ledger.peak_bytes, "flops": ledger.flops, "device_calls": ledger.device_calls,
        "host_calls": ledger.host_calls, "calls_per_layer": [layer.device_calls for layer in ledger.layers],
        "calls_outside_layers": ledger.outside_calls,
        "attention_per_layer": [layer.attention for layer in ledger.layers],
        "largest": [{"bytes": a.nbytes, "shape": list(a.shape), "dtype": a.dtype, "op": a.op, "layer": a.layer,
                     "stack": list(a.stack)} for a in ledger.largest],
        "live_at_peak": [{"bytes": a.nbytes, "shape": list(a.shape), "op": a.op, "layer": a.layer}
                         for a in ledger.peak_live],
        "values_assumed": ledger.assumed_reads, "note": ledger.note,
        "gpus": {e.gpu.name: {"fits": e.fits, "needed_bytes": e.needed_bytes, "memory_bytes": e.gpu.memory_bytes,
                              "seconds": e.seconds, "kernel_seconds": e.kernel_seconds,
                              "call_seconds": e.call_seconds} for e in estimates},
    }


def layer_routes(ledger: RouteLedger) -> str:
    """Each layer's attention route, runs of equal layers merged: ``0-15 flash``."""
    parts: list[str] = []
    start = 0
    for index in range(1, len(ledger.layers) + 1):
        if index == len(ledger.layers) or ledger.layers[index].route != ledger.layers[start].route:
            span = f"{start}" if index - 1 == start else f"{start}-{index - 1}"
            parts.append(f"{span} {ledger.layers[start].route}")
            start = index
    return ", ".join(parts)


def run_plan_command(args: argparse.Namespace) -> int:
    import torch

    from analyses.plan.shapes import meta_models, shape_config

    routes = check_plan_args(args)
    with naming("--model"):
        name, _ = shape_config(args.model)
    gpus = [GPUS[g] for g in dict.fromkeys(args.gpu or sorted(GPUS))]
    models = meta_models(args.model, n_pos=args.tokens, dtype=getattr(torch, args.dtype))
    routes, left_out = runnable_routes(routes, ModelInfo.of(models.bridge), named=args.routes is not None)
    print(f"{name}, {args.batch} x {args.tokens:,} tokens, {args.dtype}; weights {_gib(models.weight_bytes())} GiB")
    for route, why in left_out.items():
        print(f"{route}: left out ({why})")
    header = f"{'route':<13} {'peak GiB':>9} {'TFLOP':>8} {'calls/layer':>11} " + " ".join(
        f"{g.name + ' (' + _gib(g.memory_bytes) + ' GiB)':>20}" for g in gpus)
    print(header)
    records = []
    for route in routes:
        ledger = run(models, route, args.tokens, batch=args.batch)
        found = [estimate(ledger, gpu) for gpu in gpus]
        records.append(ledger_record(ledger, found))
        print(f"{route:<13} {_gib(ledger.peak_bytes):>9} {ledger.flops / 1e12:>8.2f} {ledger.calls_per_layer:>11.0f} "
              + " ".join(f"{_time(e):>20}" for e in found))
        print(f"{'':<13} attention: {layer_routes(ledger)}; largest: "
              f"{ledger.largest[0].describe() if ledger.largest else '-'}"
              + (f"; {ledger.note}" if ledger.note else ""))
    for gpu in gpus:
        fitting = [r["route"] for r in records if r["gpus"][gpu.name]["fits"]]
        missing = [r["route"] for r in records if not r["gpus"][gpu.name]["fits"]]
        print(f"{gpu.label}: fits {', '.join(fitting) or 'nothing'}"
              + (f"; does not fit {', '.join(missing)}" if missing else ""))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": name, "tokens": args.tokens, "batch": args.batch,
                                               "dtype": args.dtype, "routes": records}, indent=1), encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


PLAN = Command(
    "plan", help="will a route fit on a GPU and how long will it take (measured on the CPU, no GPU needed)",
    description="Run mechprobe's own code at a model's shape on meta weights (no memory, no data; the kernels "
    "chosen as on CUDA) and report, per route, the memory it needs (weights + peak of live tensors), whether it "
    "fits an H100 (80 GB) or H200 (141 GB), the estimated time there (a roofline plus a per-call cost calibrated "
    "on an H200), FLOPs, operator calls per layer, each layer's attention route and the largest tensor.",
    add_arguments=add_arguments, run=run_plan_command,
)
