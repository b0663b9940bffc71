"""``mechprobe report``: toy models of the three papers and pretrained models on real text, side by side."""

from __future__ import annotations

import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from analyses.cli_checks import naming
from analyses.dynamics.config import DynamicsConfig
from analyses.experiments import toy_experiment
from analyses.pretrained.measure import PretrainedRun, probe_pretrained
from analyses.pretrained.settle import settle_run
from analyses.report.compare import ToyRun, compare
from analyses.report.config import ReportConfig, ReportSettings
from analyses.report.corpus import corpus_summary
from analyses.report.dynamics_section import load_series, run_series
from analyses.report.linear_section import (
    load_linear_runs,
    run_linear_section,
    save_linear_runs,
    toy_folders,
)
from analyses.report.run_store import load_report_inputs, save_report_inputs
from analyses.timings import write_timings
from analyses.toy_seeds import ToySeeds, toy_seeds, usable_cpus
from probes.core.atomic import atomic_directory
from probes.core.errors import ConfigError, InputError
from probes.core.loading import load_model, torch_dtype, weights_source
from probes.text.corpora import Document, corpus_digest, iter_documents
from probes.text.topics import assign_word_topics, fit_lda_topics

log = logging.getLogger(__name__)

def later_documents(config: ReportConfig) -> Iterator[Document]:
    """The paragraphs of ``--settle``'s later corpora (``settle.corpora``), in order, each read once and lazily
    (an ``hf:`` dataset streams only as far as the rounds read)."""
    for spec in config.settle.corpora:
        yield from iter_documents(spec, unit="paragraph", min_chars=config.min_chars, text_column=config.text_column)


def toy_runs_of(config: ReportConfig, folder: Path) -> list[tuple[str, Any, Path]]:
    """``(name, config, out_dir)`` of each of ``config.toys`` (preset ``toy_preset`` on ``device``), its folder
    ``folder/toy/NAME`` made; a preset the toy lacks is refused."""
    specs = []
    for name in config.toys:
        module = toy_experiment(name)
        if config.toy_preset not in module.PRESETS:
            raise ConfigError(
                f"The {name} toy has no preset {config.toy_preset!r}; choose from {', '.join(module.PRESETS)}."
            )
        out = folder / "toy" / name
        out.mkdir(parents=True, exist_ok=True)
        specs.append((name, dataclasses.replace(module.PRESETS[config.toy_preset], device=config.device), out))
    return specs


def toy_results(seeds: ToySeeds, *, progress: bool) -> dict[str, ToyRun]:
    """Each toy's full run with its findings over all seeds, as the report keeps it."""
    # as summary.json keeps it, so a report rendered again from results/ reads exactly the same values
    return {name: ToyRun(name, toy_experiment(name).result_from_summary(json.loads(result.to_json())), out)
            for (name, _, out), result in zip(seeds.runs, seeds.results(progress=progress))}


def run_report(config: ReportConfig, out_dir: str | Path, *, progress: bool = True,
               echo: Callable[[str], object] = print) -> Path:
    """Build the whole report into ``out_dir`` (replaced only when complete); return report.html's path."""
    out_dir = Path(out_dir)
    if not out_dir.parent.is_dir():
        raise InputError(f"Cannot write the report to {out_dir}: the folder {out_dir.parent} does not exist.")
    timings: dict[str, float] = {}
    with atomic_directory(out_dir) as tmp, toy_seeds(toy_runs_of(config, tmp), n_seeds=config.toy_seeds,
                                                     workers=usable_cpus()) as seeds:
        # The toys' further seeds run in worker processes from here on (analyses.toy_seeds), beside the corpus,
        # LDA and the toys' full runs (the same numbers as in one process).
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
            with naming("--corpus"):  # too few documents: the corpus is what to change
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
            toy_runs = toy_results(seeds, progress=progress)
            timings["toys_s"] = time.perf_counter() - start
        pretrained: dict[str, PretrainedRun] = {}
        data = f"{config.corpus} paragraphs (LDA seed {config.topics.seed}, shuffled with seed {config.seed})"
        for spec, model in models.items():
            echo(f"probing {spec} ...")
            start = time.perf_counter()
            pretrained[spec] = probe_pretrained(model, documents, word_topics, config.pretrained, progress=progress,
                                                data=data, name=spec)
            timings[f"{spec}_s"] = time.perf_counter() - start
            if config.settle.enabled:
                echo(f"settling {spec}'s inconclusive findings (budget {config.settle.budget_minutes:g} min, "
                     f"{config.settle.max_tokens:,} tokens) ...")
                start = time.perf_counter()
                pretrained[spec].settled = settle_run(model, pretrained[spec], documents, config.settle,
                                                      more_documents=later_documents(config), progress=progress)
                timings[f"{spec}_settle_s"] = time.perf_counter() - start
        linear = {}
        if config.linear.enabled:
            echo("linear probes on the residual streams ...")
            start = time.perf_counter()
            linear = run_linear_section(models, documents, topic_model if config.models else None,
                                        word_topics if config.models else {}, toy_folders(toy_runs), config.linear,
                                        seed=config.seed, progress=progress)
            timings["linear_probes_s"] = time.perf_counter() - start
        dynamics = {}
        if config.series:
            echo(f"measuring checkpoint series ({', '.join(config.series)}) ...")
            start = time.perf_counter()
            dynamics = run_series(config.series, tmp, DynamicsConfig(seed=config.seed), device=config.device,
                                  dtype=torch_dtype(config.dtype), progress=progress)
            timings["dynamics_s"] = time.perf_counter() - start
        corpus = corpus_summary(config.corpus, len(documents), corpus_digest(documents),
                                topic_model if config.models else None, word_topics if config.models else None)
        settings = ReportSettings.of(config, {spec: weights_source(spec) for spec in config.models})
        compare(toy_runs, pretrained, folder=tmp, corpus=corpus, settings=settings, linear=linear,
                dynamics=dynamics).write(tmp)
        save_report_inputs(tmp, toy_runs, pretrained, corpus, settings)
        if config.linear.enabled:
            save_linear_runs(tmp / "results" / "linear", linear)
        write_timings(tmp, timings)
    return out_dir / "report.html"


def render_report(out_dir: str | Path) -> Path:
    """Rebuild report.md, report.html, summary.json and the figures of a finished report from its
    ``results/`` folder, without loading a model; return report.html's path. A part of the folder that is missing
    or damaged (a results file, a toy folder or figure, the linear results) is refused in one line, never drawn
    without."""
    out_dir = Path(out_dir)
    toy_runs, pretrained, corpus, settings = load_report_inputs(out_dir)
    linear = load_linear_runs(out_dir / "results" / "linear", expected=settings is not None and settings.linear.enabled)
    dynamics = load_series(settings.series, out_dir) if settings is not None else {}
    compare(toy_runs, pretrained, folder=out_dir, corpus=corpus, settings=settings, linear=linear,
            dynamics=dynamics).write(out_dir)
    return out_dir / "report.html"
