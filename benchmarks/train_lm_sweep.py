"""Where and when induction forms on real text: ``mechprobe train-lm`` over its ``repeat`` fraction and seeds.

For each repeat fraction R and seed S the script trains ``OUT/repeat_R/seed_S`` (``mechprobe train-lm``, which
resumes a stopped run and leaves a finished one alone) and measures it (``mechprobe dynamics`` into
``OUT/repeat_R/seed_S-dynamics``, resumed the same way). It prints one Markdown row per run: the previous-token and
induction events (step where each curve crosses half its rise, with the bootstrap interval over batches), the
induction score at its peak against the first checkpoint, the order "previous-token before induction" with its
verdict, and whether the repeated-half loss gain falls inside the induction event's interval. Per repeat fraction
with two or more seeds it adds the order over seeds: the mean step difference with a Student t interval over seeds
and the verdict over seeds (:class:`analyses.toy_findings.ToyFinding`, as the toys are judged).

    .venv/bin/python benchmarks/train_lm_sweep.py --repeat 0,0.5,1 --seeds 0 --out runs/sweep   # ~10 min a run
    .venv/bin/python benchmarks/train_lm_sweep.py --repeat 1 --seeds 0,1,2 --out runs/sweep      # the seeds

Runs already trained elsewhere can be linked into the layout (``ln -s /path/to/run OUT/repeat_1/seed_0``). Each
training uses ``--threads`` torch threads; the runs are sequential.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import analyses.script_start  # noqa: E402, F401  (a Ctrl-C while the imports below run: one line)
from analyses.cli_checks import ScriptParser, count_arg, list_arg, number_arg, script_main, seed_arg, threads_arg  # noqa: E402
from analyses.dynamics.train_lm import TrainLmConfig  # noqa: E402
from analyses.output_paths import check_output_folder  # noqa: E402
from analyses.series_writer import fewest_steps, steps_fit  # noqa: E402
from analyses.toy_findings import ToyFinding  # noqa: E402
from mechprobe import records  # noqa: E402
from probes.core.errors import ConfigError  # noqa: E402
from probes.stats.findings import Finding  # noqa: E402

ORDER = "previous_token_before_induction"


def mechprobe(*args: str, threads: int) -> float:
    """Run one mechprobe command in a fresh process with ``threads`` torch threads; its wall seconds."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import sys; from analyses.cli import main; sys.exit(main(sys.argv[1:]))",
                    *args, "--no-progress"], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - start


def check_steps(steps: int | None) -> None:
    """``--steps`` gives train-lm's checkpoints distinct log-spaced steps (else every run would be refused, after
    the sweep's folders were made); checked before any work."""
    n_checkpoints = TrainLmConfig().n_checkpoints
    if steps is not None and not steps_fit(steps, n_checkpoints):
        raise ConfigError(f"--steps {steps}: train-lm saves {n_checkpoints} checkpoints at distinct log-spaced "
                          f"steps, which {steps} steps do not give; give --steps {fewest_steps(n_checkpoints)} or "
                          f"more.")


def _event(events: dict[str, Any], curve: str) -> str:
    change = events["events"].get(curve, {}).get("change")
    finding = events["events"].get(curve, {}).get("finding", {})
    if not change or change.get("step") is None:
        return f"none ({finding.get('verdict', 'n/a')})"
    low, high = change["step_ci"]
    return f"{change['step']:.0f} [{low:.0f}, {high:.0f}] ({finding['verdict']})"


def _order(events: dict[str, Any]) -> tuple[str, Finding | None]:
    document = events["orders"].get(ORDER)
    if document is None:
        return "not tested", None
    finding = records.load(Finding, document)
    low, high = finding.ci
    return f"{finding.value:.0f} [{low:.0f}, {high:.0f}] ({finding.verdict})", finding


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=list_arg(number_arg(0, maximum=1)), default=[0.0, 0.5, 1.0],
                        help="repeat fractions, comma separated")
    parser.add_argument("--seeds", type=list_arg(seed_arg), default=[0], help="seeds, comma separated")
    parser.add_argument("--steps", type=count_arg(1), default=None, help="optimizer steps (default: train-lm's)")
    parser.add_argument("--threads", type=threads_arg(1), default=1)
    parser.add_argument("--out", required=True, help="the sweep's folder (new, empty, or an earlier sweep's to resume)")
    args = parser.parse_args()
    check_steps(args.steps)
    out = check_output_folder("--out", args.out, earlier_output=lambda folder: all(
        p.is_dir() and p.name.startswith("repeat_") for p in folder.iterdir())).resolve()  # the steps run in ROOT
    repeats, seeds = args.repeat, args.seeds
    rows = ["| repeat | seed | train s (this call) | previous-token event | induction event "
            "| induction first -> peak (chance) | previous-token before induction | loss gain inside induction's |",
            "|" + " --- |" * 8]
    orders: dict[float, list[tuple[int, Finding]]] = {}
    for repeat in repeats:
        for seed in seeds:
            run = out / f"repeat_{repeat:g}" / f"seed_{seed}"
            run.parent.mkdir(parents=True, exist_ok=True)
            steps = () if args.steps is None else ("--steps", str(args.steps))
            trained = mechprobe("train-lm", "--out", str(run), "--repeat", str(repeat), "--seed", str(seed), *steps,
                                threads=args.threads)
            measured = Path(f"{run}-dynamics")
            mechprobe("dynamics", "--model", str(run.resolve()), "--out", str(measured), threads=args.threads)
            summary = json.loads((measured / "summary.json").read_text())
            events = summary["events"]
            induction = summary["curves"]["induction"]
            chance = events["events"]["induction"]["finding"]["null_value"]
            text, finding = _order(events)
            if finding is not None:
                orders.setdefault(repeat, []).append((seed, finding))
            rows.append(f"| {repeat:g} | {seed} | {trained:.0f} | {_event(events, 'previous_token')} | "
                        f"{_event(events, 'induction')} | {induction[0]:.3f} -> {max(induction):.3f} ({chance:.3f}) | "
                        f"{text} | {events.get('loss_drop_within_induction')} |")
    print("\n".join(rows))
    for repeat, found in orders.items():
        if len(found) < 2:
            continue
        over = ToyFinding(f"train-lm repeat={repeat:g}", ORDER, tuple(s for s, _ in found),
                          tuple(f for _, f in found), ())
        low, high = over.ci
        print(f"\nrepeat {repeat:g}, seeds {list(over.seeds)}: induction minus previous-token event "
              f"{over.value:.0f} steps [{low:.0f}, {high:.0f}] (t interval over seeds), held on {over.held} of "
              f"{len(over.seeds)} seeds: {over.verdict}")


if __name__ == "__main__":
    main()
