"""Issue 8: the same command with the same seed writes a bit-identical summary.json on CPU.

Each toy experiment's fast preset runs twice into two folders and the two summary.json files must
be equal byte for byte (wall-clock timings live in timings.json, which is not compared). The
induction toy and the pretrained report run as two fresh ``mechprobe`` processes with different
``PYTHONHASHSEED`` values, so string-hash-dependent ordering (sets of words, dict keys) would show;
the other toys run twice in this process, so state leaking from one run into the next would show.
Every summary records the seeds it used, and every probe result of the pretrained suite carries
its seed in its provenance. Identity is promised for one machine and thread count: with 1 vs 2
torch threads the report's embedding cosine differs in the last bit (float64 sums split by thread).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analyses.cli import main
from tests.fresh_process import fast_toy_args, run_in_fresh_process

# 600 paragraphs are too few for held-out topics (every topic would be dropped): paragraphs as LDA documents
SMALL_CORPUS_TOPICS = ["--set", "topics.held_out_fraction=0", "--set", "topics.chunk_words=0", "--set",
                       "topics.no_below=5"]
REPORT_ARGS = ["report", "--fast", "--no-toys", "--model", "minilm-l6", "--max-batches", "4", "--batch-size", "4",
               "--no-progress", *SMALL_CORPUS_TOPICS]


def json_differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Every JSON path where ``a`` and ``b`` differ, with both values (floats compared by repr: nan, -0.0)."""
    if isinstance(a, dict) and isinstance(b, dict):
        found = []
        for key in list(a) + [k for k in b if k not in a]:
            if key not in b or key not in a:
                found.append(f"{path}.{key}: only in the {'first' if key in a else 'second'} file")
            else:
                found += json_differences(a[key], b[key], f"{path}.{key}")
        if not found and list(a) != list(b):
            found.append(f"{path}: same keys in another order: {list(a)} vs {list(b)}")
        return found
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} vs {len(b)} items"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in json_differences(x, y, f"{path}[{i}]")]
    if type(a) is not type(b) or repr(a) != repr(b):
        return [f"{path}: {a!r} != {b!r}"]
    return []


def assert_identical_files(first: Path, second: Path) -> None:
    """Byte equality of two JSON files; on failure the message lists the differing JSON paths."""
    left, right = first.read_bytes(), second.read_bytes()
    if left == right:
        return
    differences = json_differences(json.loads(left), json.loads(right))
    shown = "\n  ".join(differences[:30] or ["same values, different formatting"])
    more = f"\n  ... and {len(differences) - 30} more" if len(differences) > 30 else ""
    pytest.fail(f"{first} and {second} differ at {len(differences)} JSON path(s):\n  {shown}{more}")


def timing_keys(summary: Any) -> set[str]:
    """Keys that look like wall-clock times (``*_s``, ``time``, ``seconds`` ...), which belong in timings.json."""
    pattern = re.compile(r"(^|_)(time|timings?|seconds|elapsed|duration|wall)($|_)|_s$")
    if isinstance(summary, dict):
        return {k for k in summary if pattern.search(k)}.union(*map(timing_keys, summary.values()))
    if isinstance(summary, list):
        return set().union(*map(timing_keys, summary))
    return set()


def settings_blocks(summary: Any, path: str = "$") -> Iterator[tuple[str, Any]]:
    """Every value stored under a key named ``settings`` (at any depth), with its JSON path."""
    if isinstance(summary, dict):
        for key, value in summary.items():
            if key == "settings":
                yield f"{path}.settings", value
            yield from settings_blocks(value, f"{path}.{key}")
    elif isinstance(summary, list):
        for i, value in enumerate(summary):
            yield from settings_blocks(value, f"{path}[{i}]")


def test_json_differences_names_the_paths():
    a = {"x": 1.0, "y": [1, {"z": float("nan")}], "settings": {"seed": 0}}
    b = {"x": 1.0000000000000002, "y": [1, {"z": float("nan")}], "settings": {"seed": 0}, "w": 2}
    assert json_differences(a, b) == ["$.x: 1.0 != 1.0000000000000002", "$.w: only in the second file"]
    assert json_differences([0.0], [-0.0]) == ["$[0]: 0.0 != -0.0"]
    assert json_differences({"a": 1, "b": 2}, {"b": 2, "a": 1}) == [
        "$: same keys in another order: ['a', 'b'] vs ['b', 'a']"]
    assert json_differences(a, json.loads(json.dumps(a))) == []


def test_timing_keys_are_found_at_any_depth():
    summary = {"loss": 1.0, "train_s": 2.0, "runs": [{"time": 1, "steps": 3, "wall_clock": 1}], "sweep_seeds": 10}
    assert timing_keys(summary) == {"train_s", "time", "wall_clock"}


@pytest.fixture(scope="module")
def toy_outputs(tmp_path_factory, fast_toy_run):
    """``get(name)`` -> the two output folders of ``mechprobe toy NAME --preset fast`` (run once per module): the
    first is the session's shared run (``fast_toy_run``, tests/conftest.py: the induction toy in a fresh process
    with PYTHONHASHSEED=1, the others in this process), the second is made here the same way (hash seed 2)."""
    done: dict[str, tuple[Path, Path]] = {}

    def get(name: str) -> tuple[Path, Path]:
        if name not in done:
            second = tmp_path_factory.mktemp(f"toy_{name}") / "second"
            if name == "induction":
                run_in_fresh_process(fast_toy_args(name), second, 2)
            else:
                assert main([*fast_toy_args(name), "--out", str(second)]) == 0
            done[name] = (fast_toy_run(name).folder, second)
        return done[name]

    return get


@pytest.fixture(scope="module")
def report_outputs(tmp_path_factory) -> tuple[Path, Path]:
    """Two fresh-process runs of a cheap report with LDA, MiniLM and the bootstraps (600 excerpt paragraphs)."""
    from probes.text.corpora import iter_documents

    root = tmp_path_factory.mktemp("report")
    corpus = root / "excerpt.txt"
    paragraphs = [d.text for d in iter_documents("wikipedia-excerpt", min_chars=200, max_documents=600)]
    corpus.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    folders = (root / "first", root / "second")
    for hash_seed, folder in enumerate(folders, start=1):
        run_in_fresh_process([*REPORT_ARGS, "--corpus", str(corpus)], folder, hash_seed)
    return folders


@pytest.mark.slow
@pytest.mark.parametrize("name", ["topic", "scansnap", "induction"])
def test_toy_fast_preset_is_bit_identical(toy_outputs, name):
    first, second = toy_outputs(name)
    assert_identical_files(first / "summary.json", second / "summary.json")
    assert (first / "timings.json").is_file()  # the wall-clock times went here, not into summary.json
    assert not timing_keys(json.loads((first / "summary.json").read_text()))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["topic", "scansnap", "induction"])
def test_toy_summary_records_its_seed(toy_outputs, name):
    summary = json.loads((toy_outputs(name)[0] / "summary.json").read_text())
    seed = summary["settings"]["seed"]
    assert isinstance(seed, int) and not isinstance(seed, bool)


@pytest.mark.slow
def test_report_is_bit_identical(report_outputs):
    first, second = report_outputs
    assert_identical_files(first / "summary.json", second / "summary.json")
    summary = json.loads((first / "summary.json").read_text())
    assert not timing_keys(summary) and json.loads((first / "timings.json").read_text())["minilm-l6_s"] > 0
    low, high = summary["pretrained"]["minilm-l6"]["same_topic_attention_ratio"]["ci"]
    assert low < high  # the bootstrap ran


@pytest.mark.slow
def test_report_summary_records_every_seed(report_outputs):
    summary = json.loads((report_outputs[0] / "summary.json").read_text())
    settings = summary["settings"]
    assert (settings["seed"], settings["topics"]["seed"], settings["pretrained"]["seed"]) == (0, 0, 0)
    assert summary["corpus"]["documents"] == 600 and summary["corpus"]["topic_words"] > 100
    assert summary["pretrained"]["minilm-l6"]["seed"] == settings["pretrained"]["seed"]
    for path, block in settings_blocks(summary):
        assert isinstance(block.get("seed"), int), f"{path} records no seed"


@pytest.mark.slow
def test_pretrained_probe_results_carry_the_seed(minilm):
    """Every probe result of the pretrained suite has the configured seed in its provenance, also in summary()."""
    from analyses.pretrained.measure import PretrainedConfig, probe_pretrained
    from probes.text.corpora import iter_documents
    from probes.text.topics import words_of

    documents = list(iter_documents("wikipedia-excerpt", min_chars=200, max_documents=60))
    counts = Counter(w for d in documents[:8] for w in words_of(d.text))
    word_topics = {word: i % 3 for i, (word, _) in enumerate(counts.most_common(60))}  # no LDA: any labels do
    config = PretrainedConfig(seq_len=32, batch_size=2, max_batches=4, n_pair_tokens=20, n_boot=20,
                              n_permutations=20, protocol_seq_len=8, protocol_batches=4, protocol_batch_size=2,
                              control=False, seed=7)
    run = probe_pretrained(minilm, documents, word_topics, config, progress=False, data="excerpt (seed 3)")
    measured = run.measured
    for result in (measured.protocol, measured.text_heads, measured.generalized, measured.topic, measured.ordering):
        assert result.provenance.seed == 7, type(result).__name__
    assert measured.text_heads.provenance.data == "excerpt (seed 3)"
    assert measured.topic.provenance.settings["permutation_seed"] == 7
    assert run.summary()["seed"] == 7
