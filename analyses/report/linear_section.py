"""The report's linear-probe section: decodability curves, toy beside pretrained beside random weights.

Each model (the induction and topic toys, each pretrained model) and its random-weight control get one
:class:`probes.LinearProbe` over shared batches: parents ``tok[t-k]`` (toy induction, pretrained),
the word's and the document's LDA topic (toy topic, pretrained). Each label is measured as a **gain** over
the baseline that fits it (:mod:`probes.linear.probe`): the word's topic against Hewitt & Liang's control
task (selectivity), everything else against what the current token alone predicts.

A finding per trained model and label key: the gain at the best layer, the layer chosen on the even-ranked
documents and measured on the odd-ranked ones (out-of-fold predictions, bootstrap over documents), beside
the random-weight control's gain on the *same examples at the same layer*. The model must beat both the
baseline and its control, example by example: p is the bootstrap share of draws in which it does not; the
finding holds when the Holm-adjusted p < 0.01, the interval lies above 0 and above the control's gain, and
the gain exceeds both by at least ``MIN_EFFECT``. A random-weight row is the reference a model is compared
with, not a finding of its own: decodability that random weights also give (random position logits that copy
a distance, a random average of embeddings that carries a document's words) cancels out of the comparison.
Results are kept under ``results/linear/`` so ``mechprobe render`` rebuilds the section without a model.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analyses.linear.experiment import LinearProbeConfig, ProbeSetup, pretrained_setup, probe_setup, toy_setup
from analyses.linear.figures import gain_curves
from analyses.report.document import Figure, Section, Table
from analyses.toy_model_loader import load_toy_model
from analyses.toy_model_store import is_toy_folder
from mechprobe import records
from mechprobe.errors import RecordError
from mechprobe.validation import is_integer
from probes.core.atomic import atomic_write_text
from probes.core.errors import ConfigError, InputError
from probes.core.model_kind import HookedModel
from probes.core.result import ProbeResult
from probes.display.verdict_table import verdict_text
from probes.linear.fit import document_bootstrap, percentile_ci
from probes.linear.labels import CombinedLabels
from probes.linear.probe import LinearProbeScores
from probes.stats.control_model import random_weight_control
from probes.stats.findings import Finding, adjust_family
from probes.text.corpora import Document
from probes.text.topics import LdaTopics

MIN_EFFECT = 0.05
CONTROL_SUFFIX = " (random weights)"
KEY_NAMES = {"word": "topic of the word", "document": "topic of the document", "next": "next-token class"}
BASELINE_NAMES = {"control_task": "control task (random labels per word type)",
                  "token_identity": "token identity (what the current token alone predicts)"}


@dataclass(frozen=True)
class LinearReportConfig:
    """The report's linear probes: ``n_hooks`` evenly spaced residual hooks per pretrained model (embeddings and
    last layer included), ``max_batches`` batches of text, ``max_examples`` kept positions, parents at
    ``distances`` among the ``top_tokens`` most frequent tokens, ``toy_sequences`` sequences per toy, and
    ``toy_control_draws`` random-weight draws per toy (its control is the best of them layer by layer; a
    pretrained model's random draws agree, so it gets one)."""

    enabled: bool = True
    n_hooks: int = 5
    max_examples: int = 1000
    n_folds: int = 3
    n_boot: int = 1000
    top_tokens: int = 20
    distances: tuple[int, ...] = (1, 2)
    max_batches: int = 4
    toy_sequences: int = 128
    toy_control_draws: int = 8

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"linear.enabled must be true or false; got {self.enabled!r}.")
        if not is_integer(self.n_hooks) or self.n_hooks < 2:
            raise ConfigError(f"linear.n_hooks must be an integer >= 2 (embeddings and the last layer); got "
                              f"{self.n_hooks!r}.")
        if not is_integer(self.toy_control_draws) \
                or self.toy_control_draws < 1:
            raise ConfigError(f"linear.toy_control_draws must be a positive integer; got {self.toy_control_draws!r}.")
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


def _both(model: HookedModel, setup: ProbeSetup, config: LinearProbeConfig, label: str, *, draws: int, toy: bool,
          progress: bool) -> dict[str, LinearProbeScores]:
    controls = [probe_setup(random_weight_control(model, seed=config.seed + draw, redraw_unresettable=toy), setup,
                            config, progress=progress) for draw in range(draws)]
    return {label: probe_setup(model, setup, config, progress=progress),
            label + CONTROL_SUFFIX: best_of_draws(controls, n_boot=config.n_boot, seed=config.seed)}


def best_of_draws(draws: list[LinearProbeScores], *, n_boot: int, seed: int) -> LinearProbeScores:
    """One control from several random-weight draws probed on the same examples: at each layer and key, the
    draw of highest mean gain (its examples' correctness, so a model is still compared example by example).

    A draw of a toy's bare parameters can copy a random distance (random position logits peak somewhere), so
    two draws disagree and one draw is no reference; a model must beat the best of them."""
    first = draws[0]
    if len(draws) == 1:
        return first
    fields: dict[str, dict[str, Any]] = {name: {} for name in (
        "accuracy", "accuracy_ci", "baseline_accuracy", "gain", "gain_ci", "correct", "baseline_correct")}
    for key in first.keys:
        if not all(first.same_examples(other, key) for other in draws[1:]):
            raise InputError(f"The random-weight draws scored other examples of {key!r}; probe every draw on the "
                             f"same batches with the same seed.")
        gains = torch.stack([torch.as_tensor(d.gain[key]) for d in draws])  # [draw, layer]
        best = torch.nan_to_num(gains, nan=-math.inf).argmax(0)
        layers = torch.arange(gains.shape[1])
        correct = torch.stack([draws[int(b)].correct[key][i] for i, b in zip(layers.tolist(), best)])
        baseline = torch.stack([draws[int(b)].baseline_correct[key][i] for i, b in zip(layers.tolist(), best)])
        fields["correct"][key], fields["baseline_correct"][key] = correct, baseline
        groups = first.documents[key].numpy()
        if correct.shape[1] == 0:  # too little data: the first draw's NaN curves
            for name in ("accuracy", "accuracy_ci", "baseline_accuracy", "gain", "gain_ci"):
                fields[name][key] = getattr(first, name)[key]
            continue
        accuracy, accuracy_draws = document_bootstrap(correct.numpy(), groups, n_boot=n_boot, seed=seed)
        difference = correct.numpy().astype(np.float64) - baseline.numpy()
        gain, gain_draws = document_bootstrap(difference, groups, n_boot=n_boot, seed=seed)
        fields["accuracy"][key], fields["accuracy_ci"][key] = torch.from_numpy(accuracy), torch.from_numpy(
            percentile_ci(accuracy_draws))
        fields["baseline_accuracy"][key] = torch.from_numpy(baseline.numpy().mean(axis=1).astype(np.float64))
        fields["gain"][key] = torch.from_numpy(gain)
        fields["gain_ci"][key] = torch.from_numpy(percentile_ci(gain_draws))
    return dataclasses.replace(first, accuracy=fields["accuracy"], accuracy_ci=fields["accuracy_ci"],
                               baseline_accuracy=fields["baseline_accuracy"], gain=fields["gain"],
                               gain_ci=fields["gain_ci"], correct=fields["correct"],
                               baseline_correct=fields["baseline_correct"],
                               fit_seconds=sum(d.fit_seconds for d in draws))


def run_linear_section(models: Mapping[str, HookedModel], documents: list[Document], topic_model: LdaTopics | None,
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
            runs.update(_both(toy.model, toy_setup(toy, target, probe_config), probe_config, f"toy: {name}",
                              draws=config.toy_control_draws, toy=True,
                              progress=progress))
    for spec, model in models.items():
        parent = pretrained_setup(model, "parent", probe_config, documents)
        topic = pretrained_setup(model, "topic", probe_config, documents, word_topics=dict(word_topics),
                                 topic_model=topic_model)
        setup = dataclasses.replace(parent, labels=CombinedLabels(parent.labels, topic.labels),
                                    hooks=evenly_spaced(parent.hooks, config.n_hooks))
        runs.update(_both(model, setup, probe_config, spec, draws=1, toy=False, progress=progress))
    return runs


def linear_findings(runs: Mapping[str, LinearProbeScores], *, n_boot: int, seed: int) -> dict[str, dict[str, Finding]]:
    """``{label: {key: Finding}}`` for every model that is not itself a random-weight control (see the module
    docstring): each judged against its control (``label + CONTROL_SUFFIX``) when the runs hold one, and
    Holm-adjusted together."""
    findings: dict[str, dict[str, Finding]] = {}
    for label, scores in runs.items():
        if label.endswith(CONTROL_SUFFIX):
            continue
        control = runs.get(label + CONTROL_SUFFIX)
        findings[label] = adjust_family({key: _finding(scores, control, key, n_boot=n_boot, seed=seed)
                                         for key in scores.keys})
    return findings


def _finding(scores: LinearProbeScores, control: LinearProbeScores | None, key: str, *, n_boot: int,
             seed: int) -> Finding:
    baseline = BASELINE_NAMES[scores.baseline[key]]
    usable = [s for s in (scores, control) if s is not None]
    if any(s.n_documents[key] < 4 or not bool(s.accuracy[key].isfinite().all()) for s in usable):
        return Finding(f"{scores.statistic[key]} of {_key_label(key)} (too little data: {scores.n_examples[key]} "
                       f"examples)", math.nan, (math.nan, math.nan), baseline, 0.0, 1.0, MIN_EFFECT)
    held = scores.held_out_best_layer(key, control=control, n_boot=n_boot, seed=seed)
    statistic = f"{scores.statistic[key]} of {_key_label(key)} at the best layer ({scores.hooks[held['layer']]})"
    finding = Finding(statistic, held["value"], held["ci"], baseline, 0.0, held["p_value"], MIN_EFFECT,
                      selection="layer chosen on the even-ranked documents, measured on the odd-ranked ones; "
                                "the control on the same examples at the same layer")
    return finding if control is None else finding.with_control(held["control_value"], held["control_ci"])


def linear_summary(runs: Mapping[str, LinearProbeScores], findings: Mapping[str, Mapping[str, Finding]]
                   ) -> dict[str, Any]:
    """summary.json's ``linear`` entry: per run, the layers, per-key curves (the statistic named) and, for a
    trained model, its findings."""
    return {label: {"layers": scores.hooks, "results": {
        key: {"statistic": scores.statistic[key], "baseline_kind": scores.baseline[key],
              "baseline_source": scores.baseline_source[key],
              "accuracy": scores.accuracy[key].tolist(), "ci": scores.accuracy_ci[key].tolist(),
              "baseline_accuracy": scores.baseline_accuracy[key].tolist(),
              "gain": scores.gain[key].tolist(), "gain_ci": scores.gain_ci[key].tolist(),
              "majority_baseline": scores.majority_baseline[key], "examples": scores.n_examples[key]}
        for key in scores.keys}, "findings": records.dump(findings.get(label, {}))}
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
            verdicts.append([label, _key_label(key), runs[label].statistic[key],
                             f.statistic.rsplit("(", 1)[-1].rstrip(")"), f.value, f.ci, control, f.reported_p,
                             verdict_text(f)])
    curves = [[label, _key_label(key), scores.statistic[key], scores.baseline_source[key],
               scores.majority_baseline[key],
               " ".join(f"{a:.2f}" for a in scores.accuracy[key].tolist()),
               " ".join(f"{b:.2f}" for b in scores.baseline_accuracy[key].tolist()),
               " ".join(f"{g:+.2f}" for g in scores.gain[key].tolist())]
              for label, scores in runs.items() for key in scores.keys]
    section = Section("Linear probes", [
        "A linear classifier (scikit-learn StandardScaler + LogisticRegression) reads a label from the residual "
        "stream after each layer (layer 0: the token embeddings; toy models without a residual stream: what each "
        "layer writes). Folds are grouped by document, so a probe cannot memorise a passage. Each label is "
        "measured as a gain over the baseline that fits it. The topic of the word is a property of the current "
        "word, so its baseline is Hewitt & Liang's (2019) control task (each word type gets a random label, class "
        "shares kept) and the gain is their selectivity. The other labels (tok[t-k], the document's topic) are "
        "not functions of the current word, and a control task over word types would mostly measure how well "
        "the stream reads the word itself; their baseline is what the current token alone predicts: the better of "
        "a count table on the token id and the same probe on the token embeddings (layer 0), both out of fold "
        "on the same folds, so the gain is what the layers add to the token. "
        "Parents: tok[t-k] among the 20 most frequent tokens (every state on the toy); topics: gensim LDA (the "
        "generator's topics on the toy).",
        f"Finding per trained model and label: the gain at the best layer (chosen on the even-ranked documents, "
        f"measured on the odd-ranked ones; 95% interval over documents), beside the random-weight model's gain on "
        f"the same examples at the same layer. p is the bootstrap share of draws in which the model does not beat "
        f"both the baseline and its random-weight model; the finding holds when the Holm-adjusted p < 0.01, the "
        f"interval lies above 0 and above the random-weight value, and the gain exceeds both by at least "
        f"{MIN_EFFECT}. Random-weight rows are the reference, not findings: what random weights also decode "
        f"(random position logits that copy a distance, a random average of a document's embeddings) is not "
        f"credited to training. Run with random-weight models in the trained models' place (toys at "
        f"initialisation, three architectures), the section holds nothing (tests/analyses/linear/).",
    ], [Table(["model", "label", "statistic", "best layer", "gain", "95% CI", "random weights", "p", "verdict"],
              verdicts),
        Table(["model", "label", "statistic", "baseline", "majority", "accuracy per layer", "baseline per layer",
               "gain per layer"], curves)])
    if runs:
        path = gain_curves(runs, figures / "linear_gain.png", control_suffix=CONTROL_SUFFIX, key_label=_key_label)
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Gain over each label's baseline per layer (0 = embeddings) with 95% intervals: "
                                      "each model solid, its random-weight control dashed; the topic of the word "
                                      "against the control task, the other labels against the current token."))
    return section, linear_summary(runs, findings)


def _slug(index: int, label: str) -> str:
    return f"{index:02d}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", label).strip("._") or "run")


def save_linear_runs(root: Path, runs: Mapping[str, LinearProbeScores]) -> None:
    """``root/index.json`` (label -> folder, in order) and one ProbeResult folder per run."""
    folders = {label: _slug(i, label) for i, label in enumerate(runs)}
    root.mkdir(parents=True, exist_ok=True)
    for label, scores in runs.items():
        scores.save(root / folders[label])
    atomic_write_text(root / "index.json", records.to_json(folders, indent=1))


def load_linear_runs(root: Path, *, expected: bool) -> dict[str, LinearProbeScores]:
    """What :func:`save_linear_runs` wrote; empty when the report ran without linear probes (``expected`` False and
    no ``index.json``). A missing or damaged part is one :class:`~mechprobe.errors.RecordError` line."""
    index = root / "index.json"
    if not expected and not index.exists():
        return {}
    rerun = "Re-run mechprobe report to rebuild them."
    folders = records.read_record(dict[str, str], index, rerun=rerun)
    unlisted = sorted({p.name for p in root.iterdir() if p.is_dir()} - set(folders.values()))
    if unlisted:
        raise RecordError(f"{index} does not list {root / unlisted[0]}: a label is missing from it. {rerun}")
    runs = {}
    for label, folder in folders.items():
        try:
            runs[label] = ProbeResult.load(root / folder)
        except InputError as error:  # written by an older mechprobe (before the baselines of issue 25, or 0.2)
            raise RecordError(f"{root} holds linear probe results this mechprobe cannot read ({error}); {rerun}") \
                from None
        if not isinstance(runs[label], LinearProbeScores):
            raise RecordError(f"{root / folder} holds a {type(runs[label]).__name__}, not linear probe scores "
                              f"({index}: {label}). {rerun}")
    return runs  # type: ignore[return-value]


def toy_folders(toy_runs: Mapping[str, Any]) -> dict[str, Path]:
    """The folders of the toy runs whose model was saved (``model.json``)."""
    return {name: Path(run.folder) for name, run in toy_runs.items() if is_toy_folder(run.folder)}
