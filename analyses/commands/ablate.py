"""``mechprobe ablate``: knock out heads and measure the loss change against random heads of the same layers
(the work: :mod:`analyses.ablate`)."""

from __future__ import annotations

import argparse

import probes
from analyses.cli_checks import int_arg, model_arg, seed_arg
from analyses.cli_command import Command
from analyses.output_paths import check_output_folder, written_atomically


def add_arguments(ablate: argparse.ArgumentParser) -> None:
    ablate.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                        help="packaged name (smollm2-135m), local checkpoint folder "
                             "(a toy folder or a train-lm step too) or hub name")
    chosen = ablate.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--heads", metavar="L.H,...", help="heads to ablate, e.g. 17.3,18.6")
    chosen.add_argument("--top", metavar="KIND:K", help="the K best heads by a head score, e.g. induction:5")
    ablate.add_argument("--method", default="mean", choices=list(probes.ABLATION_METHODS),
                        help="replace each head's output by 0, its mean over the batches, or its output on another "
                        "sequence (default mean)")
    ablate.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    ablate.add_argument("--seq-len", type=int_arg, default=20, metavar="N",
                        help="length of the repeated block (default 20)")
    ablate.add_argument("--batches", type=int_arg, default=4, metavar="B",
                        help="batches ablated (as many more choose --top heads; default 4)")
    ablate.add_argument("--batch-size", type=int_arg, default=4, metavar="R", help="sequences per batch (default 4)")
    ablate.add_argument("--draws", type=int_arg, default=200, metavar="N",
                        help="random head sets of the null (default 200)")
    ablate.add_argument("--max-rows", type=int_arg, default=256, metavar="R",
                        help="rows per forward pass: batch rows x head sets ablated together (default 256)")
    ablate.add_argument("--seed", type=seed_arg, default=0, metavar="S",
                        help="tokens, null draws, derangement (default 0)")
    ablate.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                        help="also measure the random-weight control (same architecture; default: on)")


def run(args: argparse.Namespace) -> int:
    from analyses.ablate import RESULT_FILE, AblateSettings, parse_heads, parse_top, run_ablate
    from analyses.toy_model_loader import refuse_toy_dtype

    refuse_toy_dtype(args.model, args.dtype)

    settings = AblateSettings(
        method=args.method, heads=None if args.heads is None else tuple(parse_heads(args.heads)),
        top=None if args.top is None else parse_top(args.top), seq_len=args.seq_len, batches=args.batches,
        batch_size=args.batch_size, n_draws=args.draws, seed=args.seed, max_rows=args.max_rows)
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: (folder / RESULT_FILE).is_file())
    with written_atomically(out) as tmp:
        run_ablate(args.model, settings, out=tmp, control=args.control, device=args.device,
                   dtype=args.dtype or "float32")
    print(f"wrote {out / RESULT_FILE}")
    return 0


ABLATE = Command(
    "ablate", help="knock out heads and measure the loss change against random heads of the same layers",
    description="Ablate heads at blocks.{l}.attn.hook_z (zero, mean or resample) and measure the per-token loss "
    "change on the repeated half of [BOS] X X, with a bootstrap interval over batches, beside random head sets "
    "with as many heads in each layer (the null), for the model and its random-weight control. --top heads are "
    "chosen on the even batches and ablated on the odd ones. Prints a table and writes OUT/ablation.json.",
    add_arguments=add_arguments, run=run, shared=("device", "dtype", "progress"), hub_bars=True,
)
