"""The ``mechprobe`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import probes
from analyses.circuit.command import add_circuit_command, run_circuit_command
from analyses.cli_checks import (
    check_distinct_series,
    check_output_folder,
    check_partial_folder,
    count_arg,
    device_arg,
    int_arg,
    model_arg,
    naming,
    number_arg,
    seed_arg,
    text_arg,
    written_atomically,
    written_resumably,
)
from analyses.dynamics.cli_commands import add_dynamics_commands, run_dynamics_command, run_train_lm_command
from analyses.experiments import TOY_EXPERIMENTS, toy_experiment
from analyses.plan.command import add_plan_command, run_plan_command
from mechprobe import records
from probes.core.errors import ConfigError, MechprobeError
from probes.text.corpora import check_corpus_spec
from toymodels.errors import TrainingDiverged, TrainingInterrupted


class UsageError(Exception):
    """A command-line usage error (unknown flag, missing argument, bad int); exits 2 in one line."""


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors that point to --help (sub-commands inherit the class)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: error: {message}. See {self.prog} --help.")


def _add_device_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", type=device_arg, default="cpu", metavar="DEV",
                        help="cpu (default), cuda, cuda:1, mps ...")
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        help="weights of pretrained models (default float32; probes accumulate in float64 "
                        "regardless)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mechprobe",
        description="Probe attention mechanisms (induction heads, topic attention, co-occurrence "
        "ordering) in toy models and pretrained models with TransformerLens.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {probes.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    heads = sub.add_parser(
        "heads",
        help="score every head for induction, previous-token and duplicate-token behaviour",
        description="Score every (layer, head) on repeated random tokens ([BOS] X X): the attention "
        "mass on the token after the earlier copy (induction), on the previous token, and on earlier "
        "copies of the current token (duplicate). Prints the top heads and optionally writes JSON.",
    )
    heads.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                       help="packaged name (smollm2-135m, minilm-l6), local checkpoint folder or hub name")
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
    _add_device_flags(heads)
    heads.add_argument("--no-progress", action="store_true", help="hide the progress bar")

    report = sub.add_parser(
        "report", help="the main job: toy models and pretrained models side by side (report.md/.html, summary.json)",
        description="Train the toy models of the three papers, run the same probes on pretrained models over a "
        "real corpus with gensim LDA topics, and write report.md, a self-contained report.html and summary.json.",
    )
    report.add_argument("--model", dest="models", type=model_arg, action="append", metavar="SPEC",
                        help="pretrained model (repeatable; default: smollm2-135m and minilm-l6)")
    report.add_argument("--corpus", type=text_arg, action="append", metavar="SPEC",
                        help="wikipedia-excerpt (default, offline), wikitext-2[:split], wikitext-103[:split], "
                        "hf:NAME[:CONFIG][:SPLIT] (any Hugging Face dataset, streamed), a .txt/.jsonl/.parquet/"
                        "WikiText file or a folder of .txt files; repeated with --settle: the later corpora are "
                        "read, in order, by its rounds once the first runs out (LDA stays fitted on the first)")
    report.add_argument("--text-column", type=text_arg, metavar="NAME",
                        help="column holding the text in hf: datasets and .jsonl/.parquet files (default text)")
    report.add_argument("--fast", action="store_true",
                        help="less text: 2,000 paragraphs and 8 batches per model (the head ablations, most of "
                             "the time on a decoder, stay the same)")
    report.add_argument("--toy-preset", type=text_arg, metavar="P", help="preset of the toy models (default fast)")
    report.add_argument("--toy-seeds", type=int_arg, metavar="N",
                        help="seeds each toy's findings are judged over (default 5; the full toy run is on the first)")
    report.add_argument("--no-toys", action="store_true", help="skip the toy models")
    report.add_argument("--series", type=text_arg, action="append", metavar="SERIES",
                        help="a checkpoint series (any mechprobe dynamics --model spec: hub revisions, a train-lm "
                        "folder, the induction toy's OUT/series) measured by mechprobe dynamics into a Dynamics "
                        "section (repeatable; none: no section)")
    report.add_argument("--out", metavar="DIR", help="output folder, replaced when the report is complete (required)")
    report.add_argument("--seed", type=seed_arg, metavar="S",
                        help="one seed for the document shuffle, LDA and the probes (default 0; each alone: --set "
                        "seed=, topics.seed=, pretrained.seed=)")
    report.add_argument("--seq-len", type=int_arg, metavar="N", help="tokens per text sequence on pretrained models")
    report.add_argument("--batch-size", type=int_arg, metavar="R", help="sequences per batch on pretrained models")
    report.add_argument("--max-batches", type=int_arg, metavar="B", help="batches of text per pretrained model")
    report.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                        help="probe each pretrained model's random-weight control (same architecture, built from its "
                        "config) on the same batches and show it beside the model (default: on)")
    report.add_argument("--config", type=text_arg, metavar="FILE.toml",
                        help="settings from a TOML file (tables are sections: [topics], [pretrained]); flags and --set "
                        "win over it")
    report.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override any setting, nested ones dotted (topics.n_topics=20, pretrained.n_boot=200); "
                        "repeatable; see --list-settings")
    report.add_argument("--list-settings", action="store_true",
                        help="print every report setting and its value, then exit")
    report.add_argument("--settle", action="store_true",
                        help="after the first pass, rounds of fresh text for each pretrained finding still "
                             "inconclusive, decided on confidence sequences (a 'Settling' section)")
    report.add_argument("--budget-minutes", type=number_arg(positive=True), metavar="M",
                        help="with --settle: stop starting rounds after M minutes of settling per model (default 20)")
    report.add_argument("--max-tokens", type=count_arg(1), metavar="N",
                        help="with --settle: at most N tokens of fresh text per model (default 5,000,000)")
    report.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    _add_device_flags(report)

    render = sub.add_parser(
        "render", help="rebuild a report's report.md/.html and summary.json from its saved results (no model)",
        description="Rebuild report.md, report.html, summary.json and the figures of a folder written by mechprobe "
        "report from the probe results saved in its results/ folder, without loading any model.",
    )
    render.add_argument("folder", metavar="OUT", help="a folder written by mechprobe report")

    linear = sub.add_parser(
        "probe-linear", help="linear probes (scikit-learn) on each layer's residual stream, beside a baseline",
        description="Decode previous tokens (parent), LDA topics (topic) or Scan and Snap's next-token class (next) "
        "from every layer with grouped cross-validation; accuracy, the majority baseline, and the gain over the "
        "label's baseline (the word's topic: a control task with random labels per word type; everything else: "
        "what the current token alone predicts), for the model and its random-weight control. "
        "Writes OUT/summary.json, OUT/result/ and OUT/control/.",
    )
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
    _add_device_flags(linear)
    linear.add_argument("--no-progress", action="store_true", help="hide the progress bars")

    ablate = sub.add_parser(
        "ablate", help="knock out heads and measure the loss change against random heads of the same layers",
        description="Ablate heads at blocks.{l}.attn.hook_z (zero, mean or resample) and measure the per-token loss "
        "change on the repeated half of [BOS] X X, with a bootstrap interval over batches, beside random head sets "
        "with as many heads in each layer (the null), for the model and its random-weight control. --top heads are "
        "chosen on the even batches and ablated on the odd ones. Prints a table and writes OUT/ablation.json.",
    )
    ablate.add_argument("--model", type=model_arg, required=True, metavar="SPEC",
                        help="packaged name (smollm2-135m), local checkpoint folder or hub name")
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
    _add_device_flags(ablate)
    ablate.add_argument("--no-progress", action="store_true", help="hide the progress bars")

    circuit = add_circuit_command(sub, _add_device_flags)
    dynamics, train_lm = add_dynamics_commands(sub, _add_device_flags)
    plan = add_plan_command(sub)

    toy = sub.add_parser("toy", help="train a paper's toy model and probe it",
                         description="Train the toy model of one paper and write summary.json and figures.")
    toy.add_argument("experiment", choices=sorted(TOY_EXPERIMENTS),
                     help="topic (Li et al. 2023), scansnap (Tian et al. 2023), induction (Chen et al. 2024)")
    toy.add_argument("--preset", type=text_arg, default="fast",
                     help="configuration preset (default fast); see --list-presets")
    toy.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                     help="override one field of the preset's config (repeatable)")
    toy.add_argument("--out", metavar="DIR", help="output folder, written whole when the run is done; until then the "
                     "run and its checkpoints are in DIR.partial, which the same command resumes from (required "
                     "unless --list-presets)")
    toy.add_argument("--seeds", type=int_arg, default=1, metavar="N",
                     help="judge the findings over N seeds: seed, seed+1, ... (default 1; the full run is on the "
                     "first)")
    toy.add_argument("--list-presets", action="store_true", help="print the presets and their settings, then exit")
    toy.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    toy.add_argument("--device", type=device_arg, metavar="DEV",
                     help="where the toy models train: cpu (default), cuda, cuda:1, mps ... (same as --set device=DEV)")
    toy.add_argument("--dtype", help=argparse.SUPPRESS)  # accepted only to say why it does not apply
    # --debug also after the command name
    for command in (heads, report, linear, ablate, circuit, dynamics, train_lm, toy, plan):
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the full traceback")
    return parser


def _is_toy_folder(folder: Path) -> bool:
    """A folder an earlier ``mechprobe toy`` wrote (finished, or stopped with its checkpoints to resume from)."""
    return any((folder / name).exists() for name in ("summary.json", "checkpoint", "checkpoints"))


def _run_toy(args: argparse.Namespace) -> int:
    from analyses.config_overrides import apply_overrides, refuse_unused
    from analyses.report.verdicts import cell
    from analyses.toy_seeds import run_with_seeds

    if args.dtype is not None:
        raise ConfigError(
            "--dtype does not apply to `mechprobe toy` (the toy models train in float32); it sets the weights of "
            "pretrained models in `mechprobe heads` and `mechprobe report`. Drop --dtype."
        )
    overrides = list(args.overrides)
    if args.device is not None:
        if any(o.partition("=")[0].strip() == "device" for o in overrides):
            raise ConfigError("--device and --set device=... both set the device; give only one of them.")
        overrides.append(f"device={args.device}")
    module = toy_experiment(args.experiment)
    presets = module.PRESETS
    if args.list_presets:
        import dataclasses

        for name, config in presets.items():
            print(f"{name}: {json.dumps(dataclasses.asdict(config))}")
        return 0
    if args.preset not in presets:
        raise ConfigError(f"Unknown preset {args.preset!r} for {args.experiment}; choose from {', '.join(presets)}.")
    if args.out is None:
        raise ConfigError("mechprobe toy needs --out DIR (the folder for summary.json and figures).")
    if args.seeds < 1:
        raise ConfigError(f"--seeds must be >= 1; got {args.seeds}.")
    config = apply_overrides(presets[args.preset], overrides)
    if hasattr(config, "unused_settings"):
        refuse_unused(config.unused_settings(), args.overrides,
                      where=f"the {args.experiment} toy's {args.preset} preset (as set)")
    out = check_output_folder("--out", args.out, earlier_output=_is_toy_folder)
    partial = check_partial_folder("--out", out, resumable=_is_toy_folder)
    if partial.exists():
        print(f"resuming the unfinished run in {partial}")
    # The run works in OUT.partial and replaces OUT in one rename when it is done. Bad input found during the
    # run (or any other error) takes back OUT.partial if this command made it; a run stopped by SIGTERM, Ctrl-C
    # or divergence keeps it with its checkpoints, and so does a kill: the same command resumes from them.
    with written_resumably(out, keep_on=(TrainingDiverged, TrainingInterrupted, KeyboardInterrupt)) as work:
        result = run_with_seeds(args.experiment, config, work, n_seeds=args.seeds, progress=not args.no_progress)
    shown = {k: v for k, v in records.dump(result).items() if not isinstance(v, (dict, list, tuple))}
    for key, value in shown.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    for name, finding in result.toy_findings().items():
        print(f"finding {name}: {cell(finding, toy_cell=True).replace('**', '')}")
    print(f"wrote {out / 'summary.json'}")
    return 0


def _run_linear(args: argparse.Namespace) -> int:
    from analyses.config_overrides import apply_overrides, refuse_unused
    from analyses.linear.experiment import LinearProbeConfig, run_linear_probe, unused_settings
    from analyses.toy_model_store import is_toy_folder
    from probes.core.loading import torch_dtype

    config = apply_overrides(LinearProbeConfig(), args.overrides)
    toy = is_toy_folder(args.model)
    where = "a toy folder" if toy else "a pretrained model"
    refuse_unused(unused_settings(toy=toy), args.overrides, where=where)
    if toy and args.dtype is not None:
        raise ConfigError(f"--dtype does not apply to a toy folder ({args.model}: its model is float32, as trained); "
                          f"drop --dtype.")
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


def _run_ablate(args: argparse.Namespace) -> int:
    from analyses.ablate import RESULT_FILE, AblateSettings, parse_heads, parse_top, run_ablate

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


def _is_report_folder(folder: Path) -> bool:
    """A folder an earlier ``mechprobe report`` wrote (the new report replaces it when complete)."""
    return (folder / "results").is_dir() and (folder / "report.md").is_file()


def report_config(args: argparse.Namespace):
    """The :class:`ReportConfig` of ``mechprobe report``'s arguments: the default (or ``--fast``) settings,
    then ``--config FILE.toml``, then the flags given, then ``--set`` (each validated)."""
    import dataclasses

    from analyses.config_overrides import apply_overrides, refuse_flag_and_set, toml_assignments
    from analyses.report.config import ReportConfig

    config = ReportConfig.fast() if args.fast else ReportConfig()
    if args.config:
        config = apply_overrides(config, toml_assignments(args.config), flag=f"--config {args.config}:")
    given = [(key, value, flag) for key, value, flag in (
        ("corpus", args.corpus[0] if args.corpus else None, "--corpus"),
        ("text_column", args.text_column, "--text-column"),
        ("toy_preset", args.toy_preset, "--toy-preset"), ("toy_seeds", args.toy_seeds, "--toy-seeds"),
        ("seed", args.seed, "--seed"), ("topics.seed", args.seed, "--seed"), ("pretrained.seed", args.seed, "--seed"),
        ("pretrained.seq_len", args.seq_len, "--seq-len"), ("pretrained.batch_size", args.batch_size, "--batch-size"),
        ("pretrained.max_batches", args.max_batches, "--max-batches"),
        ("pretrained.control", args.control, "--control/--no-control"), ("dtype", args.dtype, "--dtype"),
        ("models", args.models, "--model"), ("toys", args.no_toys or None, "--no-toys"),
        ("series", args.series, "--series"), ("settle.enabled", args.settle or None, "--settle"),
        ("settle.budget_minutes", args.budget_minutes, "--budget-minutes"),
        ("settle.max_tokens", args.max_tokens, "--max-tokens"),
    ) if value is not None]
    refuse_flag_and_set({key: flag for key, _, flag in given}, args.overrides)
    for key, value, flag in given:
        if key not in ("models", "toys", "series"):
            with naming(flag):
                config = apply_overrides(config, [f"{key}={value}"], flag=flag)
    config = apply_overrides(config, [f"device={args.device}"], flag="--device")
    if args.models:
        config = dataclasses.replace(config, models=tuple(args.models))
    if args.no_toys:
        config = dataclasses.replace(config, toys=())
    if args.series:
        config = dataclasses.replace(config, series=tuple(args.series))
    config = apply_overrides(config, args.overrides)
    if args.corpus and len(args.corpus) > 1:  # after --set, which may turn settle.enabled on
        with naming("--corpus"):
            config = dataclasses.replace(config, settle=dataclasses.replace(config.settle,
                                                                            corpora=tuple(args.corpus[1:])))
    return config


def _run_report(args: argparse.Namespace) -> int:
    import dataclasses

    from analyses.dynamics.run import checked_series
    from analyses.report.build import run_report

    if args.list_settings:
        print(json.dumps(dataclasses.asdict(report_config(args)), indent=2))
        return 0
    if args.out is None:
        raise ConfigError("mechprobe report needs --out DIR (the folder the report is written to).")
    # Everything that can be checked without loading a model or reading text is checked first.
    check_output_folder("--out", args.out, earlier_output=_is_report_folder, make_parents=False)
    for flag, value, low in (("--batch-size", args.batch_size, 1), ("--max-batches", args.max_batches, 4),
                             ("--seq-len", args.seq_len, 2)):
        if value is not None and value < low:
            why = " (two halves of 2: one picks the best head, the other measures it)" if low == 4 else ""
            raise ConfigError(f"{flag} must be >= {low}{why}; got {value}.")
    config = report_config(args)
    with naming("--corpus" if args.corpus is not None else "the corpus setting"):
        for spec in (config.corpus, *config.settle.corpora):
            check_corpus_spec(spec, config.text_column)
    for name in config.toys or TOY_EXPERIMENTS:  # a preset set for toys that do not run is still checked
        presets = toy_experiment(name).PRESETS
        if config.toy_preset not in presets:
            raise ConfigError(
                f"--toy-preset {config.toy_preset!r}: the {name} toy has no such preset; choose from "
                f"{', '.join(presets)}."
            )
    with naming("--series"):  # a malformed or damaged series, or one given twice, fails before any slow work
        check_distinct_series("--series", config.series)
        for spec in config.series:
            checked_series(spec)
    path = run_report(config, args.out, progress=not args.no_progress)
    print(f"report written: {path} (also report.md and summary.json in {path.parent})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mechprobe`` command; bad input prints one ``mechprobe: error: ...`` line and returns 2.

    ``--debug`` re-raises instead, to show the full traceback.
    """
    parser = build_parser()
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(arguments)
    except UsageError as error:
        if "--debug" in arguments:
            raise
        print(error, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    if getattr(args, "no_progress", False) and args.command in ("heads", "report", "probe-linear", "ablate",
                                                                         "circuit", "dynamics"):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # the "Loading weights" bars too
    try:
        if args.command == "heads":
            from analyses.heads import run_heads
            from probes.attention.head_scores import HEAD_SCORE_KINDS

            run_heads(args.model, seq_len=args.seq_len, batches=args.batches, batch_size=args.batch_size,
                      seed=args.seed, json_path=args.json, top=args.top, progress=not args.no_progress,
                      device=args.device, dtype=args.dtype or "float32", kinds=tuple(args.patterns or HEAD_SCORE_KINDS),
                      html_path=args.html)
            return 0
        if args.command == "report":
            return _run_report(args)
        if args.command == "probe-linear":
            return _run_linear(args)
        if args.command == "ablate":
            return _run_ablate(args)
        if args.command == "circuit":
            return run_circuit_command(args)
        if args.command == "dynamics":
            return run_dynamics_command(args)
        if args.command == "train-lm":
            return run_train_lm_command(args)
        if args.command == "plan":
            return run_plan_command(args)
        if args.command == "render":
            from analyses.report.build import render_report

            print(f"report rendered: {render_report(args.folder)}")
            return 0
        return _run_toy(args)
    except TrainingInterrupted as error:
        if args.debug:
            raise
        print(f"mechprobe: {' '.join(str(error).split())}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except (MechprobeError, OSError) as error:  # every mechprobe error, toy training's included
        if args.debug:
            raise
        message = " ".join(str(error).split())  # one line, whatever the library wrote
        print(f"mechprobe: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.debug:
            raise
        resumes = args.command in ("toy", "train-lm")  # their stopped runs are kept for the same command to resume
        print(f"mechprobe: interrupted{'; run the same command again to resume' if resumes else ''}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
