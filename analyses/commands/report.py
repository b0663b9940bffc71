"""``mechprobe report``: toy models and pretrained models side by side; the flags, how they make a
:class:`~analyses.report.config.ReportConfig` (:func:`report_config`) and the checks before any work
(the work: :func:`analyses.report.build.run_report`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from analyses.cli_checks import (
    check_distinct_models,
    check_distinct_series,
    count_arg,
    int_arg,
    model_arg,
    naming,
    number_arg,
    seed_arg,
    text_arg,
)
from analyses.cli_command import Command
from analyses.experiments import toy_experiment
from analyses.output_paths import check_output_folder, check_outside
from analyses.toy_model_loader import check_pretrained_spec
from analyses.toy_model_store import is_toy_folder
from analyses.toy_registry import toy_names
from probes.core.errors import ConfigError
from probes.text.corpora import check_corpus_spec


def add_arguments(report: argparse.ArgumentParser) -> None:
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
    toy_flags = [flag for flag, value in (("--toy-preset", args.toy_preset), ("--toy-seeds", args.toy_seeds))
                 if value is not None]
    if toy_flags and args.no_toys:
        raise ConfigError(f"{' and '.join(toy_flags)} set{'s' if len(toy_flags) == 1 else ''} the toy models, which "
                          f"this report skips (--no-toys); drop {'it' if len(toy_flags) == 1 else 'them'}, or "
                          f"--no-toys.")
    unused = [flag for flag, value in (("--budget-minutes", args.budget_minutes), ("--max-tokens", args.max_tokens))
              if value is not None]
    if unused and not config.settle.enabled:  # after --set, which may turn settle.enabled on
        raise ConfigError(f"{' and '.join(unused)} set{'s' if len(unused) == 1 else ''} how --settle settles; add "
                          f"--settle, or drop {'it' if len(unused) == 1 else 'them'}.")
    return config


REPORT_TOYS = ("the report trains its own toys (--set toys=NAME,...), and measures a toy's or a train-lm run's "
               "checkpoints with --series DIR")


def _check_dtype_used(config, args: argparse.Namespace, toy_series: list[str]) -> None:
    """A dtype other than float32 with no pretrained model and no Hugging Face series to load in it is refused: the
    toys and toy or train-lm series run in float32, as trained, and the report would record a dtype nothing used."""
    from analyses.report.config import ReportConfig

    if config.dtype == ReportConfig().dtype or config.models or len(toy_series) < len(config.series):
        return
    given = (f"--dtype {args.dtype}" if args.dtype is not None
             else f"the setting dtype={config.dtype} (--set or --config)")
    what = f"the toy or train-lm series {', '.join(toy_series)}" if toy_series else "the toys"
    raise ConfigError(f"{given} sets the dtype of the pretrained models, and this report has none (--model): "
                      f"{what} run in float32, as trained; drop it, or add --model.")


def run(args: argparse.Namespace) -> int:
    import dataclasses

    from analyses.dynamics.config import DynamicsConfig
    from analyses.dynamics.run import checked_series, longest_block
    from analyses.report.build import run_report

    if args.list_settings:
        print(json.dumps(dataclasses.asdict(report_config(args)), indent=2))
        return 0
    if args.out is None:
        raise ConfigError("mechprobe report needs --out DIR (the folder the report is written to).")
    # Everything that can be checked without loading a model or reading text is checked first.
    for flag, value, low in (("--batch-size", args.batch_size, 1), ("--max-batches", args.max_batches, 4),
                             ("--seq-len", args.seq_len, 2)):
        if value is not None and value < low:
            why = " (two halves of 2: one picks the best head, the other measures it)" if low == 4 else ""
            raise ConfigError(f"{flag} must be >= {low}{why}; got {value}.")
    config = report_config(args)
    with naming("--corpus" if args.corpus is not None else "the corpus setting"):
        for spec in (config.corpus, *config.settle.corpora):
            check_corpus_spec(spec, config.text_column)
    for name in config.toys or toy_names():  # a preset set for toys that do not run is still checked
        presets = toy_experiment(name).PRESETS
        if config.toy_preset not in presets:
            raise ConfigError(
                f"--toy-preset {config.toy_preset!r}: the {name} toy has no such preset; choose from "
                f"{', '.join(presets)}."
            )
    check_distinct_models("--model", config.models)
    for spec in config.models:
        check_pretrained_spec("--model" if args.models else "the models setting", spec, toys=REPORT_TOYS)
    toy_series = []
    with naming("--series"):  # a malformed or damaged series, or one given twice, fails before any slow work
        check_distinct_series("--series", config.series)
        seq_len = DynamicsConfig().seq_len  # the report measures every series with dynamics' default |X|
        for spec in config.series:
            series = checked_series(spec)
            if is_toy_folder(series.checkpoints[0].spec):
                toy_series.append(spec)
            if series.kind == "folder":
                check_outside("--out", Path(args.out), "--series", series.source, suffix="report")
            too_long = longest_block(series, seq_len)
            if too_long is not None:
                retrain = f", or train it with --set seq_len={2 * seq_len} or more" if series.kind == "folder" else ""
                raise ConfigError(f"--series {spec}: the report measures a series on [BOS] X X with |X| = {seq_len}, "
                                  f"more positions than its models' context of {too_long[0]}; measure it with "
                                  f"mechprobe dynamics --model {spec} --seq-len {too_long[1]} --out DIR "
                                  f"instead{retrain}.")
    _check_dtype_used(config, args, toy_series)
    check_output_folder("--out", args.out, earlier_output=_is_report_folder, make_parents=False)
    path = run_report(config, args.out, progress=not args.no_progress)
    print(f"report written: {path} (also report.md and summary.json in {path.parent})")
    return 0



REPORT = Command(
    "report", help="the main job: toy models and pretrained models side by side (report.md/.html, summary.json)",
    description="Train the toy models of the three papers, run the same probes on pretrained models over a "
    "real corpus with gensim LDA topics, and write report.md, a self-contained report.html and summary.json.",
    add_arguments=add_arguments, run=run, shared=("progress", "device", "dtype"), hub_bars=True,
)
