"""``mechprobe heads``: score every head for induction, previous-token and duplicate-token behaviour
(the work: :mod:`analyses.heads`)."""

from __future__ import annotations

import argparse

from analyses.cli_checks import int_arg, model_arg, seed_arg
from analyses.cli_command import Command


def add_arguments(heads: argparse.ArgumentParser) -> None:
    heads.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                       help="packaged name (smollm2-135m, minilm-l6), local checkpoint folder "
                            "(a toy folder or a train-lm step too) or hub name")
    heads.add_argument("--seq-len", type=int_arg, default=50, metavar="N",
                       help="length of the repeated block (default 50)")
    heads.add_argument("--batches", type=int_arg, default=4, metavar="B", help="number of batches (default 4)")
    heads.add_argument("--batch-size", type=int_arg, default=8, metavar="R", help="sequences per batch (default 8)")
    heads.add_argument("--seed", type=seed_arg, default=0, metavar="S", help="random seed of the tokens (default 0)")
    heads.add_argument("--top", type=int_arg, default=5, metavar="K", help="heads to print per kind (default 5)")
    heads.add_argument("--json", metavar="PATH", help="write all scores as JSON to PATH")
    heads.add_argument("--html", metavar="PATH", help="write interactive views (layer x head maps, the top heads' "
                       "attention on a scored sequence) as one self-contained HTML file to PATH")
    heads.add_argument("--pattern", dest="patterns", action="append", metavar="NAME",
                       help="target pattern to score (repeatable; default induction, previous_token, "
                       "duplicate_token): also self, first_token, offset:D, induction:D")


def run(args: argparse.Namespace) -> int:
    from analyses.heads import run_heads
    from analyses.toy_model_loader import refuse_toy_dtype
    from probes.attention.head_scores import HEAD_SCORE_KINDS

    refuse_toy_dtype(args.model, args.dtype)

    run_heads(args.model, seq_len=args.seq_len, batches=args.batches, batch_size=args.batch_size,
              seed=args.seed, json_path=args.json, top=args.top, progress=not args.no_progress,
              device=args.device, dtype=args.dtype or "float32", kinds=tuple(args.patterns or HEAD_SCORE_KINDS),
              html_path=args.html)
    return 0


HEADS = Command(
    "heads", help="score every head for induction, previous-token and duplicate-token behaviour",
    description="Score every (layer, head) on repeated random tokens ([BOS] X X): the attention "
    "mass on the token after the earlier copy (induction), on the previous token, and on earlier "
    "copies of the current token (duplicate). Prints the top heads and optionally writes JSON.",
    add_arguments=add_arguments, run=run, shared=("device", "dtype", "progress"),
    progress_help="hide the progress bar", hub_bars=True,
)
