"""The report's Setup section on the topics: held-out coherence, which topics the probes use, old reports."""

from __future__ import annotations

from analyses.report.compare import compare
from analyses.report.corpus import CorpusSummary
from mechprobe import records

TOPICS = [["tiger", "zebra"], ["copper", "zinc"], ["red", "blue"]]
OLD_CORPUS = {"name": "wikipedia-excerpt", "sha256": "0" * 64, "topic_words": 6, "topics": TOPICS,
              "topic_coherence": {"measure": "c_npmi", "per_topic": [0.31, 0.12, -0.25], "mean": 0.06}}
HELD_OUT = {"window": "paragraph", "per_topic": [0.42, 0.05, -0.3], "per_topic_10_token": [0.2, -0.1, -0.5],
            "training_per_topic": [0.5, 0.2, 0.1], "used_by_probes": [True, True, False], "min_held_out_npmi": 0.0,
            "median": 0.05, "above_0": 2, "held_out_paragraphs": 909, "training_paragraphs": 3635}


def setup_section(tmp_path, corpus) -> str:
    compare({}, {}, folder=tmp_path, corpus=records.load(CorpusSummary, corpus)).write(tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    return markdown.split("## Setup")[1].split("\n## ")[0]


def test_setup_shows_held_out_coherence_and_the_dropped_topics(tmp_path):
    setup = setup_section(tmp_path, {**OLD_CORPUS, "topic_held_out": HELD_OUT})
    assert "| topic | top words | held-out NPMI (paragraphs) | held-out NPMI (10-token windows) | training NPMI " \
           "(paragraphs) | used by the probes |" in setup
    assert "| 0 | tiger, zebra | 0.420 | 0.200 | 0.500 | yes |" in setup
    assert "| 2 | red, blue | -0.300 | -0.500 | 0.100 | no |" in setup
    assert "909 of the paragraphs held out (fitted on 3635)" in setup
    assert "Median held-out NPMI 0.050; 2 of 3 topics above 0" in setup
    assert "Dropped: topic 2, whose held-out NPMI is below 0" in setup


def test_setup_when_no_topic_is_dropped(tmp_path):
    kept = {**HELD_OUT, "used_by_probes": [True, True, True], "min_held_out_npmi": -1.0}
    setup = setup_section(tmp_path, {**OLD_CORPUS, "topic_held_out": kept})
    assert "none is dropped" in setup and "Dropped:" not in setup


def test_report_saved_before_held_out_scoring_still_renders(tmp_path):
    setup = setup_section(tmp_path, OLD_CORPUS)
    assert "| topic | top words | coherence (c_npmi) |" in setup and "| 2 | red, blue | -0.250 |" in setup
    assert "no text was held out" in setup
