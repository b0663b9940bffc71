"""The command-line entries of the dynamics commands: ``mechprobe dynamics`` (the probes over a checkpoint series)
and ``mechprobe train-lm`` (a real-text series trained here). Their records: :data:`DYNAMICS`, :data:`TRAIN_LM`."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from analyses.cli_checks import check_compared_folders, count_arg, int_arg, naming, number_arg, seed_arg, text_arg
from analyses.cli_command import Command
from analyses.output_paths import check_output_folder, check_outside
from probes.core.errors import ConfigError, InputError
from probes.text.corpora import check_corpus_spec

COMPARE_FIGURE = "dynamics_compare.png"


def add_dynamics_arguments(dynamics: argparse.ArgumentParser) -> None:
    """``dynamics``'s own flags (:data:`DYNAMICS`)."""
    dynamics.add_argument("--model", type=text_arg, required=True, metavar="SERIES",
                          help="NAME@revisions=step0,step1000,... (hub revisions), NAME@checkpoint_index=0,1,... "
                          "(legacy TransformerLens), or a folder of checkpoints / with series.json")
    dynamics.add_argument("--out", required=True, metavar="DIR", help="output folder (created; reused to resume)")
    dynamics.add_argument("--seq-len", type=int_arg, default=40, metavar="N",
                          help="length of the repeated block X (default 40)")
    dynamics.add_argument("--batches", type=int_arg, default=16, metavar="B",
                          help="batches of [BOS] X X, even: choose heads, odd: measure (default 16)")
    dynamics.add_argument("--batch-size", type=int_arg, default=8, metavar="R", help="sequences per batch (default 8)")
    dynamics.add_argument("--boot", type=int_arg, default=1000, metavar="N", help="bootstrap draws (default 1000)")
    dynamics.add_argument("--seed", type=seed_arg, default=0, metavar="S", help="tokens and draws (default 0)")
    dynamics.add_argument("--corpus", type=text_arg, metavar="SPEC",
                          help="natural text for the early-minus-late loss and the topic and co-occurrence probes "
                          "(models with a tokenizer; train-lm checkpoints read it through their cut vocabulary), e.g. "
                          "wikipedia-excerpt")
    dynamics.add_argument("--compare", type=text_arg, action="append", default=[], metavar="DIR",
                          help="a finished dynamics --out folder, or a topic or scansnap toy's --out folder (its "
                          "recorded order curves), to draw beside this series on one axis (fraction of training, "
                          "tokens seen) in OUT/dynamics_compare.png (repeatable)")
    dynamics.add_argument("--refine", action="store_true",
                          help="for a series trained here (a train-lm folder, the induction toy's OUT/series): where "
                          "an event that holds has an interval wider than --refine-width of its step, re-run the "
                          "training between the checkpoints around it from its kept state, saving more checkpoints "
                          "there, and measure again (OUT/refinement.json)")
    dynamics.add_argument("--refine-width", type=number_arg(positive=True, maximum=1.0), metavar="F",
                          help="with --refine: the interval an event may keep, as a share of its step (default 0.2)")
    dynamics.add_argument("--refine-rounds", type=count_arg(1), metavar="N",
                          help="with --refine: rounds of re-running and measuring at most (default 3)")


def add_train_lm_arguments(train_lm: argparse.ArgumentParser) -> None:
    """``train-lm``'s own flags (:data:`TRAIN_LM`)."""
    train_lm.add_argument("--corpus", type=text_arg, metavar="SPEC",
                          help="any corpus the report reads (default wikipedia-excerpt, offline)")
    train_lm.add_argument("--out", required=True, metavar="DIR",
                          help="output folder (created; the same command resumes a stopped run)")
    train_lm.add_argument("--steps", type=int_arg, metavar="N", help="optimizer steps (default 2500)")
    train_lm.add_argument("--repeat", type=number_arg(0.0, maximum=1.0), metavar="F",
                          help="fraction of rows with a repeated span (default 1.0; 0 for plain text)")
    train_lm.add_argument("--seed", type=seed_arg, metavar="S", help="weights and rows (default 0)")
    train_lm.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                          help="override a setting (vocab, seq_len, batch_size, d_model, n_heads, lr, span, "
                          "n_checkpoints, ...; repeatable)")


def run_dynamics_command(args: argparse.Namespace) -> int:
    from analyses.dynamics.config import DynamicsConfig
    from analyses.dynamics.figures import plot_series_together
    from analyses.dynamics.refine import REFINEMENT
    from analyses.dynamics.run import (
        FIGURE,
        STORE,
        checked_series,
        known_context,
        longest_block,
        run_dynamics,
        summary_lines,
    )
    from analyses.dynamics.summary import SUMMARY
    from analyses.toy_model_store import is_toy_folder
    from probes.core.loading import torch_dtype
    from probes.core.out_of_memory import physical_memory

    flags = {"seq_len": "--seq-len", "n_batches": "--batches", "batch_size": "--batch-size", "n_boot": "--boot",
             "seed": "--seed", "corpus": "--corpus"}
    try:
        config = DynamicsConfig(seq_len=args.seq_len, n_batches=args.batches, batch_size=args.batch_size,
                                n_boot=args.boot, seed=args.seed, corpus=args.corpus)
    except ConfigError as error:  # the config names its field: say which flag set it
        field = str(error).split()[0]
        raise ConfigError(f"{flags[field]}: {error}" if field in flags else str(error)) from None
    check_rows_fit(config, physical_memory())
    with naming("--model"):  # the series read (hub revisions resolved, step files read) before any work
        series = checked_series(args.model)
    if args.dtype is not None and is_toy_folder(series.checkpoints[0].spec):
        raise ConfigError(f"--dtype does not apply to the series {args.model} (its checkpoints are mechprobe toy or "
                          f"train-lm models: float32, as trained); drop --dtype.")
    if args.corpus is not None:
        with naming("--corpus"):
            check_corpus_spec(args.corpus, "text")
    refine_given = {key: value for key, value in (("width", args.refine_width), ("rounds", args.refine_rounds))
                    if value is not None}
    if refine_given and not args.refine:
        raise ConfigError("--refine-width and --refine-rounds set how --refine refines; add --refine, or drop them.")
    too_long = longest_block(series, config.seq_len)
    if too_long is not None:
        raise ConfigError(f"--seq-len {config.seq_len}: the repeated block X X needs more positions than the "
                          f"context of {too_long[0]} of the models of {args.model}; give --seq-len {too_long[1]} or "
                          f"less.")
    context = (known_context(series) or (None, False))[0]
    if args.corpus is not None and context is not None and context < config.late[1]:
        raise ConfigError(f"--corpus {args.corpus}: the early-minus-late loss reads text rows of {config.late[1]} "
                          f"tokens, more than the context of {context} of the models of {args.model}; leave --corpus "
                          f"out, or train the series with --set seq_len={config.text_seq_len} or more.")
    if args.refine:
        from pathlib import Path

        from analyses.dynamics.bracket_rerun import check_refinable

        with naming("--refine"):
            check_refinable(Path(args.model))
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: (folder / STORE).is_dir(),
                              writes=(SUMMARY, FIGURE, COMPARE_FIGURE, REFINEMENT))
    if series.kind == "folder":
        check_outside("--out", out, "--model", series.source, suffix="dynamics")
    check_compared_folders("--compare", args.compare, out=out, model=args.model)
    others = {folder: compared_series(folder, args.model) for folder in args.compare}  # checked before measuring
    dtype = torch_dtype(args.dtype or "float32")
    if args.refine:
        from analyses.dynamics.refine import refine_dynamics, refinement_lines
        from probes.dynamics.refinement import RefinementSettings

        settings = RefinementSettings(**refine_given)
        summary, record = refine_dynamics(args.model, out, config, settings, device=args.device, dtype=dtype,
                                          progress=not args.no_progress)
        lines = [*summary_lines(summary), *refinement_lines(record), f"wrote {out / REFINEMENT}"]
    else:
        summary = run_dynamics(args.model, out, config, device=args.device, dtype=dtype, progress=not args.no_progress)
        lines = list(summary_lines(summary))
    for line in lines:
        print(line)
    print(f"wrote {out / SUMMARY} and {out / FIGURE}")
    if others:
        path = plot_series_together({args.model: summary, **others}, out / COMPARE_FIGURE)
        print(f"wrote {path}")
    return 0


def check_rows_fit(config: Any, memory: int | None) -> None:
    """The ``[BOS] X X`` rows of a :class:`~analyses.dynamics.config.DynamicsConfig` (drawn once and kept for every
    checkpoint: int64 tokens and a mask, at least 2 x seq_len positions a row) fit in ``memory`` bytes (None: not
    known, not checked); refused naming the flags before any work (they were drawn, and the process killed)."""
    rows = 9 * config.n_batches * config.batch_size * 2 * config.seq_len
    if memory is not None and rows > memory:
        raise ConfigError(f"--batches {config.n_batches} x --batch-size {config.batch_size} x --seq-len "
                          f"{config.seq_len}: the [BOS] X X rows alone hold at least {rows / 2**30:,.0f} GiB (drawn "
                          f"once, kept for every checkpoint), more than this machine's {memory / 2**30:,.0f} GiB; "
                          f"lower --batch-size or --batches.")


def compared_series(folder: str, model: str) -> Any:
    """What ``--compare FOLDER`` draws: a finished dynamics run's summary, or a toy run's recorded order curves;
    a dynamics run of the series ``model`` names is refused (the same series would be drawn twice)."""
    from pathlib import Path

    from analyses.curve_series import SERIES_FILE, load_curve_series
    from analyses.dynamics.summary import load_summary
    from analyses.toy_model_store import is_toy_folder
    from probes.core.checkpoint_series import same_spec

    with naming("--compare"):  # a folder that is not a finished run is refused naming the flag
        if (Path(folder) / SERIES_FILE).is_file():  # a toy's folder (a dynamics run writes no such file)
            return load_curve_series(folder, rerun=f"Re-run the toy that wrote {folder}.")
        if is_toy_folder(folder):  # it was told it is no dynamics run, as if a toy's folder were not taken
            raise InputError(f"{folder} is a toy's --out folder without a readable {SERIES_FILE} (the topic and "
                             f"scansnap toys write their order curves there, the induction toy none): re-run the "
                             f"toy that wrote it, or give a finished dynamics --out folder.")
        summary = load_summary(folder)
    if same_spec(summary.series, model):
        raise ConfigError(f"--compare {folder} measured the series --model {model} names ({summary.series}): it "
                          f"would be drawn beside itself; compare with a run of another series, or leave it out.")
    return summary


def run_train_lm_command(args: argparse.Namespace) -> int:
    from analyses.config_overrides import apply_overrides, refuse_flag_and_set
    from analyses.dynamics.lm_run_folder import resumable
    from analyses.dynamics.train_lm import TrainLmConfig, train_lm
    from probes.core.out_of_memory import physical_memory

    given = [(key, value, flag) for key, value, flag in (
        ("corpus", args.corpus, "--corpus"), ("n_steps", args.steps, "--steps"), ("repeat", args.repeat, "--repeat"),
        ("seed", args.seed, "--seed")) if value is not None]
    refuse_flag_and_set({key: flag for key, _, flag in given}, args.overrides)
    config = TrainLmConfig()
    for key, value, flag in given:
        with naming(flag):
            config = apply_overrides(config, [f"{key}={value}"], flag=flag)
    config = apply_overrides(config, args.overrides)
    config.check_checkpoint_count()
    config.check_size(physical_memory())
    with naming("--corpus" if args.corpus is not None else "the corpus setting"):
        check_corpus_spec(config.corpus, "text")
    out = check_output_folder("--out", args.out, earlier_output=resumable)
    summary = train_lm(config, out, device=args.device, progress=not args.no_progress)
    print(f"trained {config.n_steps} steps in {summary.seconds:.0f} s: loss {summary.first_loss:.3f} -> "
          f"{summary.final_loss:.3f}; saved steps {', '.join(str(s) for s in summary.steps)}")
    if summary.vocab < config.vocab:  # the cap was not reached: say what the model has (summary.json records it)
        print(f"the corpus has {summary.vocab - 1} distinct tokens, fewer than vocab={config.vocab} keeps: the "
              f"model's vocabulary is those and OTHER, {summary.vocab} ids")
    print(f"wrote {out}; measure it with: mechprobe dynamics --model {shlex.quote(str(out))} --out "
          f"{shlex.quote(f'{out}-dynamics')}{dynamics_seq_len(config.seq_len)}")
    return 0


def dynamics_seq_len(context: int) -> str:
    """The ``--seq-len`` that ``mechprobe dynamics`` needs on a train-lm series of ``context`` (its ``[BOS] X X``
    block has no BOS there: 2 x seq_len positions): `` --seq-len N`` when its default does not fit, else nothing."""
    from analyses.dynamics.config import DynamicsConfig

    return "" if 2 * DynamicsConfig().seq_len <= context else f" --seq-len {context // 2}"


DYNAMICS = Command(
    "dynamics", help="the same probes over a model's training checkpoints: curves, events and their order",
    description="Measure every checkpoint of a series (Hugging Face revisions, legacy TransformerLens checkpoints, "
    "a folder of checkpoints, a train-lm run) one at a time: previous-token, induction and duplicate head scores "
    "on [BOS] X X (best head held out, uniform-attention null), the in-context loss gain, and with --corpus the "
    "loss at early minus late text positions and the report's text probes (same-topic attention of the best "
    "head against the distance-matched topic null, co-occurrence ordering; LDA topics fitted on the corpus). "
    "Each checkpoint is stored in OUT/checkpoints/ as it is done, so the same command resumes a killed run. "
    "Writes OUT/summary.json (events with bootstrap intervals, their "
    "order as a finding; the first checkpoint is the control) and OUT/dynamics.png.",
    add_arguments=add_dynamics_arguments, run=run_dynamics_command, shared=("device", "dtype", "progress"),
    progress_help="hide the progress bar", hub_bars=True, resumes=True,
)


TRAIN_LM = Command(
    "train-lm", help="train a small attention-only model on real text, saved at log-spaced steps (a series)",
    description="Train a 2-layer attention-only TransformerLens model (boot_native) with AdamW on a corpus in "
    "SmolLM2 tokens (vocabulary cut to the most frequent), a --repeat fraction of rows repeating a span of their "
    "first half later in the row. Saves the model at step 0 and at log-spaced steps into OUT/step_N with "
    "OUT/series.json, which mechprobe dynamics --model OUT reads.",
    add_arguments=add_train_lm_arguments, run=run_train_lm_command, shared=("device", "progress"),
    progress_help="hide the progress bar", resumes=True,
)
