"""Text to settle with (issue 46, Deliver 3): ``--corpus`` repeated with ``--settle`` chains later corpora after the
report's own, read once each and never again; the rounds' text is what no pass has read."""

from __future__ import annotations

import itertools

import pytest

import probes
from analyses.cli import main
from analyses.pretrained.measure import PretrainedConfig
from analyses.pretrained.settle import fresh_text
from analyses.pretrained.settled import SettleConfig
from analyses.report.build import later_documents
from analyses.report.config import ReportConfig
from probes.core.errors import ConfigError
from tests.hooked_models import OracleModel


class CharTokenizer:
    """Every character is one token id (ord % 50)."""

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) % 50 for c in text]


def _rows(batches):
    """Each row's valid tokens, in order, over ``batches``."""
    return [tuple(row[mask].tolist()) for batch in batches for row, mask in zip(batch.tokens, batch.attention_mask)]


def test_the_rounds_read_the_first_corpus_after_the_first_pass_then_the_later_ones_once():
    info = probes.ModelInfo.of(OracleModel())
    first = [f"first corpus paragraph {i}: " + "abcdefghij" * (1 + i % 3) for i in range(12)]
    later = [f"later corpus paragraph {i}: " + "klmnopqrst" * (1 + i % 2) for i in range(9)]
    pretrained = PretrainedConfig(seq_len=16, batch_size=3, max_batches=4)
    tokenizer = CharTokenizer()

    def batches(documents):
        return list(probes.text_token_batches(documents, tokenizer, info, seq_len=16, batch_size=3))

    first_pass = batches(first)[:4]
    fresh = list(fresh_text(first, iter(later), tokenizer, info, pretrained))
    # every row exactly once: the first pass's rows, then the fresh rows, make the two corpora's rows in order
    assert _rows(first_pass) + _rows(fresh) == _rows(batches(first)) + _rows(batches(later))
    assert len(_rows(fresh)) > len(_rows(batches(first))) - len(_rows(first_pass))  # it went on into the later one


def test_later_documents_stream_each_corpus_in_order(tmp_path):
    one, two = tmp_path / "one.txt", tmp_path / "two.txt"
    one.write_text("alpha " * 50 + "\n\n" + "tiny\n\n" + "beta " * 50, encoding="utf-8")
    two.write_text("gamma " * 50, encoding="utf-8")
    config = ReportConfig(settle=SettleConfig(enabled=True, corpora=(str(one), str(two))), min_chars=100)
    stream = later_documents(config)
    assert [d.text.split()[0] for d in itertools.islice(stream, 2)] == ["alpha", "beta"]  # "tiny": under min_chars
    assert [d.text.split()[0] for d in stream] == ["gamma"]


@pytest.mark.parametrize("corpus, enabled, corpora, message", [
    ("wikipedia-excerpt", False, ("wikitext-2",), "a second --corpus is read only by --settle"),
    ("wikipedia-excerpt", True, ("wikitext-2", "wikitext-2"), "wikitext-2 is named twice"),
    ("wikitext-2", True, ("wikitext-2",), "wikitext-2 is named twice"),
    ("wikipedia-excerpt", True, ("",), "settle.corpora must be corpus specs"),
])
def test_a_corpus_read_twice_or_without_settle_is_refused(corpus, enabled, corpora, message):
    with pytest.raises(ConfigError, match=message):
        ReportConfig(corpus=corpus, settle=SettleConfig(enabled=enabled, corpora=corpora))


def test_the_command_line_chains_its_corpora_and_checks_each_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "report"
    base = ["report", "--no-toys", "--model", "minilm-l6", "--out", str(out)]
    assert main([*base, "--corpus", "wikipedia-excerpt", "--corpus", str(tmp_path / "missing.txt"), "--settle"]) == 2
    assert "missing.txt" in capsys.readouterr().err and not out.exists()
    assert main([*base, "--corpus", "wikipedia-excerpt", "--corpus", "wikitext-2:test"]) == 2
    assert "read only by --settle" in capsys.readouterr().err and not out.exists()
    assert main([*base, "--settle", "--corpus", "wikipedia-excerpt", "--corpus", "hf:Salesforce/wikitext:"
                 "wikitext-103-raw-v1", "--corpus", "wikitext-2:test", "--list-settings"]) == 0
    settings = capsys.readouterr().out
    assert '"corpus": "wikipedia-excerpt"' in settings
    assert '"hf:Salesforce/wikitext:wikitext-103-raw-v1",\n      "wikitext-2:test"' in settings
