"""``mechprobe report`` settings: defaults, then --config FILE.toml, then flags, then --set (nested keys dotted)."""

from __future__ import annotations

import json
import re

import pytest

from analyses.cli import build_parser, main
from analyses.commands.report import report_config
from analyses.config_overrides import apply_overrides, toml_assignments
from analyses.report.config import ReportConfig
from probes.core.errors import ConfigError


def settings(capsys, *argv: str) -> dict:
    assert main(["report", "--list-settings", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_defaults_and_fast_are_the_config_classes(capsys):
    import dataclasses

    assert settings(capsys) == json.loads(json.dumps(dataclasses.asdict(ReportConfig())))
    assert settings(capsys, "--fast")["max_documents"] == ReportConfig.fast().max_documents


def test_flags_reach_nested_sections_and_one_seed_seeds_everything(capsys):
    s = settings(capsys, "--seed", "7", "--seq-len", "64", "--batch-size", "4", "--max-batches", "6", "--no-control",
                 "--corpus", "wikitext-2:test", "--text-column", "body")
    assert (s["seed"], s["topics"]["seed"], s["pretrained"]["seed"]) == (7, 7, 7)
    assert (s["pretrained"]["seq_len"], s["pretrained"]["batch_size"], s["pretrained"]["max_batches"]) == (64, 4, 6)
    assert s["pretrained"]["control"] is False
    assert (s["corpus"], s["text_column"]) == ("wikitext-2:test", "body")


def test_config_file_then_flags_then_set(tmp_path, capsys):
    config = tmp_path / "report.toml"
    config.write_text('seed = 3\nmodels = ["minilm-l6"]\n[topics]\nn_topics = 12\nextra_stop_words = ["foo"]\n'
                      '[pretrained]\nn_boot = 200\nseq_len = 96\n', encoding="utf-8")
    s = settings(capsys, "--config", str(config))
    assert (s["seed"], s["models"], s["topics"]["n_topics"], s["topics"]["extra_stop_words"]) == (
        3, ["minilm-l6"], 12, ["foo"])
    assert (s["pretrained"]["n_boot"], s["pretrained"]["seq_len"]) == (200, 96)
    s = settings(capsys, "--config", str(config), "--seq-len", "32", "--set", "topics.n_topics=9")
    assert (s["pretrained"]["seq_len"], s["topics"]["n_topics"], s["pretrained"]["n_boot"]) == (32, 9, 200)


def test_toml_assignments_flatten_tables_and_lists(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('a = 1\nb = true\nc = [1.5]\nd = []\n[s]\nx = "text"\n[s.t]\ny = 2\n', encoding="utf-8")
    assert toml_assignments(path) == ["a=1", "b=true", "c=1.5,", "d=", "s.x=text", "s.t.y=2"]


def test_dotted_overrides_are_validated_by_the_nested_config():
    config = ReportConfig()
    changed = apply_overrides(config, ["topics.n_topics=13", "pretrained.n_boot=50", "seed=2"])
    assert (changed.topics.n_topics, changed.pretrained.n_boot, changed.seed) == (13, 50, 2)
    assert config.topics.n_topics != 13  # frozen: the original is unchanged
    with pytest.raises(ConfigError, match=r"--set topics\.n_topcs: unknown setting .*Did you mean n_topics"):
        apply_overrides(config, ["topics.n_topcs=3"])
    with pytest.raises(ConfigError, match="seed is a single value, not a section"):
        apply_overrides(config, ["seed.x=3"])
    with pytest.raises(ConfigError, match=re.escape("a section; set its fields as topics.NAME=VALUE")):
        apply_overrides(config, ["topics=3"])
    with pytest.raises(ConfigError, match="max_batches and protocol_batches must be >= 4"):
        apply_overrides(config, ["pretrained.max_batches=2"])
    with pytest.raises(ConfigError, match="given twice"):
        apply_overrides(config, ["topics.seed=1", "topics.seed=2"])


@pytest.mark.parametrize("content, words", [
    ("seed = ", "is not valid TOML"),
    ('[topics]\nn_topicz = 3\n', "Did you mean n_topics"),
    ('[pretrained]\nn_boot = "many"\n', "expected an integer"),
])
def test_report_bad_config_file_is_one_line_before_any_work(tmp_path, capsys, content, words):
    from tests.analyses.test_cli_bad_input import fails_in_one_line

    config = tmp_path / "bad.toml"
    config.write_text(content, encoding="utf-8")
    out = tmp_path / "report"
    fails_in_one_line(["report", "--no-progress", "--config", str(config), "--out", str(out)], capsys, words,
                      error=ConfigError)
    fails_in_one_line(["report", "--no-progress", "--config", str(tmp_path / "missing.toml"), "--out", str(out)],
                      capsys, "no such file", error=ConfigError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]


@pytest.mark.parametrize("make, words", [
    (lambda path: path.mkdir(), "is a folder; give a TOML file of settings"),
    (lambda path: path.write_bytes(b"\xff\xfeseed = 3"), "give a UTF-8 TOML file of settings"),
    (lambda path: path.symlink_to(path.name), "give a UTF-8 TOML file of settings"),
], ids=["a_folder", "not_utf8", "a_link_that_loops"])
def test_report_config_that_is_no_toml_file_says_what_to_give(tmp_path, capsys, make, words):
    """--config FOLDER said 'cannot read it ([Errno 21] Is a directory: ...)', and no fix."""
    from tests.analyses.test_cli_bad_input import fails_in_one_line

    make(tmp_path / "settings")
    fails_in_one_line(["report", "--no-progress", "--config", str(tmp_path / "settings"), "--out",
                       str(tmp_path / "report")], capsys, "--config", words, error=ConfigError)
    assert not (tmp_path / "report").exists()


def test_report_config_from_parsed_arguments():
    args = build_parser().parse_args(["report", "--out", "x", "--no-toys", "--model", "minilm-l6"])
    config = report_config(args)
    assert config.toys == () and config.models == ("minilm-l6",)
