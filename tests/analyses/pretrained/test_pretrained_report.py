"""The pretrained suite on real text and the toy-vs-pretrained report (MiniLM, Wikipedia excerpt, gensim LDA)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random
import shutil

import pytest
import torch

import probes
from analyses.cli import main
from analyses.pretrained.findings import CAUSAL_FINDINGS, CIRCUIT_FINDING, PRETRAINED_FINDINGS
from analyses.pretrained.measure import PretrainedConfig, probe_pretrained
from analyses.report.build import render_report
from analyses.report.compare import ToyRun, compare
from analyses.report.corpus import CorpusSummary
from analyses.report.render_check import colourful_fraction, screenshot
from analyses.report.run_store import load_pretrained_run, save_report_inputs
from analyses.report.verdicts import VERDICT_FINDINGS
from analyses.topic.experiment import run as run_topic
from analyses.topic.result import TopicResult
from analyses.toy_findings import TOY_OF_FINDING
from mechprobe import records
from probes.attention.topic_attention import TopicAttentionProbe
from probes.text.corpora import iter_documents
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import token_topic_labels
from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics
from tests.analyses.rendering import assert_render_rebuilds
from tests.analyses.topic.test_experiment import tiny as tiny_topic
from tests.chromium import require_chromium
from tests.strict_json import assert_strict_json_everywhere

CONFIG = PretrainedConfig(seq_len=64, batch_size=4, max_batches=8, n_pair_tokens=60, n_boot=200,
                          n_permutations=200, protocol_seq_len=20, protocol_batches=4)


@pytest.fixture(scope="module")
def corpus_and_topics():
    documents = list(iter_documents("wikipedia-excerpt", min_chars=200, max_documents=1500))
    # 1,500 paragraphs are too few to judge topics on held-out text: paragraphs as LDA documents, every topic kept
    topic_model = fit_lda_topics(documents, LdaTopicConfig(n_topics=10, passes=2, chunk_words=0, no_below=5,
                                                           held_out_fraction=0.0))
    random.Random(0).shuffle(documents)
    return documents, assign_word_topics(topic_model)


@pytest.fixture(scope="module")
def minilm_run(corpus_and_topics):
    documents, word_topics = corpus_and_topics
    return probe_pretrained("minilm-l6", documents, word_topics, CONFIG, progress=False)


@pytest.mark.slow
def test_topic_numbers_match_separate_probe_runs(minilm_run, corpus_and_topics, minilm):
    """The merged halves equal one run over every batch; the best head is the even batches' argmax and its
    reported ratio is the odd batches' own ratio (selection and estimation on disjoint data)."""
    documents, word_topics = corpus_and_topics
    info = probes.ModelInfo.of(minilm)
    labels = token_topic_labels(word_topics, minilm.tokenizer, info.d_vocab).labels
    batches = list(text_token_batches(documents, minilm.tokenizer, info, seq_len=64, batch_size=4, max_batches=8))
    (alone,) = probes.run_probes(minilm, [TopicAttentionProbe(labels)], batches, progress=False)
    torch.testing.assert_close(alone.ratio, minilm_run.measured.topic.ratio)
    (even,) = probes.run_probes(minilm, [TopicAttentionProbe(labels)], batches[0::2], progress=False)
    (odd,) = probes.run_probes(minilm, [TopicAttentionProbe(labels)], batches[1::2], progress=False)
    held = minilm_run.measured.held_out["topic_attention_best_head"]
    layer, h = held.head
    gap = even.mean["same_topic"] - even.mean["different_topic"]
    assert gap[layer, h] == gap.max()
    assert held.value == pytest.approx(float(odd.ratio[layer, h]), rel=1e-6)
    assert held.ci[0] <= held.value <= held.ci[1] and 0 < held.p_value <= 1


@pytest.mark.slow
def test_summary_schema_and_intervals(minilm_run):
    summary = records.strict_json(records.to_json(minilm_run.summary()))
    assert set(summary["findings"]) == set(PRETRAINED_FINDINGS) == set(summary["control"]["findings"])
    for finding in [*summary["findings"].values(), *summary["control"]["findings"].values()]:
        assert {"statistic", "value", "ci", "null_kind", "null_value", "p_value", "control_value",
                "holds"} <= set(finding)
        assert isinstance(finding["holds"], bool)
        assert finding["ci"][0] <= finding["value"] <= finding["ci"][1]
    for finding in summary["findings"].values():
        assert finding["control_value"] is not None and len(finding["control_ci"]) == 2
    # a random-weight encoder holds nothing
    assert not any(f["holds"] for f in summary["control"]["findings"].values())
    embedding = summary["embedding"]
    assert {"cosine", "centred_cosine", "dot", "centred_dot"} <= set(embedding)
    assert -1 <= summary["cooccurrence"]["spearman_distance_matched_mean"] <= 1
    assert len(summary["induction_top_heads"]) == 5 and all(len(row) == 3 for row in summary["induction_top_heads"])
    # MiniLM layer 0 keeps a near-perfect previous-token head on natural text too
    assert summary["previous_token_top_heads"][0][2] > 0.8
    assert summary["findings"]["previous_token_text"]["value"] > 0.8


@pytest.mark.slow
def _report_with_a_topic_toy(minilm_run, tmp_path):
    """A report of MiniLM and a tiny topic toy written into ``tmp_path``: (toys, runs, report.html's path)."""
    toy = tmp_path / "toy"
    trained = run_topic(tiny_topic(joint=10, uniform=5, fixed_value=5, two_stage=20), toy, progress=False)
    toy_result = dataclasses.replace(trained, same_topic_attention=0.03, different_topic_attention=0.01,
                                     attention_ratio=3.0, chance_ratio=1.0, embedding_same_topic_cosine=0.9,
                                     embedding_different_topic_cosine=-0.1)
    toy_result = TopicResult.from_document(json.loads(toy_result.to_json()))  # as the report keeps it (build.py)
    toys, runs = {"topic": ToyRun("topic", toy_result, toy)}, {"minilm-l6": minilm_run}
    report = compare(toys, runs, folder=tmp_path, corpus=CorpusSummary("wikipedia-excerpt"))
    return toys, runs, report.write(tmp_path)


def test_report_renders_with_figures(minilm_run, tmp_path):
    toys, runs, _ = _report_with_a_topic_toy(minilm_run, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert "| toy: 1-layer masked LM on LDA data (Li et al.) | ratio, its only head | L0H0 | 3.000 |" in markdown
    assert json.loads((tmp_path / "summary.json").read_text())["pretrained"]["minilm-l6"]["n_layers"] == 6
    # the saved results rebuild the same report, byte for byte, and every JSON written is strict JSON
    save_report_inputs(tmp_path, toys, runs, CorpusSummary("wikipedia-excerpt"), None)
    copy = tmp_path / "rendered"
    outputs = {"rendered", "report.md", "report.html", "summary.json", "figures"}  # what render writes again
    shutil.copytree(tmp_path, copy, ignore=lambda where, names: outputs & set(names) if where == str(tmp_path) else [])
    render_report(copy)
    for name in ("summary.json", "report.md", "report.html"):
        assert (copy / name).read_bytes() == (tmp_path / name).read_bytes(), name
    assert assert_strict_json_everywhere(tmp_path) >= 5  # summary.json, results/, the toy's summary and histories


def test_report_with_figures_is_drawn_in_headless_chromium(minilm_run, tmp_path):
    require_chromium()
    _, _, page = _report_with_a_topic_toy(minilm_run, tmp_path)
    # 8000 px: the report's first 4000 (the verdicts, their forest plot, the causal and circuit tables) hold little
    # colour; the head maps below them hold most
    assert colourful_fraction(screenshot(page, tmp_path / "shot.png", height=8000)) > 0.01


@pytest.mark.slow
def test_no_topic_word_in_the_vocabulary(corpus_and_topics):
    documents, _ = corpus_and_topics
    with pytest.raises(probes.InputError, match="None of the topic words"):
        probe_pretrained("minilm-l6", documents, {"qzxjvkwplm": 0, "vvxqqzjk": 1}, CONFIG, progress=False)


@pytest.mark.parametrize("argv, message", [
    (["--corpus", "/no/such/corpus.txt"], "Unknown corpus"),
    (["--model", "./no/such/model"], "./no/such/model: no such file or folder"),
])
def test_report_bad_input_leaves_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "report"
    assert main(["report", "--no-toys", "--fast", "--no-progress", "--out", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_report_on_an_empty_corpus(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    out = tmp_path / "report"
    assert main(["report", "--no-toys", "--fast", "--no-progress", "--corpus", str(empty), "--model", "minilm-l6",
                 "--out", str(out)]) == 2
    assert "holds no text" in capsys.readouterr().err
    assert not out.exists()


def test_report_with_a_model_that_is_not_hookable(tmp_path, capsys):
    folder = tmp_path / "not_a_model"
    folder.mkdir()
    out = tmp_path / "report"
    assert main(["report", "--no-toys", "--fast", "--no-progress", "--model", str(folder), "--out", str(out)]) == 2
    assert "config.json" in capsys.readouterr().err
    assert not out.exists()


@pytest.fixture(scope="module")
def main_job(tmp_path_factory):
    """mechprobe report --fast on the offline defaults, run once for the tests below."""
    out = tmp_path_factory.mktemp("main_job") / "report"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        assert main(["report", "--fast", "--no-progress", "--out", str(out)]) == 0
    assert "report written" in printed.getvalue()
    return out


@pytest.mark.slow
def test_main_job_on_the_offline_defaults(main_job, tmp_path):
    """mechprobe report --fast: both packaged models, the three toy settings, the embedded corpus."""
    out = main_job
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["toy"]) == {"topic", "scansnap", "induction"}
    assert set(summary["pretrained"]) == {"smollm2-135m", "minilm-l6"}
    for entry in summary["pretrained"].values():
        ratio = entry["same_topic_attention_ratio"]
        assert ratio["ci"][0] <= ratio["value"] <= ratio["ci"][1] and len(ratio["best_head"]) == 2
        ablated = set(CAUSAL_FINDINGS) if entry["causal"] else set()  # SmolLM2; MiniLM is an encoder
        circuit = {CIRCUIT_FINDING} if entry["causal"] else set()  # the K-composition edge, on by default
        assert set(entry["findings"]) == set(PRETRAINED_FINDINGS) | ablated | circuit
        assert set(entry["ablations"]) == ablated
        assert (entry["circuit"] is None) == (not circuit) and ("encoder" in entry["circuit_note"]) == (not circuit)
        # the random-weight control of each model holds nothing
        assert not [name for name, f in entry["control"]["findings"].items() if f["holds"]]
        assert len(entry["induction_top_heads"][0]) == 3
    # SmolLM2 has real induction heads, far above chance and above its random-weight control
    smol = summary["pretrained"]["smollm2-135m"]
    assert smol["findings"]["induction_protocol"]["holds"]
    assert smol["induction_top_heads"][0][2] > 5 * smol["induction_chance"]
    # knocking its top 5 induction heads out costs more than 99% of random 5-head sets in the same layers
    assert smol["findings"]["induction_heads_causal"]["holds"], smol["findings"]["induction_heads_causal"]
    ablation = smol["ablations"]["induction_heads_causal"]
    assert ablation["value"] > ablation["null_q99"]
    markdown = (out / "report.md").read_text()
    assert markdown.index("## Verdicts") < markdown.index("## Setup") < markdown.index("## Causal checks") < \
        markdown.index("## Circuit")
    # the toy column: every pretrained finding and the papers' own claims, each on its toy over 5 seeds; the
    # K-composition edge (on by default) holds on SmolLM2's receiver score and not on its control
    assert set(summary["comparison"]) == set(VERDICT_FINDINGS)
    circuit = summary["comparison"][CIRCUIT_FINDING]
    assert circuit["smollm2-135m"]["value"] > circuit["smollm2-135m (random weights)"]["value"] + 0.1, circuit
    for name, row in summary["comparison"].items():
        if name not in TOY_OF_FINDING:  # induction_heads_causal, the circuit: no toy column for them yet
            assert "toy" not in row and name in (*CAUSAL_FINDINGS, CIRCUIT_FINDING), name
            continue
        toy, init = row["toy"], row["toy (at initialisation)"]
        assert toy["toy"] == TOY_OF_FINDING[name] and len(toy["seeds"]) == 5, name
        # uniform attention barely moves the Scan and Snap toy's loss (two facts with disjoint tokens: pooled
        # context already names the fact), so that ablation fails its 0.1-nat threshold on every seed
        if name == "scansnap_attention_causal":
            assert toy["held"] == 0 and not toy["holds"], toy
            continue
        assert toy["held"] >= 4 and toy["holds"], (name, toy)
        # Chen et al.'s initialisation plants the copier (0.73 of head 0's attention at distance 1): the induction
        # toy at initialisation already has a previous-token head; nothing else holds at initialisation
        assert init["holds"] == (name == "previous_token_text"), (name, init)
        assert summary["toy"][toy["toy"]]["findings"][name] == toy
    assert markdown.index("![") < markdown.index("| finding |")  # the forest plot is the first figure
    assert summary["corpus"]["name"] == "wikipedia-excerpt"
    assert json.loads((out / "timings.json").read_text())["smollm2-135m_s"] > 0
    assert len(summary["corpus"]["sha256"]) == 64 and "Q4_1" in summary["settings"]["model_weights"]["smollm2-135m"]
    # the saved results rebuild the report without a model, byte for byte
    assert_render_rebuilds(out, tmp_path / "rendered")
    saved = load_pretrained_run(next((out / "results" / "pretrained").glob("*smollm2*")))
    assert saved.measured.text_heads.scores["induction"].shape == (30, 9)  # every head, not only the top ones
    assert_strict_json_everywhere(out)
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") >= 4
    # interactive views: 6 maps per model and per control, 4 attention views per model; nothing fetched
    assert page.count("mp-view mp-heatmap") == 24 and page.count("mp-view mp-pattern") == 8
    assert "<script src" not in page and "<link" not in page


@pytest.mark.slow
def test_main_job_report_in_headless_chromium(main_job, tmp_path):
    import re

    from analyses.report.render_check import dump_dom

    require_chromium()
    # tall enough to reach the heatmaps below the forest plot and the tables (mostly white: dots and thin lines);
    # they start about 9,000 px down since the toys' order findings joined the forest plot and the verdict table
    assert colourful_fraction(screenshot(main_job / "report.html", tmp_path / "shot.png", height=12000)) > 0.01
    dom = dump_dom(main_job / "report.html")
    assert "**" not in dom and "<strong>holds</strong>" in dom
    assert re.search(r"<img[^>]*>", dom).group(0).startswith("<img alt=\"Every finding:")  # forest plot first
    assert 'data-views-drawn="true"' in re.search(r"<body[^>]*>", dom).group(0)
    assert len(re.findall(r'mp-view mp-(?:heatmap|pattern)"[^>]*data-drawn="\d+"', dom)) == 32


@pytest.mark.slow
def test_report_on_local_jsonl_and_parquet_corpora(tmp_path, capsys):
    """--corpus FILE.jsonl with --text-column, end to end; the same texts as Parquet give the same corpus (the digest
    the report records), so the report reads them alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from analyses.report.config import ReportConfig
    from probes.text.corpora import corpus_digest

    texts = [d.text for d in iter_documents("wikipedia-excerpt", min_chars=200, max_documents=700)]
    jsonl, parquet = tmp_path / "docs.jsonl", tmp_path / "docs.parquet"
    jsonl.write_text("".join(json.dumps({"id": i, "body": t}) + "\n" for i, t in enumerate(texts)), encoding="utf-8")
    pq.write_table(pa.Table.from_pylist([{"id": i, "body": t} for i, t in enumerate(texts)]), parquet)
    out = tmp_path / "report-jsonl"
    assert main(["report", "--no-toys", "--fast", "--no-progress", "--no-control", "--model", "minilm-l6",
                 "--corpus", str(jsonl), "--text-column", "body", "--set", "pretrained.n_boot=100",
                 "--set", "pretrained.n_permutations=100", "--set", "topics.held_out_fraction=0",
                 "--set", "topics.chunk_words=0", "--set", "topics.no_below=5", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["corpus"]["documents"] == len(texts) and summary["settings"]["text_column"] == "body"
    # (n_boot 100: p >= 1/101)
    assert summary["pretrained"]["minilm-l6"]["findings"]["previous_token_text"]["value"] > 0.9
    config = ReportConfig.fast()
    read = list(iter_documents(str(parquet), unit="paragraph", min_chars=config.min_chars, text_column="body",
                               max_documents=config.max_documents))
    assert [d.text for d in read] == texts
    random.Random(config.seed).shuffle(read)  # as the report shuffles them before it records the digest
    assert corpus_digest(read) == summary["corpus"]["sha256"]
    capsys.readouterr()
