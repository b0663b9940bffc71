"""A report's results on disk, so the report can be rebuilt without a model: ``OUT/results/``.

Layout::

    results/report.json                     corpus, settings, the order of models and toy settings
    results/toy/NAME.json                   each toy run's summary.json document (loaded back as its typed result)
    results/pretrained/NN-MODEL/run.json    model facts, topic map counts, held-out statistics, findings
    results/pretrained/NN-MODEL/run.safetensors   topic labels per token, embedding null draws
    results/pretrained/NN-MODEL/{protocol,text_heads,generalized,topic,ordering}/   ProbeResult.save folders
    results/pretrained/NN-MODEL/control/...  the same for the random-weight control (when it ran)

Every per-head tensor is kept (not only the top heads). :func:`load_report_inputs` gives back what
:func:`analyses.report.compare.compare` needs, so ``mechprobe render OUT`` rewrites report.md, report.html
and summary.json byte for byte as the run wrote them. In the pretrained results numbers that are NaN are
stored as JSON ``NaN`` (Python's reading), so they come back as NaN; toy results follow their summary.json
(NaN as null, read back as NaN by each result's ``from_summary``).
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from safetensors.torch import load_file, save_file

from analyses.experiments import toy_result
from analyses.paper_result import json_ready
from analyses.pretrained.causal import CausalMeasurement
from analyses.pretrained.held_out import HeldOut
from analyses.pretrained.measure import ModelMeasurements, PretrainedRun
from analyses.report.compare import ToyRun
from probes.attention.generalized_induction import GeneralizedInductionScores
from probes.attention.head_scores import HeadScores
from probes.attention.key_token_attention import KeyTokenAttention
from probes.attention.topic_attention import TopicAttention
from probes.core.atomic import atomic_write_text
from probes.core.errors import InputError
from probes.core.model_info import ModelInfo
from probes.dynamics.embedding_topics import EmbeddingTopicTest
from probes.stats.findings import Finding
from probes.text.token_topics import TokenTopicMap

RESULTS = "results"
PROBE_RESULTS = ("protocol", "text_heads", "generalized", "topic", "ordering")
FORMAT = 1


def _slug(index: int, name: str) -> str:
    return f"{index:02d}-" + (re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "model")


def _write_json(path: Path, document: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(document, indent=1))


def _read_json(path: Path) -> Any:
    if not path.is_file():
        raise InputError(f"{path} is missing: the results folder is incomplete. Re-run mechprobe report.")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise InputError(f"{path} is not valid JSON ({error.msg} at line {error.lineno}); re-run mechprobe report.") \
            from None


def _finding(document: dict[str, Any]) -> Finding:
    document = dict(document)
    document["ci"] = tuple(document["ci"])
    if document.get("control_ci") is not None:
        document["control_ci"] = tuple(document["control_ci"])
    return Finding(**document)


def _held_out(document: dict[str, Any]) -> HeldOut:
    return HeldOut(**{**document, "ci": tuple(document["ci"]),
                      "head": None if document["head"] is None else tuple(document["head"])})


def save_measurements(measured: ModelMeasurements, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in PROBE_RESULTS:
        getattr(measured, name).save(folder / name)
    embedding = measured.embedding
    tensors = {f"null_gaps/{m}": t.contiguous() for m, t in embedding.null_gaps.items()}
    save_file(tensors, str(folder / "embedding.safetensors"))
    fields = {f.name: getattr(embedding, f.name) for f in dataclasses.fields(embedding) if f.name != "null_gaps"}
    _write_json(folder / "measurements.json", {
        "name": measured.name,
        "info": dataclasses.asdict(measured.info),
        "held_out": {name: dataclasses.asdict(h) for name, h in measured.held_out.items()},
        "cooccurrence": measured.cooccurrence,
        "causal": {name: m.to_dict() for name, m in measured.causal.items()},
        "causal_note": measured.causal_note,
        "embedding": fields,
        "null_gap_measures": list(embedding.null_gaps),
    })


def load_measurements(folder: Path) -> ModelMeasurements:
    document = _read_json(folder / "measurements.json")
    tensors = load_file(str(folder / "embedding.safetensors"))
    fields = document["embedding"]
    embedding = EmbeddingTopicTest(**{**fields, "gap_ci": {m: tuple(ci) for m, ci in fields["gap_ci"].items()},
                                      "null_gaps": {m: tensors[f"null_gaps/{m}"]
                                                    for m in document["null_gap_measures"]}})
    return ModelMeasurements(
        name=document["name"], info=_model_info(document["info"]), embedding=embedding,
        held_out={name: _held_out(h) for name, h in document["held_out"].items()},
        cooccurrence=document["cooccurrence"],
        causal={name: CausalMeasurement.from_dict(m) for name, m in document.get("causal", {}).items()},
        causal_note=document.get("causal_note", ""), protocol=HeadScores.load(folder / "protocol"),
        text_heads=HeadScores.load(folder / "text_heads"),
        generalized=GeneralizedInductionScores.load(folder / "generalized"),
        topic=TopicAttention.load(folder / "topic"), ordering=KeyTokenAttention.load(folder / "ordering"),
    )


def _model_info(document: dict[str, Any]) -> ModelInfo:
    return ModelInfo(**{**document, "special_token_ids": tuple(document["special_token_ids"])})


def save_pretrained_run(run: PretrainedRun, folder: Path) -> None:
    """Everything :class:`PretrainedRun` holds, under ``folder`` (see the module docstring)."""
    folder.mkdir(parents=True, exist_ok=True)
    save_measurements(run.measured, folder / "measured")
    if run.control is not None:
        save_measurements(run.control, folder / "control")
    save_file({"token_labels": run.token_map.labels.contiguous()}, str(folder / "run.safetensors"))
    token_map = {f.name: getattr(run.token_map, f.name) for f in dataclasses.fields(run.token_map)
                 if f.name != "labels"}
    _write_json(folder / "run.json", {
        "format": FORMAT, "model": run.model, "info": dataclasses.asdict(run.info), "token_map": token_map,
        "findings": {name: dataclasses.asdict(f) for name, f in run.findings.items()},
        "control_findings": {name: dataclasses.asdict(f) for name, f in run.control_findings.items()},
        "n_tokens": run.n_tokens, "extras": run.extras, "has_control": run.control is not None,
    })


def load_pretrained_run(folder: Path) -> PretrainedRun:
    document = _read_json(folder / "run.json")
    if document.get("format") != FORMAT:
        raise InputError(f"{folder} was saved in results format {document.get('format')!r}; this mechprobe reads "
                         f"format {FORMAT}. Re-run mechprobe report.")
    labels = load_file(str(folder / "run.safetensors"))["token_labels"]
    return PretrainedRun(
        model=document["model"], info=_model_info(document["info"]),
        token_map=TokenTopicMap(labels=labels, **document["token_map"]),
        measured=load_measurements(folder / "measured"),
        control=load_measurements(folder / "control") if document["has_control"] else None,
        findings={name: _finding(f) for name, f in document["findings"].items()},
        control_findings={name: _finding(f) for name, f in document["control_findings"].items()},
        n_tokens=document["n_tokens"], extras=document["extras"],
    )


def save_report_inputs(out: Path, toy_runs: dict[str, ToyRun], pretrained: dict[str, PretrainedRun],
                       corpus: dict[str, Any], settings: dict[str, Any]) -> None:
    """Write ``out/results/`` so :func:`load_report_inputs` can rebuild the report from it."""
    root = out / RESULTS
    folders = {spec: _slug(i, spec) for i, spec in enumerate(pretrained)}
    for spec, run in pretrained.items():
        save_pretrained_run(run, root / "pretrained" / folders[spec])
    for name, toy in toy_runs.items():
        _write_json(root / "toy" / f"{name}.json", {"summary": json_ready(toy.result.summary()),
                                                    "folder": toy.folder.relative_to(out).as_posix()})
    _write_json(root / "report.json", {"format": FORMAT, "corpus": corpus, "settings": settings,
                                       "pretrained": folders, "toys": list(toy_runs)})


def load_report_inputs(out: Path) -> tuple[dict[str, ToyRun], dict[str, PretrainedRun], dict[str, Any], dict[str, Any]]:
    """``(toy_runs, pretrained_runs, corpus, settings)`` from ``out/results/``, as the report had them."""
    root = out / RESULTS
    if not root.is_dir():
        raise InputError(f"{out} has no {RESULTS}/ folder: render needs a folder written by mechprobe report "
                         f"(reports from before saved results must be re-run).")
    document = _read_json(root / "report.json")
    if document.get("format") != FORMAT:
        raise InputError(f"{root} was saved in results format {document.get('format')!r}; this mechprobe reads "
                         f"format {FORMAT}. Re-run mechprobe report.")
    toys = {}
    for name in document["toys"]:
        toy = _read_json(root / "toy" / f"{name}.json")
        toys[name] = ToyRun(name, toy_result(name, toy["summary"]), out / toy["folder"])
    pretrained = {spec: load_pretrained_run(root / "pretrained" / folder)
                  for spec, folder in document["pretrained"].items()}
    return toys, pretrained, document["corpus"], document["settings"]

