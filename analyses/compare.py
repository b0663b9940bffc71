"""``compare(toy_runs, pretrained_runs) -> Report``: toy and pretrained side by side, probe by probe."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from analyses.figures import layer_head_heatmaps, paired_bars
from analyses.pretrained import PretrainedRun
from analyses.report_document import Figure, Report, Section, Table


@dataclass(frozen=True)
class ToyRun:
    """A finished toy experiment: its summary.json content and the folder holding its figures."""

    name: str
    summary: dict[str, Any]
    folder: Path


def _get(summary: Mapping[str, Any], *keys: str, default: Any = float("nan")) -> Any:
    value: Any = summary
    for key in keys:
        if not isinstance(value, Mapping) or key not in value:
            return default
        value = value[key]
    return value


def _verdict(low: float, high: float, reference: float) -> str:
    if low > reference:
        return "above"
    if high < reference:
        return "below"
    return "not distinguishable from"


def _induction_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows = []
    if "induction" in toy:
        s = toy["induction"].summary
        rows.append(["toy: " + str(_get(s, "model", default="simplified")) + " model, Markov chains (Chen et al.)",
                     "layer-2 generalized induction (n=3)", _get(s, "generalized_induction_score"),
                     _get(s, "generalized_induction_chance")])
    for name, run in runs.items():
        l, h, score = run.protocol.top_heads("induction", 1)[0]
        rows.append([f"{name}: repeated random tokens", f"induction L{l}H{h}", score, run.protocol.chance["induction"]])
        l, h, score = run.text_heads.top_heads("induction", 1)[0]
        rows.append([f"{name}: natural text", f"induction L{l}H{h}", score, run.text_heads.chance["induction"]])
        l, h, score = run.generalized.best_head()
        n = len(run.generalized.provenance.settings["distances"]) + 1
        rows.append([f"{name}: natural text", f"generalized induction n={n} L{l}H{h}", score, run.generalized.chance])
    section = Section(
        "Induction heads",
        ["Attention mass on the token after an earlier occurrence of the current context (n=2: the last token; "
         "n=3: the last two tokens), averaged over queries that have such a target; chance is the same score "
         "under uniform attention over the visible keys."],
        [Table(["setting", "probe (best head)", "score", "chance"], rows)],
    )
    if runs:
        path = layer_head_heatmaps({n: r.protocol.scores["induction"] for n, r in runs.items()},
                                   figures / "induction_heads.png", title="Induction score on [BOS] X X",
                                   colorbar="induction score")
        section.figures.append(Figure(str(path.relative_to(figures.parent)), "Induction score per layer and head "
                                      "(repeated random tokens) for each pretrained model."))
    return section


def _topic_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows, paragraphs = [], [
        "Mean attention weight between two positions holding different tokens of the same topic, and of "
        "different topics (topics: the toy's LDA generator; gensim LDA on the corpus for pretrained models). "
        "Pretrained: the head with the largest same-minus-different gap, with a 95% bootstrap interval over "
        "batches of documents, and the ratio averaged over all heads. Chance ratio = uniform attention."
    ]
    if "topic" in toy:
        s = toy["topic"].summary
        rows.append(["toy: 1-layer masked LM on LDA data (Li et al.)", "L0H0", _get(s, "same_topic_attention"),
                     _get(s, "different_topic_attention"), _get(s, "attention_ratio"), "", _get(s, "chance_ratio")])
    for name, run in runs.items():
        l, h = run.topic_best_head
        rows.append([name, f"L{l}H{h}", float(run.topic.mean["same_topic"][l, h]),
                     float(run.topic.mean["different_topic"][l, h]), float(run.topic.ratio[l, h]),
                     run.topic_ratio_ci, run.topic.chance_ratio])
        mean, low, high = run.topic_mean_ratio_ci
        rows.append([name, "mean over heads", float(run.topic.mean["same_topic"].mean()),
                     float(run.topic.mean["different_topic"].mean()), mean, (low, high), run.topic.chance_ratio])
        paragraphs.append(
            f"{name}: averaged over all heads, same-topic attention is {_verdict(low, high, 1.0)} different-topic "
            f"attention (ratio {mean:.2f}, 95% CI [{low:.2f}, {high:.2f}])."
        )
    section = Section("Topic attention", paragraphs, [Table(
        ["setting", "head", "same topic", "different topic", "ratio", "ratio 95% CI", "chance ratio"], rows)])
    if runs:
        path = layer_head_heatmaps({n: torch.log2(r.topic.ratio) for n, r in runs.items()},
                                   figures / "topic_attention.png", title="log2(same-topic / different-topic attention)",
                                   colorbar="log2 ratio", cmap="RdBu_r", center=0.0)
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Same- vs different-topic attention per head (red: more same-topic)."))
    return section


def _embedding_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows, groups, errors = [], {}, {}
    if "topic" in toy:
        s = toy["topic"].summary
        same, different = _get(s, "embedding_same_topic_cosine"), _get(s, "embedding_different_topic_cosine")
        rows.append(["toy (trained embeddings)", same, different, same - different, ""])
        groups["toy"] = {"same topic": same, "different topic": different}
    for name, run in runs.items():
        e = run.embedding
        rows.append([name, e["same_topic_cosine"], e["different_topic_cosine"], e["cosine_gap"],
                     tuple(e["cosine_gap_ci"])])
        groups[name] = {"same topic": e["same_topic_cosine"], "different topic": e["different_topic_cosine"]}
    section = Section(
        "Embedding topic similarity",
        ["Mean cosine between the input embeddings of two different tokens of the same topic vs of different "
         "topics; the gap's 95% interval resamples topic-labelled tokens."],
        [Table(["setting", "cosine same topic", "cosine different topic", "gap", "gap 95% CI"], rows)],
    )
    if groups:
        path = paired_bars(groups, figures / "embedding_cosine.png", title="Embedding cosine by topic",
                           ylabel="mean cosine", errors=errors)
        section.figures.append(Figure(str(path.relative_to(figures.parent)), "Same- vs different-topic embedding cosine."))
    return section


def _cooccurrence_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun]) -> Section:
    rows = []
    if "scansnap" in toy:
        s = toy["scansnap"].summary
        rows.append(["toy: Y/Z model, Scan and Snap data (Tian et al.)", "attention vs P(key | query), distinct tokens",
                     _get(s, "cooccurrence_spearman"), "", 0.0])
    for name, run in runs.items():
        c = run.cooccurrence
        rows.append([name, "mean over heads and query tokens", c["spearman_mean"], "", c["chance"]])
        l, h = c["best_head"]
        rows.append([name, f"best head L{l}H{h}", c["best_head_spearman"], tuple(c["best_head_ci"]), c["chance"]])
    control_rows = [
        [name, f"L{run.cooccurrence['control']['topic_head'][0]}H{run.cooccurrence['control']['topic_head'][1]}",
         run.cooccurrence["control"]["same_topic_attention"], run.cooccurrence["control"]["top_cooccurring_attention"],
         run.cooccurrence["control"]["same_topic_attention_all_heads"],
         run.cooccurrence["control"]["top_cooccurring_attention_all_heads"]]
        for name, run in runs.items()
    ]
    return Section(
        "Co-occurrence ordering",
        ["Spearman correlation, per query token, between the attention one occurrence of a key token receives "
         "and how often the key co-occurs with the query; chance is 0. The control (Li et al.) compares "
         "attention on same-topic token pairs with attention on the N most co-occurring pairs."],
        [Table(["setting", "probe", "Spearman", "95% CI", "chance"], rows),
         Table(["model", "topic head", "same-topic pairs", "top co-occurring pairs", "same-topic (all heads)",
                "top co-occurring (all heads)"], control_rows)],
    )


def _toy_dynamics_section(toy: Mapping[str, ToyRun], figures: Path) -> Section:
    rows = []
    if "scansnap" in toy:
        s = toy["scansnap"].summary
        rows += [["scansnap", "final loss", _get(s, "final_loss")], ["scansnap", "distinct mass", _get(s, "distinct_mass")],
                 ["scansnap", "common mass", _get(s, "common_mass")], ["scansnap", "snap step", _get(s, "snap_step")],
                 ["scansnap", "entropy (distinct, nats)", _get(s, "entropy")]]
    if "topic" in toy:
        s = toy["topic"].summary
        rows += [["topic", "W_V block score", _get(s, "wv_block_score")],
                 ["topic", "W_V moves at step", _get(s, "two_stage", "wv_moves_at")],
                 ["topic", "W_K/W_Q move at step", _get(s, "two_stage", "wkq_moves_at")]]
    if "induction" in toy:
        s = toy["induction"].summary
        rows += [["induction", "validation loss", _get(s, "val_loss")], ["induction", "optimal loss", _get(s, "optimal_loss")],
                 ["induction", "true parent share", _get(s, "true_parent_share")],
                 ["induction", "copier distances", str(_get(s, "copier_distance", default=""))]]
    section = Section("Toy models: the papers' own claims", ["The paper-specific probes of each toy setting."],
                      [Table(["toy", "quantity", "value"], rows)])
    for run in toy.values():
        for png in sorted(run.folder.glob("*.png")):
            target = figures / f"toy_{run.name}_{png.name}"
            shutil.copyfile(png, target)
            section.figures.append(Figure(str(target.relative_to(figures.parent)), f"{run.name}: {png.stem.replace('_', ' ')}"))
    return section


def compare(toy_runs: Mapping[str, ToyRun], pretrained_runs: Mapping[str, PretrainedRun], *,
            folder: str | Path, corpus: Mapping[str, Any] | None = None,
            settings: Mapping[str, Any] | None = None) -> Report:
    """The toy-vs-pretrained report; figures are written into ``folder/figures``.

    Example: ``compare({"topic": ToyRun("topic", summary, path)}, {"minilm-l6": run}, folder="runs/r").write("runs/r")``.
    """
    folder = Path(folder)
    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    overview = Section("Setup", [
        f"Corpus: {dict(corpus or {}).get('name', 'unspecified')}; pretrained models: "
        f"{', '.join(pretrained_runs) or 'none'}; toy settings: {', '.join(toy_runs) or 'none'}."
    ])
    if corpus and corpus.get("topics"):
        overview.tables.append(Table(["topic", "top words"], [[i, ", ".join(words)] for i, words in enumerate(corpus["topics"])]))
    sections = [
        overview,
        _induction_section(toy_runs, pretrained_runs, figures),
        _topic_section(toy_runs, pretrained_runs, figures),
        _embedding_section(toy_runs, pretrained_runs, figures),
        _cooccurrence_section(toy_runs, pretrained_runs),
        _toy_dynamics_section(toy_runs, figures),
    ]
    summary = {
        "toy": {name: run.summary for name, run in toy_runs.items()},
        "pretrained": {name: run.summary() for name, run in pretrained_runs.items()},
        "corpus": dict(corpus or {}),
        "settings": dict(settings or {}),
    }
    return Report("mechprobe: toy models vs pretrained models", sections, summary)
