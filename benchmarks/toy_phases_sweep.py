"""The induction toy's phases over seeds: the uniform / in-context unigram / in-context bigram events beside the
copier and classifier events, their orders per seed and over seeds, and the toy at a learning rate of ~0 as control.

For each seed S the script trains the standard toy as a series (``mechprobe toy induction --preset standard --set
series_checkpoints=N --set seed=S`` into ``OUT/seed_S``; a finished toy folder is left alone), measures it
(``mechprobe dynamics --model OUT/seed_S/series`` into ``OUT/seed_S-dynamics``, which resumes itself) and with
``--refine`` refines it (``dynamics --refine`` into ``OUT/seed_S-refined``, starting from the coarse run's stored
measures). With ``--control`` it also writes the toy at initialisation as a series on the trained series' coarse
grid (``OUT/control_S/series``: seed S's initial weights at step 0, a fresh initialisation at every later
checkpoint; no training) and measures it the same way. It prints one Markdown row per seed (each event's
step with its bootstrap interval and verdict, each order) and over seeds:

- each event: the mean event step with its Student-t interval over seeds (descriptive), the seeds on which it held,
  and the event finding over seeds (:class:`analyses.toy_findings.ToyFinding`: the curve at its peak checkpoint,
  mean and t interval over seeds; with ``--control`` the control series' finding is its control, as every toy
  finding is judged against the toy at initialisation);
- each order ``A_before_B`` (``step_B - step_A``): the mean difference with its t interval over seeds, the seeds on
  which it held, and its verdict over seeds (as ``benchmarks/train_lm_sweep.py`` judges train-lm's order); an
  interval wholly below 0 is reported as the reverse order;
- the control: per seed how many events hold (none should);
- with ``--reading``: what the layer-2 classifier reads (:mod:`analyses.induction.reading`) at the checkpoints
  nearest the classifier's and the copier's events (the refined events with ``--refine``) and at the last one, per
  seed: its attention on the score's targets, the local window and the rest beside uniform attention's, and the
  drop of its score with each residual component mean-replaced in its keys only.

    .venv/bin/python benchmarks/toy_phases_sweep.py --seeds 0,1,2,3,4 --control --out /tmp/toyphases   # 4-14 min a seed
    .venv/bin/python benchmarks/toy_phases_sweep.py --seeds 0,1,2,3,4 --refine --out /tmp/toyphases    # + 2-8 min
    .venv/bin/python benchmarks/toy_phases_sweep.py --seeds 0,1,2,3,4 --refine --reading --out /tmp/toyphases

Each command runs in a fresh process with ``--threads`` torch threads (the same for training and ``--refine``, whose
re-runs must reproduce the kept weights); the runs are sequential.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import analyses.script_start  # noqa: E402, F401  (a Ctrl-C while the imports below run: one line)

# isort: split

from scipy.stats import t as student_t  # noqa: E402

from analyses.cli_checks import ScriptParser, count_arg, list_arg, script_main, seed_arg, threads_arg  # noqa: E402
from analyses.dynamics.refine import REFINEMENT  # noqa: E402
from analyses.dynamics.run import STORE, toy_settings  # noqa: E402
from analyses.dynamics.summary import SUMMARY, DynamicsSummary, load_summary  # noqa: E402
from analyses.experiments import toy_experiment  # noqa: E402
from analyses.induction.edge import toy_batches  # noqa: E402
from analyses.induction.findings import build_model  # noqa: E402
from analyses.induction.reading import POSITIONS, ClassifierReading, classifier_reading  # noqa: E402
from analyses.output_paths import check_output_folder  # noqa: E402
from analyses.series_writer import INDUCTION_TOY_MEASURE, most_checkpoints, steps_fit, write_manifest  # noqa: E402
from analyses.toy_findings import ToyFinding  # noqa: E402
from analyses.toy_model_loader import load_any_model  # noqa: E402
from analyses.toy_model_store import save_standard_model  # noqa: E402
from probes.core.checkpoint_series import MANIFEST, checkpoint_series  # noqa: E402
from probes.core.errors import ConfigError  # noqa: E402
from probes.stats.findings import Finding  # noqa: E402

PHASES = ("beats_uniform", "beats_unigram", "beats_bigram")
HEADS = ("copier", "classifier")
ORDERS = ("beats_uniform_before_beats_unigram", "beats_unigram_before_beats_bigram", "beats_unigram_before_copier",
          "copier_before_beats_bigram", "classifier_before_beats_bigram", "copier_before_classifier")
CONTROL_SEED = 10_000
READ = ("token", "position", "copier", "other_heads", "all")


def mechprobe(*args: str, threads: int) -> float:
    """Run one mechprobe command in a fresh process with ``threads`` torch threads; its wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from analyses.cli import main; sys.exit(main(sys.argv[1:]))",
                    *args, "--no-progress"], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def check_checkpoints(count: int) -> None:
    """``--checkpoints`` distinct log-spaced steps fit in the standard toy's training (else every toy would be
    refused, after the sweep's folder was made); checked before any work."""
    n_steps = toy_experiment("induction").PRESETS["standard"].standard_train.n_steps
    if not steps_fit(n_steps, count):
        most = most_checkpoints(n_steps, count)
        raise ConfigError(f"--checkpoints {count}: the standard induction toy trains {n_steps} steps, which give "
                          f"at most {most} distinct log-spaced checkpoints; give --checkpoints {most} or fewer.")


def toy_series(folder: Path, seed: int, checkpoints: int, settings: Sequence[str], threads: int) -> float:
    """Train the standard toy as a series into ``folder`` unless it finished there; the wall seconds (0: reused)."""
    if (folder / "summary.json").is_file():
        return 0.0
    sets = [item for s in (f"series_checkpoints={checkpoints}", f"seed={seed}", *settings) for item in ("--set", s)]
    return mechprobe("toy", "induction", "--preset", "standard", *sets, "--out", str(folder), threads=threads)


def init_control(trained: Path, out: Path, steps: Sequence[int], seed: int) -> Path:
    """The toy at initialisation as a series on ``steps`` (the trained series' coarse grid) in ``out/series``: the
    trained toy's own initial weights at the first step, then a fresh initialisation (seed
    ``CONTROL_SEED + 100 * seed + i``) at the ``i``-th, so its curves move by the draw alone (as in
    ``tests/analyses/dynamics/test_toy_series.py``). Made once; no training."""
    folder = out / "series"
    if (folder / MANIFEST).is_file():
        return folder
    config = toy_settings(checkpoint_series(trained))
    assert config is not None
    tokens = json.loads((trained / MANIFEST).read_text())["checkpoints"]
    tokens_per_step = next(c["tokens"] // c["step"] for c in tokens if c["step"] > 0)
    for index, step in enumerate(steps):
        drawn = config.seed if index == 0 else CONTROL_SEED + 100 * seed + index
        model = build_model(dataclasses.replace(config, seed=drawn))
        save_standard_model(model, dataclasses.replace(config.standard_model_config(), seed=drawn),
                            folder / f"step_{step}", "induction")
    write_manifest(folder, steps, tokens_per_step=tokens_per_step,
                   extra={"measure": INDUCTION_TOY_MEASURE, "settings": dataclasses.asdict(config)})
    return folder


def measured(series: Path, out: Path, threads: int, *,
             refine_from: Path | None = None) -> tuple[DynamicsSummary, float]:
    """``dynamics`` on ``series`` into ``out`` (``--refine`` when ``refine_from``, whose stored measures it starts
    from); the summary and the wall seconds (0: finished earlier)."""
    done = out / (REFINEMENT if refine_from is not None else SUMMARY)
    if done.is_file():  # finished earlier (a coarse run is not redone on a series refined since)
        return load_summary(out), 0.0
    if refine_from is not None and not out.exists():
        shutil.copytree(refine_from / STORE, out / STORE)
    seconds = mechprobe("dynamics", "--model", str(series), "--out", str(out),
                        *(("--refine",) if refine_from is not None else ()), threads=threads)
    return load_summary(out), seconds


def _steps(value: float, ci: tuple[float, float]) -> str:
    if math.isnan(value):
        return "none"
    return f"{value:.0f} [{ci[0]:.0f}, {ci[1]:.0f}]"


def event_cell(summary: DynamicsSummary, curve: str) -> str:
    """The event's step [interval] and its verdict; a curve already past its crossing at the first checkpoint has no
    step (its value there is given)."""
    event = summary.events.events[curve]
    step = _steps(event.change.step, event.change.step_ci)
    if math.isnan(event.change.step) and curve in PHASES and summary.curves[curve][0] > 0:
        step = f"none (already {summary.curves[curve][0]:+.3f} at step {summary.steps[0]})"
    return f"{step}, {event.finding.verdict}"


def order_cell(summary: DynamicsSummary, name: str) -> str:
    finding = summary.events.orders[name]
    return f"{_steps(finding.value, finding.ci)}, {finding.verdict}"


def mean_interval(values: Sequence[float]) -> str:
    """Mean and 95% Student-t interval over seeds (``n/a`` with a missing value or one seed)."""
    if len(values) < 2 or any(math.isnan(v) for v in values):
        return "n/a"
    n, mean = len(values), sum(values) / len(values)
    half = float(student_t.ppf(0.975, n - 1)) * math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1) / n)
    return f"{mean:.0f} [{mean - half:.0f}, {mean + half:.0f}]"


def over_seeds(name: str, seeds: Sequence[int], per_seed: Sequence[Finding], control: Sequence[Finding] = (),
               unit: str = "") -> str:
    """The finding over seeds, as the toys are judged; an order over the seeds where both its events have a step (a
    phase already passed at the first checkpoint has none)."""
    kept = [i for i, finding in enumerate(per_seed) if math.isfinite(finding.value)]
    if len(kept) < 2:
        return f"{len(kept)} of {len(seeds)} seeds with both events: not judged over seeds"
    found = ToyFinding("induction series", name, tuple(seeds[i] for i in kept), tuple(per_seed[i] for i in kept),
                       tuple(control[i] for i in kept) if control else ())
    low, high = found.ci
    reverse = " (its interval lies below 0: the reverse order)" if high < 0 and "_before_" in name else ""
    over = "" if len(kept) == len(seeds) else f" (the {len(kept)} seeds with both events)"
    return (f"{found.value:.3g} [{low:.3g}, {high:.3g}]{unit}, held on {found.held} of {len(seeds)} seeds, over "
            f"seeds{over}: {found.verdict}{reverse}")


def report(title: str, summaries: dict[int, DynamicsSummary], controls: dict[int, DynamicsSummary]) -> list[str]:
    """The per-seed table and the over-seeds lines of one set of summaries (module docstring)."""
    seeds = list(summaries)
    lines = [f"\n### {title}\n", "| seed | checkpoints | " + " | ".join((*PHASES, *HEADS)) + " |",
             "|" + " --- |" * (2 + len(PHASES) + len(HEADS))]
    for seed, summary in summaries.items():
        lines.append(f"| {seed} | {len(summary.steps)} | "
                     + " | ".join(event_cell(summary, c) for c in (*PHASES, *HEADS)) + " |")
    lines += ["", "| seed | " + " | ".join(ORDERS) + " |", "|" + " --- |" * (1 + len(ORDERS))]
    for seed, summary in summaries.items():
        lines.append(f"| {seed} | " + " | ".join(order_cell(summary, o) for o in ORDERS) + " |")
    if len(seeds) < 2:
        return lines
    lines.append("")
    use_control = sorted(controls) == sorted(seeds)
    for curve in (*PHASES, *HEADS):
        steps = [summaries[s].events.events[curve].change.step for s in seeds]
        findings = [summaries[s].events.events[curve].finding for s in seeds]
        control = [controls[s].events.events[curve].finding for s in seeds] if use_control else []
        lines.append(f"- {curve}: event step {mean_interval(steps)} over seeds ({sum(not math.isnan(v) for v in steps)}"
                     f" of {len(seeds)} seeds with a step); at its peak "
                     f"{over_seeds(curve, seeds, findings, control)}")
    for name in ORDERS:
        orders = [summaries[s].events.orders[name] for s in seeds]
        lines.append(f"- {name}: {over_seeds(name, seeds, orders, unit=' steps')}")
    return lines


def control_lines(controls: dict[int, DynamicsSummary]) -> list[str]:
    lines = ["\n### Control: the toy at initialisation at every checkpoint (redrawn after the first)\n",
             "| seed | events that hold | " + " | ".join(f"{c} first -> largest" for c in (*PHASES, *HEADS)) + " |",
             "|" + " --- |" * (2 + len(PHASES) + len(HEADS))]
    for seed, summary in controls.items():
        held = [curve for curve, event in summary.events.events.items() if event.holds]
        lines.append(f"| {seed} | {', '.join(held) or 'none'} | " + " | ".join(
            f"{summary.curves[c][0]:.3f} -> {max(summary.curves[c]):.3f}" for c in (*PHASES, *HEADS)) + " |")
    return lines


def reading_cells(reading: ClassifierReading) -> str:
    """The heads, the score beside chance, the position shares beside uniform's and each of :data:`READ`'s drops
    [interval] (share of the score's excess over chance), then every layer-1 head's drop (the distance it attends
    most, with its mass there)."""
    shares = " / ".join(f"{reading.shares[p]:.3f} ({reading.uniform_shares[p]:.3f})" for p in POSITIONS)
    drops = reading.drops()
    cells = [f"{drops[n][0]:.3f} [{drops[n][1]:.3f}, {drops[n][2]:.3f}] ({reading.drop_share(n):.2f})" for n in READ]
    heads = " / ".join(f"{drops[f'head{h}'][0]:.3f} (d{int(mass.argmax())} {float(mass.max()):.2f})"
                       for h, mass in enumerate(reading.layer1))
    return (f"L1H{reading.copier[1]}, L2H{reading.classifier[1]} | {reading.score:.3f} ({reading.chance:.3f}) | "
            f"{shares} | " + " | ".join(cells) + f" | {heads} |")


def reading_lines(series: dict[int, Path], summaries: dict[int, DynamicsSummary]) -> list[str]:
    """Per seed, the classifier's reading at the checkpoints nearest its event, the copier's event and the last."""
    lines = ["\n### What the layer-2 classifier reads (analyses/induction/reading.py)\n",
             "| seed | at | step | copier, classifier | score (chance) | targets / window / rest (uniform) | "
             + " | ".join(f"{n} drop" for n in READ) + " | layer-1 heads' drops (distance, mass) |",
             "|" + " --- |" * (7 + len(READ))]
    for seed, summary in summaries.items():
        loaded = checkpoint_series(series[seed])
        config = toy_settings(loaded)
        assert config is not None
        batches = toy_batches(config, 8)
        events = summary.events.events
        for label, step in (*((f"{h} event", events[h].change.step) for h in ("classifier", "copier")),
                            ("last", loaded.steps[-1])):
            if math.isnan(step):
                lines.append(f"| {seed} | {label} | none |" + " |" * (4 + len(READ)))
                continue
            checkpoint = min(loaded.checkpoints, key=lambda c: abs(c.step - step))
            reading = classifier_reading(load_any_model(checkpoint.spec), batches, config.data.order,
                                         seed=config.seed)
            lines.append(f"| {seed} | {label} | {step:.0f} -> {checkpoint.step} | {reading_cells(reading)}")
    return lines


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=list_arg(seed_arg), default=[0, 1, 2, 3, 4], help="seeds, comma separated")
    parser.add_argument("--checkpoints", type=count_arg(2), default=12, help="series_checkpoints (default 12)")
    parser.add_argument("--refine", action="store_true", help="also refine each series (dynamics --refine)")
    parser.add_argument("--control", action="store_true",
                        help="also the toy at initialisation (redrawn at every checkpoint of the coarse grid)")
    parser.add_argument("--reading", action="store_true",
                        help="also what the layer-2 classifier reads at its and the copier's events and at the end")
    parser.add_argument("--threads", type=threads_arg(1), default=1)
    parser.add_argument("--out", required=True, help="the sweep's folder (new, empty, or an earlier sweep's to resume)")
    args = parser.parse_args()
    check_checkpoints(args.checkpoints)
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: any(
        p.name.startswith(("seed_", "control_")) for p in folder.iterdir())).resolve()
    coarse: dict[int, DynamicsSummary] = {}
    refined: dict[int, DynamicsSummary] = {}
    controls: dict[int, DynamicsSummary] = {}
    timings = ["| run | toy s | dynamics s | refine s |", "| --- | ---: | ---: | ---: |"]
    for seed in args.seeds:
        toy = out / f"seed_{seed}"
        trained = toy_series(toy, seed, args.checkpoints, (), args.threads)
        coarse[seed], seconds = measured(toy / "series", out / f"seed_{seed}-dynamics", args.threads)
        refine_seconds = "-"
        if args.refine:
            refined[seed], spent = measured(toy / "series", out / f"seed_{seed}-refined", args.threads,
                                            refine_from=out / f"seed_{seed}-dynamics")
            refine_seconds = f"{spent:.0f}"
        timings.append(f"| seed {seed} | {trained:.0f} | {seconds:.0f} | {refine_seconds} |")
        if args.control:
            series = init_control(toy / "series", out / f"control_{seed}", coarse[seed].steps, seed)
            controls[seed], seconds = measured(series, out / f"control_{seed}-dynamics", args.threads)
            timings.append(f"| control {seed} | - | {seconds:.0f} | - |")
    lines = [*timings, *report("Coarse grid", coarse, controls)]
    if refined:
        lines += report("Refined (dynamics --refine)", refined, controls)
    if controls:
        lines += control_lines(controls)
    if args.reading:
        lines += reading_lines({seed: out / f"seed_{seed}" / "series" for seed in args.seeds}, refined or coarse)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
