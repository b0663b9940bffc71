"""``mechprobe report``: toy models of the three papers and pretrained models on real text, side by side."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from analyses.experiments import TOY_EXPERIMENTS, toy_experiment
from analyses.linear.section import (
    LinearReportConfig,
    load_linear_runs,
    run_linear_section,
    save_linear_runs,
    toy_folders,
)
from analyses.pretrained.measure import PretrainedConfig, PretrainedRun, probe_pretrained
from analyses.report.compare import ToyRun, compare
from analyses.report.run_store import load_report_inputs, save_report_inputs
from analyses.timings import write_timings
from analyses.toy_seeds import run_with_seeds
from mechprobe.validation import integer
from probes.core.atomic import atomic_directory
from probes.core.errors import ConfigError, InputError
from probes.core.loading import load_model, torch_dtype, weights_source
from probes.text.corpora import corpus_digest, iter_documents
from probes.text.topic_coherence import npmi_per_topic
from probes.text.topics import LdaTopicConfig, LdaTopics, assign_word_topics, fit_lda_topics

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class ReportConfig:
    """What the report trains, reads and probes (the offline defaults need no network)."""

    models: tuple[str, ...] = ("smollm2-135m", "minilm-l6")
    corpus: str = "wikipedia-excerpt"
    text_column: str = "text"
    toys: tuple[str, ...] = ("topic", "scansnap", "induction")
    toy_preset: str = "fast"
    toy_seeds: int = 5
    max_documents: int = 5000  # the excerpt has 4,544 paragraphs of >= 200 characters: all of them
    min_chars: int = 200
    topics: LdaTopicConfig = field(default_factory=LdaTopicConfig)
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)
    linear: LinearReportConfig = field(default_factory=LinearReportConfig)
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"

    def __post_init__(self) -> None:
        unknown = [t for t in self.toys if t not in TOY_EXPERIMENTS]
        if unknown:
            raise ConfigError(f"Unknown toy settings {unknown}; choose from {', '.join(TOY_EXPERIMENTS)}.")
        if not self.models and not self.toys:
            raise ConfigError("The report needs at least one pretrained model or one toy setting.")
        integer("toy_seeds", self.toy_seeds, 1)
        if self.max_documents < 2 or self.min_chars < 1:
            raise ConfigError(
                f"max_documents must be >= 2 and min_chars >= 1; got {self.max_documents}, {self.min_chars}."
            )

    @classmethod
    def fast(cls, **changes: Any) -> ReportConfig:
        """Less text and fewer LDA passes: the whole report in a few minutes on 2 CPU cores."""
        base = cls(max_documents=2000, pretrained=PretrainedConfig(max_batches=8))
        return dataclasses.replace(base, **changes)


def run_toys(config: ReportConfig, folder: Path, *, progress: bool) -> dict[str, ToyRun]:
    """Train and probe each of ``config.toys`` (preset ``toy_preset``, on ``device``) into ``folder/toy/NAME``,
    its findings over ``toy_seeds`` seeds (:func:`analyses.toy_seeds.run_with_seeds`)."""
    runs = {}
    for name in config.toys:
        module = toy_experiment(name)
        if config.toy_preset not in module.PRESETS:
            raise ConfigError(
                f"The {name} toy has no preset {config.toy_preset!r}; choose from {', '.join(module.PRESETS)}."
            )
        out = folder / "toy" / name
        out.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        toy_config = dataclasses.replace(module.PRESETS[config.toy_preset], device=config.device)
        result = run_with_seeds(name, toy_config, out, n_seeds=config.toy_seeds, progress=progress)
        log.info("toy %s: %.1f s", name, time.perf_counter() - start)
        # as summary.json keeps it, so a report rendered again from results/ reads exactly the same values
        runs[name] = ToyRun(name, module.result_from_summary(json.loads(result.to_json())), out)
    return runs


def run_report(config: ReportConfig, out_dir: str | Path, *, progress: bool = True,
               echo: Callable[[str], object] = print) -> Path:
    """Build the whole report into ``out_dir`` (replaced only when complete); return report.html's path."""
    out_dir = Path(out_dir)
    if not out_dir.parent.is_dir():
        raise InputError(f"Cannot write the report to {out_dir}: the folder {out_dir.parent} does not exist.")
    timings: dict[str, float] = {}
    with atomic_directory(out_dir) as tmp:
        start = time.perf_counter()
        # Load every model first: a bad spec fails before any slow work.
        models = {spec: load_model(spec, device=config.device, dtype=torch_dtype(config.dtype))
                  for spec in config.models}
        documents = []
        if config.models:
            echo(f"reading corpus {config.corpus} ...")
            documents = list(iter_documents(config.corpus, unit="paragraph", min_chars=config.min_chars,
                                            text_column=config.text_column,
                                            max_documents=config.max_documents))
            echo(f"training LDA ({config.topics.n_topics} topics) on {len(documents)} paragraphs ...")
            topic_model = fit_lda_topics(documents, config.topics)
            topic_model.save(tmp / "topics")
            word_topics = assign_word_topics(topic_model)
            if not word_topics:
                raise InputError("LDA assigned no word to a topic; use more text, raise topics.top_words_per_topic, "
                                 "lower topics.min_held_out_npmi (topics incoherent on held-out text get no words) "
                                 "or, with the threshold rule, lower topics.threshold.")
            random.Random(config.seed).shuffle(documents)
        timings["corpus_and_topics_s"] = time.perf_counter() - start
        toy_runs = {}
        if config.toys:
            echo(f"training toy models ({', '.join(config.toys)}; preset {config.toy_preset}; findings over "
                 f"{config.toy_seeds} seed(s)) ...")
            start = time.perf_counter()
            toy_runs = run_toys(config, tmp, progress=progress)
            timings["toys_s"] = time.perf_counter() - start
        pretrained: dict[str, PretrainedRun] = {}
        data = f"{config.corpus} paragraphs (LDA seed {config.topics.seed}, shuffled with seed {config.seed})"
        for spec, model in models.items():
            echo(f"probing {spec} ...")
            start = time.perf_counter()
            pretrained[spec] = probe_pretrained(model, documents, word_topics, config.pretrained, progress=progress,
                                                data=data, name=spec)
            timings[f"{spec}_s"] = time.perf_counter() - start
        linear = {}
        if config.linear.enabled:
            echo("linear probes on the residual streams ...")
            start = time.perf_counter()
            linear = run_linear_section(models, documents, topic_model if config.models else None,
                                        word_topics if config.models else {}, toy_folders(toy_runs), config.linear,
                                        seed=config.seed, progress=progress)
            timings["linear_probes_s"] = time.perf_counter() - start
        corpus = {"name": config.corpus, "documents": len(documents), "sha256": corpus_digest(documents)}
        if config.models:
            corpus.update(topic_summary(topic_model, word_topics))
        settings = {**dataclasses.asdict(config),
                    "model_weights": {spec: weights_source(spec) for spec in config.models}}
        compare(toy_runs, pretrained, folder=tmp, corpus=corpus, settings=settings, linear=linear).write(tmp)
        save_report_inputs(tmp, toy_runs, pretrained, corpus, settings)
        if linear:
            save_linear_runs(tmp / "results" / "linear", linear)
        write_timings(tmp, timings)
    return out_dir / "report.html"


def topic_summary(topic_model: LdaTopics, word_topics: dict[str, int]) -> dict[str, Any]:
    """The corpus entries of the report about its topics: top words, training NPMI (10-token windows), and,
    when text was held out, each topic's held-out and training NPMI (paragraph windows) and whether the
    topic probes use it (``LdaTopics.kept_topics``)."""
    n_topics = topic_model.config.n_topics
    words = [topic_model.top_words(t, 10) for t in range(n_topics)]
    training = topic_model.texts or []
    coherence = npmi_per_topic(words, training, 10)  # gensim's c_npmi, exact counts
    summary: dict[str, Any] = {
        "topic_words": len(word_topics), "topics": [w[:8] for w in words],
        "topic_coherence": {"measure": "c_npmi", "per_topic": coherence, "mean": sum(coherence) / n_topics},
    }
    if topic_model.held_out_texts:
        held = topic_model.held_out_coherence()
        kept = set(topic_model.kept_topics())
        summary["topic_held_out"] = {
            "window": "paragraph", "per_topic": held,
            "per_topic_10_token": topic_model.held_out_coherence(window_size=10),
            "training_per_topic": npmi_per_topic(words, training, None),
            "used_by_probes": [t in kept for t in range(n_topics)],
            "min_held_out_npmi": topic_model.config.min_held_out_npmi,
            "median": statistics.median(held), "above_0": sum(score > 0 for score in held),
            "held_out_paragraphs": len(topic_model.held_out_texts), "training_paragraphs": topic_model.n_documents,
        }
    return summary


def render_report(out_dir: str | Path) -> Path:
    """Rebuild report.md, report.html, summary.json and the figures of a finished report from its
    ``results/`` folder, without loading a model; return report.html's path."""
    out_dir = Path(out_dir)
    toy_runs, pretrained, corpus, settings = load_report_inputs(out_dir)
    linear = load_linear_runs(out_dir / "results" / "linear")
    compare(toy_runs, pretrained, folder=out_dir, corpus=corpus, settings=settings, linear=linear).write(out_dir)
    return out_dir / "report.html"
