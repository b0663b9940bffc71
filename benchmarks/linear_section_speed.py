"""Seconds of the report's linear-probe section on the default report's inputs, part by part (issue 23).

Builds what ``mechprobe report`` (default config) hands to
:func:`analyses.report.linear_section.run_linear_section`: SmolLM2-135M and MiniLM-L6, the first 4,000
Wikipedia-excerpt paragraphs of >= 200 characters shuffled with seed 0, the LDA topic model and its
word topics, and the toy folders. The topic model and the toys come from a finished report
(``--report``, default ``runs/baseline``: its ``topics/`` and ``toy/``), so a run does not retrain them;
without ``topics/`` the LDA is fitted as the report fits it. The section then runs once with
timers around its parts (model setups, random-weight controls, forward passes, fits), and the findings
(``linear_findings``: layer choice and bootstrap, which the report computes while writing) are timed
after it. torch runs on one thread, as everything on the shared development machine must.

    .venv/bin/python benchmarks/linear_section_speed.py --report runs/baseline

Prints one JSON line per part and a total; ``section_s`` is what ``timings.json`` calls
``linear_probes_s``.
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import json
import os
import random
import time
from collections import defaultdict
from pathlib import Path

from analyses.cli_checks import ScriptParser, list_arg, script_main, text_arg
from analyses.toy_model_loader import check_pretrained_spec
from mechprobe.validation import real_path

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--report", type=text_arg, default="runs/baseline",
                        help="a finished report folder (topics/, toy/)")
    parser.add_argument("--models", type=list_arg(str), default=["smollm2-135m", "minilm-l6"])
    args = parser.parse_args()
    for spec in args.models:  # before --report, whose default folder may be missing too
        check_pretrained_spec("--models", spec)
    if not real_path("--report", args.report).is_dir():  # a link that loops: named as one
        parser.error(f"--report {args.report!r} is not a folder; give a finished report folder (mechprobe report "
                     f"--out DIR)")
    from analyses.report.config import ReportConfig
    from analyses.toy_model_store import is_toy_folder

    config = ReportConfig()
    report = Path(args.report)
    toys = {name: report / "toy" / name for name in config.toys}
    if not (report / "topics" / "topic_config.json").is_file() and not any(map(is_toy_folder, toys.values())):
        parser.error(f"--report {args.report!r} holds neither topics/ nor a toy folder (toy/{', toy/'.join(toys)}), "
                     f"so the section would time an LDA fitted here and no toys; give a finished report folder "
                     f"(mechprobe report --out DIR)")

    import torch

    torch.set_num_threads(1)
    import analyses.report.linear_section as section
    from probes.core.loading import load_model
    from probes.text.corpora import iter_documents
    from probes.text.topics import LdaTopics, assign_word_topics, fit_lda_topics

    start = time.perf_counter()
    models = {spec: load_model(spec) for spec in args.models}
    documents = list(iter_documents(config.corpus, unit="paragraph", min_chars=config.min_chars,
                                    text_column=config.text_column, max_documents=config.max_documents))
    if (report / "topics" / "topic_config.json").is_file():
        topic_model = LdaTopics.load(report / "topics")
    else:
        topic_model = fit_lda_topics(documents, config.topics)
    word_topics = assign_word_topics(topic_model)
    random.Random(config.seed).shuffle(documents)
    print(json.dumps({"part": "inputs (not part of the section)", "s": round(time.perf_counter() - start, 2)}))

    seconds: dict[str, float] = defaultdict(float)

    def timed(name: str, function):
        def wrapper(*args, **kwargs):
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[name] += time.perf_counter() - began
        return wrapper

    for name in ("random_weight_control", "pretrained_setup", "toy_setup", "load_toy_model", "probe_setup"):
        setattr(section, name, timed(name, getattr(section, name)))
    start = time.perf_counter()
    runs = section.run_linear_section(models, documents, topic_model, word_topics, toys, config.linear,
                                      seed=config.seed, progress=False)
    total = time.perf_counter() - start
    fit = sum(scores.fit_seconds for scores in runs.values())
    for label, scores in runs.items():
        print(json.dumps({"run": label, "fit_s": round(scores.fit_seconds, 2)}))
    parts = {"setups (batches, labels)": seconds["pretrained_setup"] + seconds["toy_setup"],
             "toy models loaded": seconds["load_toy_model"],
             "random-weight controls built": seconds["random_weight_control"],
             "forward passes and reservoirs": seconds["probe_setup"] - fit, "fits (all runs)": fit}
    for part, value in parts.items():
        print(json.dumps({"part": part, "s": round(value, 2)}))
    print(json.dumps({"part": "section_s (linear_probes_s)", "s": round(total, 2)}))
    start = time.perf_counter()
    section.linear_findings(runs, n_boot=config.linear.n_boot, seed=config.seed)
    print(json.dumps({"part": "findings (computed when the report is written)",
                      "s": round(time.perf_counter() - start, 2)}))
    print(json.dumps({"load_average": os.getloadavg()}))


if __name__ == "__main__":
    main()
