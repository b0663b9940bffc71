"""The report's linear-probe section: decodability curves, toy beside pretrained beside random weights.

Each model (the induction and topic toys, each pretrained model) and its random-weight control get one
:class:`probes.LinearProbe` over shared batches: parents ``tok[t-k]`` (toy induction, pretrained),
the word's and the document's LDA topic (toy topic, pretrained). A finding per model and label key: the
selectivity (accuracy minus the control task's) of the best layer, chosen on the even-ranked documents and
measured on the odd-ranked ones (out-of-fold predictions, bootstrap over documents). It *holds* when
its Holm-adjusted p-value is below 0.01 and its interval lies above 0 and above the random-weight model's
selectivity measured the same way, by at least ``MIN_EFFECT``. Results are kept under
``results/linear/`` so ``mechprobe render`` rebuilds the section without a model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from analyses.linear.figures import selectivity_curves
from analyses.linear.experiment import LinearProbeConfig, ProbeSetup, pretrained_setup, probe_setup, toy_setup
from analyses.report.document import Figure, Section, Table
from analyses.toy_model_store import is_toy_folder, load_toy_model
from probes.core.atomic import atomic_write_text
from probes.stats.control_model import random_weight_control
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import Finding, adjust_family
from probes.linear.labels import CombinedLabels
from probes.linear.probe import LinearProbeScores
from probes.core.result import ProbeResult

MIN_EFFECT = 0.05
CONTROL_SUFFIX = " (random weights)"
KEY_NAMES = {"word": "topic of the word", "document": "topic of the document", "next": "next-token class"}


@dataclass(frozen=True)
class LinearReportConfig:
    """The report's linear probes: ``n_hooks`` evenly spaced residual hooks per pretrained model (embeddings and
    last layer included), ``max_batches`` batches of text, ``max_examples`` kept positions, parents at
    ``distances`` among the ``top_tokens`` most frequent tokens, ``toy_sequences`` sequences per toy."""

    enabled: bool = True
    n_hooks: int = 5
    max_examples: int = 1000
    n_folds: int = 3
    n_boot: int = 1000
    top_tokens: int = 20
    distances: tuple[int, ...] = (1, 2)
    max_batches: int = 4
    toy_sequences: int = 128

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"linear.enabled must be true or false; got {self.enabled!r}.")
        if isinstance(self.n_hooks, bool) or not isinstance(self.n_hooks, int) or self.n_hooks < 2:
            raise ConfigError(f"linear.n_hooks must be an integer >= 2 (embeddings and the last layer); got "
                              f"{self.n_hooks!r}.")
        self.probe_config(0)  # validates the rest

    def probe_config(self, seed: int) -> LinearProbeConfig:
        return LinearProbeConfig(max_examples=self.max_examples, n_folds=self.n_folds, n_boot=self.n_boot,
                                 top_tokens=self.top_tokens, distances=self.distances, max_batches=self.max_batches,
                                 toy_sequences=self.toy_sequences, seed=seed)


def evenly_spaced(hooks: tuple[str, ...], n: int) -> tuple[str, ...]:
    """``n`` hooks spread over ``hooks`` (the first and the last always kept)."""
    if len(hooks) <= n:
        return hooks
    picks = sorted({round(i * (len(hooks) - 1) / (n - 1)) for i in range(n)})
    return tuple(hooks[i] for i in picks)


def _both(model: Any, setup: ProbeSetup, config: LinearProbeConfig, label: str, *, toy: bool,
          progress: bool) -> dict[str, LinearProbeScores]:
    control = random_weight_control(model, seed=config.seed, redraw_unresettable=toy)
    return {label: probe_setup(model, setup, config, progress=progress),
            label + CONTROL_SUFFIX: probe_setup(control, setup, config, progress=progress)}


def run_linear_section(models: Mapping[str, Any], documents: list[Any], topic_model: Any,
                       word_topics: Mapping[str, int], toy_folders: Mapping[str, Path], config: LinearReportConfig,
                       *, seed: int, progress: bool) -> dict[str, LinearProbeScores]:
    """Every model's and control's linear probes: ``{label: scores}``, toys first."""
    probe_config = config.probe_config(seed)
    runs: dict[str, LinearProbeScores] = {}
    for name, folder in toy_folders.items():
        if not is_toy_folder(folder):
            continue
        toy = load_toy_model(folder)
        target = {"induction": "parent", "topic": "topic"}.get(toy.experiment)
        if target is not None:
            runs.update(_both(toy.model, toy_setup(toy, target, probe_config), probe_config, f"toy: {name}", toy=True,
                              progress=progress))
    for spec, model in models.items():
        parent = pretrained_setup(model, "parent", probe_config, documents)
        topic = pretrained_setup(model, "topic", probe_config, documents, word_topics=dict(word_topics),
                                 topic_model=topic_model)
        setup = dataclasses.replace(parent, labels=CombinedLabels(parent.labels, topic.labels),
                                    hooks=evenly_spaced(parent.hooks, config.n_hooks))
        runs.update(_both(model, setup, probe_config, spec, toy=False, progress=progress))
    return runs


def linear_findings(runs: Mapping[str, LinearProbeScores], *, n_boot: int, seed: int) -> dict[str, dict[str, Finding]]:
    """``{label: {key: Finding}}`` for every run; a model's findings carry its control's value and are
    Holm-adjusted together; a control's own findings are judged without a control."""
    findings: dict[str, dict[str, Finding]] = {}
    for label, scores in runs.items():
        own = {}
        for key in scores.keys:
            if scores.n_documents[key] < 4 or not bool(scores.accuracy[key].isfinite().all()):
                own[key] = Finding(f"selectivity of {_key_label(key)} (too little data: "
                                   f"{scores.n_examples[key]} examples)", math.nan, (math.nan, math.nan),
                                   "control task (random labels per word type)", 0.0, 1.0, MIN_EFFECT)
                continue
            held = scores.held_out_best_layer(key, n_boot=n_boot, seed=seed)
            statistic = (f"selectivity of {_key_label(key)} at the best layer "
                         f"({scores.hooks[held['layer']]})")
            own[key] = Finding(statistic, held["value"], held["ci"], "control task (random labels per word type)",
                               0.0, held["p_value"], MIN_EFFECT,
                               selection="layer chosen on the even-ranked documents, measured on the odd-ranked ones")
        findings[label] = own
    for label in list(findings):
        control = findings.get(label + CONTROL_SUFFIX)
        if control is not None:
            findings[label] = {key: f.with_control(control[key].value, control[key].ci)
                               for key, f in findings[label].items()}
        findings[label] = adjust_family(findings[label])
    return findings


def linear_summary(runs: Mapping[str, LinearProbeScores], findings: Mapping[str, Mapping[str, Finding]]
                   ) -> dict[str, Any]:
    """summary.json's ``linear`` entry: per run, the layers, per-key curves and findings."""
    return {label: {"layers": scores.hooks, "results": {
        key: {"accuracy": scores.accuracy[key].tolist(), "ci": scores.accuracy_ci[key].tolist(),
              "control_accuracy": scores.control_accuracy[key].tolist(),
              "selectivity": scores.selectivity[key].tolist(), "selectivity_ci": scores.selectivity_ci[key].tolist(),
              "majority_baseline": scores.majority_baseline[key], "examples": scores.n_examples[key]}
        for key in scores.keys}, "findings": {key: f.to_dict() for key, f in findings[label].items()}}
        for label, scores in runs.items()}


def _key_label(key: str) -> str:
    return KEY_NAMES.get(key, f"tok[t-{key}]")


def linear_section(runs: Mapping[str, LinearProbeScores], figures: Path, *, n_boot: int, seed: int
                   ) -> tuple[Section, dict[str, Any]]:
    """The report section and its summary.json entry."""
    findings = linear_findings(runs, n_boot=n_boot, seed=seed)
    verdicts = []
    for label, per_key in findings.items():
        for key, f in per_key.items():
            control = "" if f.control_value is None else f.control_value
            verdicts.append([label, _key_label(key), f.statistic.rsplit("(", 1)[-1].rstrip(")"), f.value, f.ci,
                             control, f.p_adjusted if f.p_adjusted is not None else f.p_value,
                             "holds" if f.holds else "no"])
    curves = [[label, _key_label(key), scores.majority_baseline[key],
               " ".join(f"{a:.2f}" for a in scores.accuracy[key].tolist()),
               " ".join(f"{s:+.2f}" for s in scores.selectivity[key].tolist())]
              for label, scores in runs.items() for key in scores.keys]
    section = Section("Linear probes", [
        "A linear classifier (scikit-learn StandardScaler + LogisticRegression) reads a label from the residual "
        "stream after each layer (layer 0: the token embeddings; toy models without a residual stream: what each "
        "layer writes). Folds are grouped by document, so a probe cannot memorise a passage. Selectivity = "
        "accuracy minus the accuracy of the same probe on a control task (Hewitt & Liang 2019: each word type "
        "gets a random label, class shares kept), so a layer that merely encodes token identity scores ~0. Parents: "
        "tok[t-k] among the 20 most frequent tokens (every state on the toy); topics: gensim LDA (the generator's "
        "topics on the toy).",
        f"Finding per model and label: the best layer's selectivity, the layer chosen on the even-ranked documents "
        f"and measured on the odd-ranked ones (95% interval over documents). It holds when its Holm-adjusted p < "
        f"0.01 and its interval lies above 0 and above the random-weight model's value, by at least {MIN_EFFECT}. A random-weight row can hold here: "
        f"random position logits still copy some distance, and a random average of embeddings over a document still "
        f"carries its topic mixture; the trained model's finding has to beat it.",
    ], [Table(["model", "label", "best layer", "selectivity", "95% CI", "random weights", "p", "verdict"], verdicts),
        Table(["model", "label", "majority", "accuracy per layer", "selectivity per layer"], curves)])
    if runs:
        path = selectivity_curves(runs, figures / "linear_selectivity.png", control_suffix=CONTROL_SUFFIX,
                                  key_label=_key_label)
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Selectivity per layer (0 = embeddings) with 95% intervals: each model solid, "
                                      "its random-weight control dashed."))
    return section, linear_summary(runs, findings)


def _slug(index: int, label: str) -> str:
    return f"{index:02d}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._") or "run")


def save_linear_runs(root: Path, runs: Mapping[str, LinearProbeScores]) -> None:
    """``root/index.json`` (label -> folder, in order) and one ProbeResult folder per run."""
    folders = {label: _slug(i, label) for i, label in enumerate(runs)}
    root.mkdir(parents=True, exist_ok=True)
    for label, scores in runs.items():
        scores.save(root / folders[label])
    atomic_write_text(root / "index.json", json.dumps(folders, indent=1))


def load_linear_runs(root: Path) -> dict[str, LinearProbeScores]:
    """What :func:`save_linear_runs` wrote (empty when the report ran without linear probes)."""
    if not (root / "index.json").is_file():
        return {}
    try:
        folders = json.loads((root / "index.json").read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputError(f"{root / 'index.json'} is not valid JSON ({error.msg}); re-run mechprobe report.") from None
    runs = {label: ProbeResult.load(root / folder) for label, folder in folders.items()}
    if not all(isinstance(r, LinearProbeScores) for r in runs.values()):
        raise InputError(f"{root} holds results that are not linear probe scores; re-run mechprobe report.")
    return runs  # type: ignore[return-value]


def toy_folders(toy_runs: Mapping[str, Any]) -> dict[str, Path]:
    """The folders of the toy runs whose model was saved (``model.json``)."""
    return {name: Path(run.folder) for name, run in toy_runs.items() if is_toy_folder(run.folder)}
