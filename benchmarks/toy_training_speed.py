"""Toy training speed of each paper's main configuration on one thread, against the papers' reference code.

The reference numbers were timed on this kind of machine (1 thread, same configuration) and are
given in issue 7; ours come from the project's own training paths with the settings of
``analyses/toy_*.py PRESETS["paper"]`` (``PRESETS["staged"]`` for induction heads: the staged schedule the
reference numbers were timed with):

- Scan and Snap (Fig. 4): ``train_on_cooccurrence`` of the Y/Z model, paper config, recording
  the expected attention of every fact after every step as ``analyses.scansnap.experiment`` does;
  ``--scansnap-steps`` steps. Whole process: a fresh ``mechprobe toy scansnap --preset paper
  --set train_standard=false`` (data, 100 steps, probes, figures, summary.json), beside the
  floor (a fresh interpreter importing only torch and transformer_lens, which the toy is built
  on) and a fresh interpreter importing our modules; ``--repeats`` interleaved runs, medians.
- Induction heads: ``sample_markov_icl`` for 10,000 sequences (S=3, n=3, L=100, alpha=0.1);
  ``train_simplified`` full batch on 9,000 sequences with the paper's staged schedule shortened
  to ``--induction-steps`` steps per stage (c, w, a), for the simplified and the full model.
- Topic structure: ``sample_documents`` + masking for the paper's 10,000 documents;
  ``train_topic_model`` on the joint variant at batch 40, in sequences/s.

Step rates come from a callback stamping the time after every step, over steps 2..N (the first
step's one-off allocations excluded).

    .venv/bin/python benchmarks/toy_training_speed.py
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import dataclasses
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from analyses.cli_checks import ScriptParser, count_arg, script_main, threads_arg
from analyses.induction.experiment import PRESETS as INDUCTION_PRESETS
from analyses.scansnap.config import PRESETS as SCANSNAP_PRESETS
from analyses.topic.experiment import PRESETS as TOPIC_PRESETS
from toymodels.induction import FullInductionModel, SimplifiedInductionModel
from toymodels.induction.data import sample_markov_icl
from toymodels.induction.training import train_simplified
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZTransformer
from toymodels.scansnap.training import train_on_cooccurrence
from toymodels.topic.model import TopicModel
from toymodels.topic.training import MaskedLMData, train_topic_model

REFERENCE = {
    "scansnap steps/s": 62.5,
    "scansnap whole process s": 7.8,
    "induction data 10k s": 178.0,
    "simplified steps/s": (0.55, 0.8),
    "full steps/s": 0.15,
    "topic sequences/s": (620.0, 670.0),
}


class StepClock:
    """Training callback stamping ``perf_counter`` after each step."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def __call__(self, step, model, history) -> None:
        self.stamps.append(time.perf_counter())

    def rate(self, first: int = 0, last: int | None = None) -> float:
        """Steps per second between stamp ``first`` and stamp ``last``."""
        stamps = self.stamps[first:last]
        return (len(stamps) - 1) / (stamps[-1] - stamps[0])


def _wall(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def scansnap(steps: int, repeats: int) -> dict[str, float]:
    paper = SCANSNAP_PRESETS["paper"]
    config = dataclasses.replace(paper, train=dataclasses.replace(paper.train, n_steps=steps))
    data = CooccurrenceData(config.data)
    model = YZTransformer(config.model_config())
    supports = [data.support(f) for f in range(data.n_facts)]

    def record(step, trained, history) -> None:
        expected = trained.expected_attention(data.fact_last, data.context_probs)
        [expected[f, supports[f]].float() for f in range(data.n_facts)]

    clock = StepClock()
    train_on_cooccurrence(model, data, config.train, callbacks=[record, clock])
    # fresh interpreters, interleaved: the floor (torch + transformer_lens), our imports, the whole command
    walls: dict[str, list[float]] = {"floor s": [], "imports s": [], "whole process s": []}
    for _ in range(repeats):
        walls["floor s"].append(_wall([sys.executable, "-c", "import torch, transformer_lens"]))
        walls["imports s"].append(_wall([sys.executable, "-c", "import analyses.cli, analyses.scansnap.experiment"]))
        with tempfile.TemporaryDirectory() as out:
            command = [str(Path(sys.executable).parent / "mechprobe"), "toy", "scansnap", "--preset", "paper",
                       "--set", "standard.enabled=false", "--out", out]
            walls["whole process s"].append(_wall(command))
    return {"steps/s": clock.rate(1), **{k: statistics.median(v) for k, v in walls.items()}}


PHASES = """
import time
stamps = [time.perf_counter()]
import torch
stamps.append(time.perf_counter())
import transformer_lens
stamps.append(time.perf_counter())
import dataclasses, tempfile
from pathlib import Path
import analyses.cli, analyses.scansnap.experiment as scansnap
stamps.append(time.perf_counter())
torch.set_num_threads(1)
paper = scansnap.PRESETS["paper"]
main = scansnap.main_run(dataclasses.replace(paper, standard=dataclasses.replace(paper.standard, enabled=False)),
                         progress=False)
stamps.append(time.perf_counter())
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot
stamps.append(time.perf_counter())
out = Path(tempfile.mkdtemp())
scansnap.plot_heatmap(main, out / "heatmap.png")
scansnap.plot_loss(main.history, out / "loss.png")
stamps.append(time.perf_counter())
print(*(b - a for a, b in zip(stamps, stamps[1:])))
"""
PHASE_NAMES = ("import torch", "import transformer_lens", "import our modules", "data + 100 steps + probes",
               "import matplotlib", "two figures")


def scansnap_phases() -> dict[str, float]:
    """Seconds of each phase of the Scan and Snap run in one fresh interpreter (no CLI, no summary.json)."""
    out = subprocess.run([sys.executable, "-c", PHASES], check=True, capture_output=True, text=True).stdout
    return dict(zip(PHASE_NAMES, map(float, out.split())))


def induction_model(config, kind: str) -> SimplifiedInductionModel:
    """The simplified (or full) model of ``analyses.induction.experiment`` for the experiment ``config``."""
    model_class = FullInductionModel if kind == "full" else SimplifiedInductionModel
    return model_class(dataclasses.replace(config.model_config(), model_name=f"chen-{kind}"))


def induction(steps_per_stage: int, full_steps_per_stage: int) -> dict[str, float]:
    config = INDUCTION_PRESETS["staged"]
    start = time.perf_counter()
    tokens = sample_markov_icl(config.data, 10_000, config.seed).tokens
    data_s = time.perf_counter() - start
    train_tokens = tokens[: config.n_train]
    out: dict[str, float] = {"data 10k s": data_s}
    for name, per_stage in (("simplified", steps_per_stage), ("full", full_steps_per_stage)):
        model = induction_model(config, name)
        training = dataclasses.replace(config.train, stage_steps=(per_stage,) * 3, batch_size=0, seed=0)
        clock = StepClock()
        train_simplified(model, train_tokens, training, callbacks=[clock])
        for i, stage in enumerate("cwa"):
            # stamp j follows step j + 1; stage i's steps end at stamps i*k .. (i+1)*k - 1 (step 1 excluded)
            out[f"{name} steps/s stage {stage}"] = clock.rate(max(i * per_stage - 1, 0), (i + 1) * per_stage)
        out[f"{name} steps/s all"] = clock.rate(1)
    return out


def topic(steps: int, batch_size: int) -> dict[str, float]:
    config = TOPIC_PRESETS["paper"]
    start = time.perf_counter()
    data = MaskedLMData(config.lda, config.masking, config.data, seed=config.seed)  # samples and masks the documents
    data_s = time.perf_counter() - start
    model = TopicModel(config.model_config(embedding="trained"))
    training = dataclasses.replace(config.training("joint"), n_steps=steps, batch_size=batch_size)
    clock = StepClock()
    train_topic_model(model, data, training, callbacks=[clock])
    return {"data s": data_s, "documents": config.data.n_documents, "sequences/s": clock.rate(1) * batch_size}


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n")[0])
    # a rate takes two stamps after the first step (not timed: set-up): 3 steps, or 2 per induction stage
    parser.add_argument("--scansnap-steps", type=count_arg(3), default=50)
    parser.add_argument("--induction-steps", type=count_arg(2), default=4, help="full-batch steps per stage (c, w, a)")
    parser.add_argument("--full-steps", type=count_arg(2), default=2, help="full-model full-batch steps per stage")
    parser.add_argument("--topic-steps", type=count_arg(3), default=50)
    parser.add_argument("--topic-batch", type=count_arg(1), default=40)
    parser.add_argument("--threads", type=threads_arg(1), default=1)
    parser.add_argument("--repeats", type=count_arg(1), default=3,
                        help="fresh-interpreter timings of Scan and Snap (median)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    s = scansnap(args.scansnap_steps, args.repeats)
    i = induction(args.induction_steps, args.full_steps)
    t = topic(args.topic_steps, args.topic_batch)
    simplified = [i[f"simplified steps/s stage {x}"] for x in "cwa"]
    full = [i[f"full steps/s stage {x}"] for x in "cwa"]

    def span(values: list[float]) -> str:
        return f"{min(values):.2f}-{max(values):.2f}"

    rows = [
        ("Scan and Snap Fig. 4: steps/s", f"{s['steps/s']:.1f}", "62.5", s["steps/s"] / 62.5, 2.0),
        ("Scan and Snap: whole process s", f"{s['whole process s']:.1f}", "7.8", 7.8 / s["whole process s"], 2.0),
        ("induction: data, 10,000 sequences s", f"{i['data 10k s']:.3f}", "178", 178 / i["data 10k s"], 50.0),
        ("induction simplified: full-batch steps/s (c/w/a)", span(simplified), "0.55-0.8",
         statistics.median(simplified) / 0.8, 2.0),
        ("induction full model: full-batch steps/s (c/w/a)", span(full), "0.15", statistics.median(full) / 0.15, 2.0),
        ("topic joint: sequences/s at batch 40", f"{t['sequences/s']:.0f}", "620-670", t["sequences/s"] / 670, 2.0),
    ]
    print(f"torch threads {torch.get_num_threads()}; steps timed: scansnap {args.scansnap_steps}, induction "
          f"{args.induction_steps}/stage, full {args.full_steps}/stage, topic {args.topic_steps}")
    print(f"{'measure':<50} {'ours':>12} {'reference':>10} {'speed-up':>9} {'target':>7}")
    for name, ours, ref, speedup, target in rows:
        print(f"{name:<50} {ours:>12} {ref:>10} {speedup:>8.1f}x {'met' if speedup >= target else 'NOT met':>7}")
    print(f"Scan and Snap whole process, median of {args.repeats} fresh interpreters each: floor `import torch, "
          f"transformer_lens` {s['floor s']:.2f} s; `import analyses.cli, analyses.scansnap.experiment` "
          f"{s['imports s']:.2f} s; "
          f"whole command {s['whole process s']:.2f} s = floor + {s['whole process s'] - s['floor s']:.2f} s")
    phases = scansnap_phases()
    print("Scan and Snap phases in one fresh interpreter: " + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()))
    print(f"topic data ({t['documents']} documents, sampled + masked): {t['data s']:.3f} s (no reference number)")
    print("speed-up of a range: ours (median over stages) against the reference's fastest; steps/s = steps 2..N")


if __name__ == "__main__":
    main()
