"""``mechprobe toy NAME``: train a paper's toy model and probe it, resumably (the work: the toy's
``analyses/<name>/experiment.py`` through :func:`analyses.toy_seeds.run_with_seeds`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from analyses.cli_checks import device_arg, int_arg, text_arg
from analyses.cli_command import Command
from analyses.experiments import toy_experiment
from analyses.output_paths import check_output_folder, check_partial_folder, written_resumably
from analyses.toy_registry import toy_names, toys
from mechprobe import records
from probes.core.errors import ConfigError, MechprobeError
from toymodels.errors import TrainingDiverged, TrainingInterrupted


def add_arguments(toy: argparse.ArgumentParser) -> None:
    toy.add_argument("experiment", choices=sorted(toy_names()),
                     help=", ".join(f"{spec.name} ({spec.paper})" for spec in toys()))
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
    # not the shared --device/--dtype of pretrained models: the toy's device setting, and a flag refused with why
    toy.add_argument("--device", type=device_arg, metavar="DEV",
                     help="where the toy models train: cpu (default), cuda, cuda:1, mps ... (same as --set device=DEV)")
    toy.add_argument("--dtype", help=argparse.SUPPRESS)  # accepted only to say why it does not apply


def _is_toy_folder(folder: Path) -> bool:
    """A folder an earlier ``mechprobe toy`` wrote (finished, or stopped with its checkpoints, or the checkpoint
    series of ``--set series_checkpoints``, to resume from: its ``series.json``, or its first step while that was
    written, before the manifest)."""
    return any((folder / name).exists() for name in ("summary.json", "checkpoint", "checkpoints", "series/series.json",
                                                     "series/step_0"))


def _is_toy_output(folder: Path, experiment: str) -> bool:
    """A finished run of this toy, which the new run replaces: its summary.json reads back as the toy's result. Not
    another command's folder that also holds a summary.json or a checkpoint(s) folder (a report, a dynamics run, a
    train-lm series), which ``--out`` replaced whole."""
    from analyses.experiments import toy_result

    try:
        document = records.read_json(folder / "summary.json", rerun="")
        toy_result(experiment, document if isinstance(document, dict) else {}, rerun="")
    except MechprobeError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
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
    out = check_output_folder("--out", args.out, earlier_output=lambda found: _is_toy_output(found, args.experiment))
    partial = check_partial_folder("--out", out, resumable=_is_toy_folder)
    if partial.exists():
        print(f"resuming the unfinished run in {partial}")
    # The run works in OUT.partial and replaces OUT in one rename when it is done. Bad input found during the
    # run (or any other error) takes back OUT.partial if this command made it; a run stopped by SIGTERM, Ctrl-C
    # or divergence keeps it with its checkpoints, and so does a kill: the same command resumes from them.
    with written_resumably(out, keep_on=(TrainingDiverged, TrainingInterrupted, KeyboardInterrupt),
                           resumable=_is_toy_folder) as work:
        result = run_with_seeds(args.experiment, config, work, n_seeds=args.seeds, progress=not args.no_progress)
    shown = {k: v for k, v in records.dump(result).items() if not isinstance(v, (dict, list, tuple))}
    for key, value in shown.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    for name, finding in result.toy_findings().items():
        print(f"finding {name}: {cell(finding, toy_cell=True).replace('**', '')}")
    print(f"wrote {out / 'summary.json'}")
    return 0


TOY = Command(
    "toy", help="train a paper's toy model and probe it",
    description="Train the toy model of one paper and write summary.json and figures.",
    add_arguments=add_arguments, run=run, shared=("progress",), resumes=True,
)
