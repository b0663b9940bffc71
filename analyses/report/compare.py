"""``compare(toy_runs, pretrained_runs) -> Report``: toy and pretrained side by side, probe by probe."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch

from analyses.curve_series import CurveSeries, load_curve_series
from analyses.dynamics.figures import plot_series_together
from analyses.dynamics.summary import DynamicsSummary
from analyses.induction.result import InductionResult
from analyses.paper_result import PaperResult
from analyses.pretrained.held_out import HeldOut
from analyses.pretrained.measure import ModelMeasurements, PretrainedRun
from analyses.report.causal_section import causal_section
from analyses.report.circuit_section import circuit_section
from analyses.report.config import ReportConfig, ReportSettings
from analyses.report.corpus import CorpusSummary, TopicHeldOut
from analyses.report.document import Figure, Report, Section, Table, View
from analyses.report.dynamics_section import dynamics_section
from analyses.report.figures import layer_head_heatmaps, paired_bars
from analyses.report.linear_section import linear_section
from analyses.report.settle_section import settle_section
from analyses.report.verdicts import compare_findings, verdict_section
from analyses.scansnap.result import ScanSnapResult
from analyses.topic.result import TopicResult
from mechprobe import records
from probes.display.views import heatmap_view, pattern_view
from probes.dynamics.embedding_topics import EMBEDDING_MEASURES
from probes.linear.probe import LinearProbeScores

R = TypeVar("R", bound=PaperResult)


@dataclass(frozen=True)
class ToyRun:
    """A finished toy experiment: its typed result and the folder holding its figures."""

    name: str
    result: PaperResult
    folder: Path


def _toy(toy: Mapping[str, ToyRun], name: str, kind: type[R]) -> R | None:
    """The result of toy ``name`` when it ran and is a ``kind`` (a Scan and Snap WikiText run is not a
    ScanSnapResult)."""
    run = toy.get(name)
    return run.result if run is not None and isinstance(run.result, kind) else None


def _measured(runs: Mapping[str, PretrainedRun]) -> list[tuple[str, ModelMeasurements]]:
    """Each pretrained model followed by its random-weight control (when it was run)."""
    rows = []
    for name, run in runs.items():
        rows.append((name, run.measured))
        if run.control is not None:
            rows.append((f"{name} (random weights)", run.control))
    return rows


def _held(label: str, what: str, held: HeldOut) -> list[Any]:
    head = "" if held.head is None else f"L{held.head[0]}H{held.head[1]}"
    return [label, what, head, held.value, held.ci, held.null_value, held.p_value]


HELD_COLUMNS = ["model", "statistic", "head", "value", "95% CI", "null", "p"]


def _induction_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows = []
    if (induction := _toy(toy, "induction", InductionResult)) is not None:
        rows.append([f"toy: {induction.model} model, Markov chains (Chen et al.)",
                     "layer-2 generalized induction (n=3)", "", induction.generalized_induction_score, "",
                     induction.generalized_induction_chance, ""])
    for label, measured in _measured(runs):
        held = measured.held_out
        rows.append(_held(label, "induction, repeated random tokens", held["induction_protocol"]))
        rows.append(_held(label, "induction, natural text", held["induction_text"]))
        rows.append(_held(label, "previous token, natural text", held["previous_token_text"]))
        layer, head, score = measured.generalized.best_head()
        n = len(measured.generalized.provenance.settings["distances"]) + 1
        rows.append([label, f"generalized induction n={n}, natural text (all data)", f"L{layer}H{head}", score, "",
                     measured.generalized.chance, ""])
    section = Section(
        "Induction heads",
        ["Attention mass on the token after an earlier occurrence of the current context (n=2: the last token; "
         "n=3: the last two tokens), averaged over queries that have such a target. The best head is chosen on "
         "the even batches and measured on the odd ones (95% bootstrap interval over those batches); the null is "
         "uniform attention over the visible keys, and p is the bootstrap probability that the held-out score "
         "does not exceed it."],
        [Table(HELD_COLUMNS, rows)],
    )
    if runs:
        tables = {label: m.protocol.scores["induction"] for label, m in _measured(runs)}
        path = layer_head_heatmaps(tables, figures / "induction_heads.png", title="Induction score on [BOS] X X",
                                   colorbar="induction score")
        section.figures.append(Figure(str(path.relative_to(figures.parent)), "Induction score per layer and head "
                                      "(repeated random tokens), each model beside its random-weight control."))
    return section


def _topic_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows, paragraphs = [], [
        "Mean attention weight between two positions holding different tokens of the same topic, divided by the "
        "mean between tokens of different topics (topics: the toy's LDA generator; gensim LDA on the corpus for "
        "pretrained models). Null: on the toy, the same ratio with the topic labels permuted among the labelled "
        "tokens (topic sizes kept; its documents place words without regard to position); on pretrained models, "
        "which topic pairs are same-topic shuffled among the pairs at the same distance whose queries sit at "
        "similar positions (text keeps a topic's words close together and attention prefers near keys, so a "
        "vocabulary permutation would credit a head that only reads distance); both computed in the same pass, "
        "p the permutation p-value. The best head (largest "
        "same-minus-different gap) is chosen on the even batches and measured on the odd ones."
    ]
    if (topic := _toy(toy, "topic", TopicResult)) is not None:
        rows.append(["toy: 1-layer masked LM on LDA data (Li et al.)", "ratio, its only head", "L0H0",
                     topic.attention_ratio, "", topic.chance_ratio, ""])
    for label, measured in _measured(runs):
        rows.append(_held(label, "ratio, best head", measured.held_out["topic_attention_best_head"]))
        rows.append(_held(label, "ratio, mean over heads", measured.held_out["topic_attention_mean"]))
    section = Section("Topic attention", paragraphs, [Table(HELD_COLUMNS, rows)])
    if runs:
        tables = {label: torch.log2(m.topic.ratio) for label, m in _measured(runs)}
        path = layer_head_heatmaps(tables, figures / "topic_attention.png",
                                   title="log2(same-topic / different-topic attention)", colorbar="log2 ratio",
                                   cmap="RdBu_r", center=0.0)
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Same- vs different-topic attention per head (red: more same-topic), each "
                                      "model beside its random-weight control."))
    return section


def _embedding_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun], figures: Path) -> Section:
    rows, groups, errors = [], {}, {}
    if (topic := _toy(toy, "topic", TopicResult)) is not None:
        same, different = topic.embedding_same_topic_cosine, topic.embedding_different_topic_cosine
        rows.append(["toy (trained embeddings)", "cosine", same, different, same - different, "", "", ""])
    for label, measured in _measured(runs):
        test = measured.embedding
        for measure in EMBEDDING_MEASURES:
            rows.append([label, measure.replace("_", " "), test.same[measure], test.different[measure],
                         test.gap[measure], test.gap_ci[measure], test.null_mean(measure), test.p_value[measure]])
        groups[label] = {m.replace("_", " "): test.gap[m] for m in ("cosine", "centred_cosine")}
        errors[label] = {m.replace("_", " "): test.gap_ci[m] for m in ("cosine", "centred_cosine")}
    section = Section(
        "Embedding topic similarity",
        ["Mean similarity between the input embeddings of two different tokens of the same topic and of different "
         "topics, as inner product and cosine, raw and after subtracting the mean embedding (raw cosines of "
         "anisotropic embeddings mostly measure their common direction). The gap's 95% interval resamples "
         "labelled tokens; the null permutes the topic labels among them."],
        [Table(["model", "measure", "same topic", "different topic", "gap", "gap 95% CI", "null gap", "p"], rows)],
    )
    if groups:
        path = paired_bars(groups, figures / "embedding_cosine.png",
                           title="Embedding cosine gap (same - different topic)",
                           ylabel="cosine gap", errors=errors)
        section.figures.append(Figure(str(path.relative_to(figures.parent)),
                                      "Same-minus-different-topic cosine, raw and mean-centred, with 95% intervals."))
    return section


def _cooccurrence_section(toy: Mapping[str, ToyRun], runs: Mapping[str, PretrainedRun]) -> Section:
    rows = []
    if (scansnap := _toy(toy, "scansnap", ScanSnapResult)) is not None:
        rows.append(["toy: Y/Z model, Scan and Snap data (Tian et al.)", "attention vs P(key | query), distinct tokens",
                     "L0H0", scansnap.cooccurrence_spearman, "", 0.0, ""])
    for label, measured in _measured(runs):
        c = measured.cooccurrence
        rows.append(_held(label, "distance-matched, best head", measured.held_out["cooccurrence_ordering"]))
        rows.append([label, "distance-matched, mean over heads", "", c.spearman_distance_matched_mean, "", "", ""])
        rows.append([label, "per occurrence (confounded by position), mean over heads", "",
                     c.spearman_per_occurrence_mean, "", "", ""])
    return Section(
        "Co-occurrence ordering",
        ["Spearman correlation, per query token, between the attention a key token receives and how often it "
         "co-occurs with the query, averaged over query tokens. Distance-matched attention compares each key with "
         "the other keys at the same distance from the same query token, after scaling attention by the number of "
         "visible keys, so purely positional attention (recency, a causal prefix) scores 0; the raw per-occurrence "
         "measure is shown for comparison. Null: co-occurrence counts shuffled among each query's keys."],
        [Table(HELD_COLUMNS, rows)],
    )


def toy_series(toy: Mapping[str, ToyRun]) -> dict[str, CurveSeries]:
    """The curves each toy's run saved for the shared-axis figure (the topic toy's weight displacements, the Scan
    and Snap toy's composition), by toy name; toys that saved none are left out."""
    found = {}
    for run in toy.values():
        series = load_curve_series(run.folder, rerun=f"Re-run `mechprobe report` (the {run.name} toy's folder "
                                   f"{run.folder} is damaged).")
        if series is not None:
            found[f"{run.name} toy"] = series
    return found


def _toy_dynamics_section(toy: Mapping[str, ToyRun], figures: Path) -> Section:
    rows = []
    if (scansnap := _toy(toy, "scansnap", ScanSnapResult)) is not None:
        rows += [["scansnap", "final loss", scansnap.final_loss], ["scansnap", "distinct mass", scansnap.distinct_mass],
                 ["scansnap", "common mass", scansnap.common_mass], ["scansnap", "snap step", scansnap.snap_step],
                 ["scansnap", "entropy (distinct, nats)", scansnap.entropy]]
    if (topic := _toy(toy, "topic", TopicResult)) is not None:
        rows += [["topic", "W_V block score", topic.wv_block_score],
                 ["topic", "W_V moves at step", topic.two_stage.wv_moves_at],
                 ["topic", "W_K/W_Q move at step", topic.two_stage.wkq_moves_at]]
    if (induction := _toy(toy, "induction", InductionResult)) is not None:
        rows += [["induction", "validation loss", induction.val_loss],
                 ["induction", "optimal loss", induction.optimal_loss],
                 ["induction", "true parent share", induction.true_parent_share],
                 ["induction", "copier distances", str(list(induction.copier_distance))]]
    references = [[run.name, run.result.reference.paper, run.result.reference.experiment,
                   len(run.result.reference.deviations)] for run in toy.values()]
    section = Section("Toy models: the papers' own claims", [
        "The paper-specific probes of each toy setting. Each toy's summary.json names the experiment it "
        "reproduces and lists every remaining deviation under reference.deviations."],
        [Table(["toy", "quantity", "value"], rows), Table(["toy", "paper", "experiment", "deviations"], references)])
    if series := toy_series(toy):
        together = plot_series_together(series, figures / "toy_orders_together.png")
        section.figures.append(Figure(str(together.relative_to(figures.parent)),
                                      "the toys' orders of events on one axis (fraction of training): W_V before "
                                      "W_K/W_Q (topic toy), scan before snap (Scan and Snap toy); events filled when "
                                      "the seed's order holds"))
    for run in toy.values():
        for png in sorted(run.folder.glob("*.png")):
            target = figures / f"toy_{run.name}_{png.name}"
            shutil.copyfile(png, target)
            section.figures.append(Figure(str(target.relative_to(figures.parent)),
                                          f"{run.name}: {png.stem.replace('_', ' ')}"))
    return section


def _interactive_section(pretrained_runs: Mapping[str, PretrainedRun]) -> Section:
    """Hover-able layer x head maps of every per-head probe, and the top heads' attention on a passage."""
    section = Section("Interactive views", [
        "Every per-head probe as a layer x head map (hover a cell for its value), and the best heads' attention on "
        "a real passage and on repeated random tokens (hover a token to see where it attends)."])
    for label, run in pretrained_runs.items():
        for measured in (run.measured, run.control):
            if measured is None:
                continue
            tables = [("induction, repeated random tokens", measured.protocol.scores["induction"],
                       measured.protocol.chance["induction"])]
            tables += [(f"{kind.replace('_', ' ')}, natural text", measured.text_heads.scores[kind],
                        measured.text_heads.chance[kind]) for kind in measured.text_heads.scores]
            tables += [(f"generalized induction (n={len(measured.generalized.distances) + 1})",
                        measured.generalized.scores, measured.generalized.chance),
                       ("same-/different-topic attention ratio", measured.topic.ratio, measured.topic.chance_ratio)]
            for title, table, chance in tables:
                section.views.append(View(f"{measured.name}: {title}",
                                          heatmap_view(f"{measured.name}: {title}", table.tolist(), chance=chance)))
        for passage_name, passage in run.passages.items():
            for head_name, pattern in passage.patterns.items():
                layer, head = passage.heads[head_name]
                title = f"{label}: best {head_name} head L{layer}H{head} on {passage_name}"
                section.views.append(View(title, pattern_view(title, passage.tokens, pattern)))
    return section


def _topic_quality(overview: Section, topics: tuple[tuple[str, ...], ...], held_out: TopicHeldOut) -> None:
    """The Setup paragraph and table on the topics: held-out and training NPMI, and which topics the probes use."""
    used = held_out.used_by_probes
    dropped = [str(t) for t, keep in enumerate(used) if not keep]
    overview.paragraphs.append(
        f"Topics: gensim LDA (stop words and corpus-generic words removed) fitted on chunks of consecutive "
        f"paragraphs of one article, with {held_out.held_out_paragraphs} of the paragraphs held out (fitted on "
        f"{held_out.training_paragraphs}); each topic claims its most likely words. Held-out NPMI: normalised "
        f"PMI of a topic's top 10 words counted over the held-out paragraphs, co-occurrence in the same paragraph, "
        f"the unit the probes read (-1 to 1; 0 = the words co-occur as often as chance; two words that never share "
        f"a held-out paragraph score about -0.7). Median held-out NPMI {held_out.median:.3f}; "
        f"{held_out.above_0} of {len(used)} topics above 0. The 10-token column counts gensim's standard "
        f"sliding windows instead, where most pairs of topical words never meet in a held-out text this small; "
        f"training NPMI counts paragraphs of the text LDA was fitted on. "
        + (f"Dropped: topic{'s' if len(dropped) > 1 else ''} {', '.join(dropped)}, whose held-out NPMI is below "
           f"{held_out.min_held_out_npmi:g}: their top words do not co-occur in unseen paragraphs more often than "
           f"chance, so they label no word for the topic probes."
           if dropped else f"Every topic reaches held-out NPMI {held_out.min_held_out_npmi:g}; none is dropped.")
        + " A topic-attention finding is only as good as these topics.")
    overview.tables.append(Table(
        ["topic", "top words", "held-out NPMI (paragraphs)", "held-out NPMI (10-token windows)",
         "training NPMI (paragraphs)", "used by the probes"],
        [[t, ", ".join(words), held_out.per_topic[t], held_out.per_topic_10_token[t],
          held_out.training_per_topic[t], "yes" if used[t] else "no"] for t, words in enumerate(topics)]))


def compare(toy_runs: Mapping[str, ToyRun], pretrained_runs: Mapping[str, PretrainedRun], *,
            folder: str | Path, corpus: CorpusSummary | None = None,
            settings: ReportSettings | None = None,
            linear: Mapping[str, LinearProbeScores] | None = None,
            dynamics: Mapping[str, DynamicsSummary] | None = None) -> Report:
    """The toy-vs-pretrained report; figures are written into ``folder/figures``.

    Example:
    ``compare({"topic": ToyRun("topic", summary, path)}, {"minilm-l6": run}, folder="runs/r").write("runs/r")``.
    """
    folder = Path(folder)
    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    corpus = corpus or CorpusSummary()
    overview = Section("Setup", [
        f"Corpus: {corpus.name} (sha256 {corpus.sha256[:12]}); "
        "pretrained models: "
        f"{', '.join(pretrained_runs) or 'none'}; toy settings: {', '.join(toy_runs) or 'none'}."
    ])
    if corpus.topics:
        if corpus.topic_held_out is not None:
            _topic_quality(overview, corpus.topics, corpus.topic_held_out)
        else:  # a report saved before held-out scoring, or topics fitted without held-out text
            coherence = (corpus.topic_coherence.per_topic if corpus.topic_coherence is not None
                         else (float("nan"),) * len(corpus.topics))
            overview.paragraphs.append(
                "Topics: gensim LDA on the corpus (stop words and corpus-generic words removed); each topic claims its "
                "most likely words. Coherence: NPMI of a topic's top 10 words over 10-token windows of the training "
                "text (-1 to 1; 0 = the words co-occur as often as chance); no text was held out, so no topic was "
                "scored on text LDA did not see. A topic-attention finding is only as good as these topics.")
            overview.tables.append(Table(["topic", "top words", "coherence (c_npmi)"],
                                         [[i, ", ".join(words), float(c)]
                                          for i, (words, c) in enumerate(zip(corpus.topics, coherence))]))
    comparison = compare_findings({name: run.result.toy_findings() for name, run in toy_runs.items()},
                                  pretrained_runs)
    sections = [
        verdict_section(comparison, figures),
        overview,
        _induction_section(toy_runs, pretrained_runs, figures),
        _topic_section(toy_runs, pretrained_runs, figures),
        _embedding_section(toy_runs, pretrained_runs, figures),
        _cooccurrence_section(toy_runs, pretrained_runs),
        _toy_dynamics_section(toy_runs, figures),
    ]
    if (causal := causal_section(pretrained_runs, figures)) is not None:
        sections.insert(sections.index(overview) + 1, causal)
    if (circuit := circuit_section(pretrained_runs, figures)) is not None:
        sections.insert(sections.index(causal if causal is not None else overview) + 1, circuit)
    if (settling := settle_section(pretrained_runs, figures)) is not None:
        sections.insert(1, settling)
    linear_entry = None
    if linear:
        config = settings if settings is not None else ReportConfig()
        section, linear_entry = linear_section(linear, figures, n_boot=config.linear.n_boot, seed=config.seed)
        sections.append(section)
    if dynamics:
        sections.append(dynamics_section(dynamics, figures, folder, toys=toy_series(toy_runs)))
    if pretrained_runs:
        sections.append(_interactive_section(pretrained_runs))
    summary = {
        "toy": {name: records.dump(run.result) for name, run in toy_runs.items()},
        "pretrained": {name: run.summary() for name, run in pretrained_runs.items()},
        "comparison": records.dump(comparison.rows),
        "corpus": records.dump(corpus),
        "settings": records.dump(settings) if settings is not None else {},
    }
    if linear_entry is not None:
        summary["linear"] = linear_entry
    if dynamics:
        summary["dynamics"] = {spec: records.dump(value) for spec, value in dynamics.items()}
    return Report("mechprobe: toy models vs pretrained models", sections, summary)
