"""``mechprobe circuit --model M --out D``: edges between heads by path patching, each beside random edges of its
shape and the random-weight control's same edge, with the composition screen beside them; a table on the terminal,
``D/circuit.json`` and ``D/circuit.png``. :data:`CIRCUIT` is the command's record."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

from analyses.circuit.figure import draw_circuit
from analyses.circuit.measure import (
    CircuitSettings,
    choose_heads,
    edge_findings,
    edge_pairs,
    measure_edges,
    protocol_batches,
    screen_correlations,
)
from analyses.cli_checks import check_pattern_name, int_arg, model_arg, seed_arg
from analyses.cli_command import Command
from analyses.output_paths import check_output_folder, written_atomically
from analyses.paper_result import write_json
from analyses.toy_model_loader import load_any_model, refuse_toy_dtype
from probes import ModelInfo, random_weight_control
from probes.causal import composition_scores
from probes.core.errors import ConfigError
from probes.core.loading import check_device, torch_dtype

RESULT_FILE = "circuit.json"
FIGURE_FILE = "circuit.png"


def parse_heads(flag: str, text: str) -> tuple[tuple[int, int], ...]:
    """``"16.0,17.2"`` -> ``((16, 0), (17, 2))``."""
    parts = [part.strip() for part in text.split(",")]
    if not all(re.fullmatch(r"\d+\.\d+", p) for p in parts):
        raise ConfigError(f"{flag} must be LAYER.HEAD pairs separated by commas, e.g. 16.0,17.2; got {text!r}.")
    return tuple((int(p.split(".")[0]), int(p.split(".")[1])) for p in parts)


def parse_top(flag: str, text: str) -> tuple[str, int]:
    """``"induction:2"`` -> ``("induction", 2)``."""
    match = re.fullmatch(r"([a-z_]+(?::-?\d+)?):(\d+)", text.strip())
    if not match or int(match.group(2)) < 1:
        raise ConfigError(f"{flag} must be KIND:K with K >= 1, e.g. induction:2; got {text!r}.")
    check_pattern_name(flag, match.group(1))
    return match.group(1), int(match.group(2))


def add_arguments(circuit: argparse.ArgumentParser) -> None:
    """``circuit``'s own flags (:data:`CIRCUIT`)."""
    circuit.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                         help="packaged name (smollm2-135m), local checkpoint folder "
                              "(a toy folder or a train-lm step too) or hub name")
    circuit.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    for role, default in (("sender", "previous_token:1"), ("receiver", "induction:1")):
        group = circuit.add_mutually_exclusive_group()
        group.add_argument(f"--{role}s", metavar="L.H,...", help=f"{role} heads, e.g. 16.0,17.2")
        group.add_argument(f"--{role}-top", metavar="KIND:K", help=f"the K best heads by a head score (default "
                           f"{default})")
    circuit.add_argument("--inputs", default="k", metavar="I,...",
                         help="receiver inputs each edge runs through: k, q, v, comma separated (default k)")
    circuit.add_argument("--method", default="mean", choices=["zero", "mean", "resample"],
                         help="how the sender's output is replaced (default mean)")
    circuit.add_argument("--seq-len", type=int_arg, default=20, metavar="N", help="length of X (default 20)")
    circuit.add_argument("--batches", type=int_arg, default=4, metavar="B",
                         help="batches measured (as many more choose top heads; default 4)")
    circuit.add_argument("--batch-size", type=int_arg, default=4, metavar="R", help="sequences per batch (default 4)")
    circuit.add_argument("--draws", type=int_arg, default=100, metavar="N",
                         help="random edges of the null (default 100: the fewest that can give p < 0.01)")
    circuit.add_argument("--seed", type=seed_arg, default=0, metavar="S", help="tokens, null draws (default 0)")
    circuit.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                         help="also measure the random-weight control's same edges (default: on)")


def settings_of(args: argparse.Namespace) -> CircuitSettings:
    """The command's :class:`CircuitSettings` (a flag not given takes its role's default top heads)."""
    chosen: dict[str, Any] = {}
    for role, default in (("sender", "previous_token:1"), ("receiver", "induction:1")):
        named = getattr(args, f"{role}s")
        top = getattr(args, f"{role}_top")
        chosen[f"{role}s"] = None if named is None else parse_heads(f"--{role}s", named)
        top = default if top is None else top  # an empty --sender-top '' is refused, not read as the default
        chosen[f"{role}_top"] = None if named is not None else parse_top(f"--{role}-top", top)
    return CircuitSettings(**chosen, inputs=tuple(part.strip() for part in args.inputs.split(",")),
                           method=args.method, seq_len=args.seq_len, batches=args.batches,
                           batch_size=args.batch_size, n_draws=args.draws, seed=args.seed)


def format_rows(findings: dict, correlations: dict) -> str:
    """One line per edge and effect: value [interval], null q99, control, p, verdict, screen rho."""
    lines = [f"{'edge / effect':<40} {'value [95% CI]':<28} {'null q99':>9} {'control':>9} {'p':>7} "
             f"{'verdict':<13} {'screen rho':>10}"]
    for name, finding in findings.items():
        interval = f"{finding.value:+.3f} [{finding.ci[0]:+.3f}, {finding.ci[1]:+.3f}]"
        control = "" if finding.control_value is None else f"{finding.control_value:+.3f}"
        lines.append(f"{name[:40]:<40} {interval:<28} {finding.null_value:>9.3f} {control:>9} "
                     f"{finding.p_value:>7.4f} {finding.verdict:<13} {correlations.get(name, float('nan')):>10.3f}")
    return "\n".join(lines)


def run_circuit(model_spec: str, settings: CircuitSettings, *, out: Path, control: bool = True,
                control_seed: int = 0, device: str = "cpu", dtype: str = "float32") -> dict[str, Any]:
    """Load ``model_spec``, measure the edges (and the control's same edges), print the table, write
    ``out/circuit.json`` and ``out/circuit.png`` (``out`` exists)."""
    check_device(device)
    model = load_any_model(model_spec, device=device, dtype=torch_dtype(dtype))
    info = ModelInfo.of(model)
    made = protocol_batches(info, settings)
    senders, receivers, chosen = choose_heads(model, settings, made)
    pairs = edge_pairs(senders, receivers)
    measured = measure_edges(model, settings, pairs, made)
    controlled = (measure_edges(random_weight_control(model, seed=control_seed), settings, pairs, made,
                                label=", random-weight control") if control else None)
    findings = edge_findings(measured, controlled)
    correlations = screen_correlations(composition_scores(model), measured)
    document = {
        "command": {"name": "circuit", "model": model_spec, "settings": dict(settings.__dict__), "control": control,
                    "device": device, "dtype": dtype},
        "chosen": chosen,
        "edges": [edge.document() for edge in measured],
        "control_edges": [] if controlled is None else [edge.document() for edge in controlled],
        "findings": {name: {"value": f.value, "ci": list(f.ci), "null_q99": f.null_value, "p_value": f.p_value,
                            "control": f.control_value, "threshold": f.threshold, "verdict": f.verdict}
                     for name, f in findings.items()},
        "screen_rank_correlation": correlations,
    }
    print(format_rows(findings, correlations))
    write_json(out / RESULT_FILE, document)
    draw_circuit(measured, findings, info.n_heads, out / FIGURE_FILE, title=f"{info.name}: edges by path patching")
    return document


def run_circuit_command(args: argparse.Namespace) -> int:
    """``mechprobe circuit``: settings checked, then the run written into ``--out`` in one rename."""
    settings = settings_of(args)
    refuse_toy_dtype(args.model, args.dtype)
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: (folder / RESULT_FILE).is_file())
    with written_atomically(out) as tmp:
        run_circuit(args.model, settings, out=tmp, control=args.control, device=args.device,
                    dtype=args.dtype or "float32")
    print(f"wrote {out / RESULT_FILE} and {out / FIGURE_FILE}")
    return 0


CIRCUIT = Command(
    "circuit", help="edges between heads by path patching, against random edges and the random-weight control",
    description="For every sender and receiver in a later layer, replace the sender's output (zero, mean or "
    "resample) in one input of the receiver only (keys, queries or values; everything else clean) and measure "
    "the loss change on the repeated half of [BOS] X X and the drop of the receiver's induction score, with a "
    "bootstrap interval over sequences, beside random edges at the same layer distance through the same input "
    "that share no head with it (the null) and the random-weight control's same edge; Elhage et al.'s "
    "weight-only composition scores beside them. Top heads are chosen on the even batches and measured on the "
    "odd ones. Prints a table and writes OUT/circuit.json and OUT/circuit.png.",
    add_arguments=add_arguments, run=run_circuit_command, shared=("device", "dtype", "progress"), hub_bars=True,
)
