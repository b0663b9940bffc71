"""``mechprobe probe-linear``: linear probes on each layer's residual stream, beside a baseline
(the work: :func:`analyses.linear.experiment.run_linear_probe`)."""

from __future__ import annotations

import argparse

from analyses.cli_checks import model_arg
from analyses.cli_command import Command
from analyses.output_paths import check_output_folder, written_atomically


def add_arguments(linear: argparse.ArgumentParser) -> None:
    linear.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                        help="packaged name, checkpoint folder, hub name, or a toy run folder "
                        "(mechprobe toy ... --out)")
    linear.add_argument("--target", required=True, choices=["parent", "topic", "next"],
                        help="parent: tok[t-k]; topic: the word's and the document's LDA topic; next: Scan and Snap's "
                        "next-token class (toy scansnap folders)")
    linear.add_argument("--out", required=True, metavar="DIR", help="output folder (created)")
    linear.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting (max_examples, n_folds, distances, layer_stride, corpus, max_batches, "
                        "control, seed, ...; repeatable)")


def run(args: argparse.Namespace) -> int:
    from analyses.config_overrides import apply_overrides, refuse_unused
    from analyses.linear.experiment import LinearProbeConfig, run_linear_probe, unused_settings
    from analyses.toy_model_loader import refuse_toy_dtype
    from analyses.toy_model_store import is_toy_folder
    from probes.core.loading import torch_dtype

    config = apply_overrides(LinearProbeConfig(), args.overrides)
    toy = is_toy_folder(args.model)
    where = "a toy folder" if toy else "a pretrained model"
    refuse_unused(unused_settings(toy=toy), args.overrides, where=where)
    refuse_toy_dtype(args.model, args.dtype)
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: (folder / "summary.json").is_file()
                              and (folder / "result").is_dir())
    with written_atomically(out) as tmp:
        summary = run_linear_probe(args.model, args.target, tmp, config, device=args.device,
                                   dtype=torch_dtype(args.dtype or "float32"), progress=not args.no_progress,
                                   cap_seq_len=not any(o.partition("=")[0].strip() == "seq_len"
                                                       for o in args.overrides))
    for key, curve in summary.results.items():
        cells = " ".join(f"{a:.2f}/{g:+.2f}" for a, g in zip(curve.accuracy, curve.gain))
        print(f"{args.target} {key} (accuracy/{curve.statistic} per layer, majority "
              f"{curve.majority_baseline:.2f}): {cells}")
    print(f"wrote {out / 'summary.json'}")
    return 0


PROBE_LINEAR = Command(
    "probe-linear", help="linear probes (scikit-learn) on each layer's residual stream, beside a baseline",
    description="Decode previous tokens (parent), LDA topics (topic) or Scan and Snap's next-token class (next) "
    "from every layer with grouped cross-validation; accuracy, the majority baseline, and the gain over the "
    "label's baseline (the word's topic: a control task with random labels per word type; everything else: "
    "what the current token alone predicts), for the model and its random-weight control. "
    "Writes OUT/summary.json, OUT/result/ and OUT/control/.",
    add_arguments=add_arguments, run=run, shared=("device", "dtype", "progress"), hub_bars=True,
)
