"""Corpora: WikiText article/paragraph splitting, the embedded Wikipedia excerpt, local files, bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from probes import InputError
from probes.text.corpora import iter_documents, wikitext_documents

SHARED = Path(__file__).resolve().parents[4] / "shared" / "data"
WIKITEXT_RAW = SHARED / "wikitext-2-raw" / "wiki.test.raw"
needs_wikitext = pytest.mark.skipif(not WIKITEXT_RAW.is_file(), reason="../shared/data is not beside the repo")


def test_wikitext_lines_group_into_articles_and_paragraphs():
    lines = [" = First = \n", "\n", " Para one . \n", " = = Sub = = \n", " Para two . \n", " = Second = \n",
             " Only . \n"]
    articles = list(wikitext_documents(lines, "t", unit="article"))
    assert [(a.title, a.text) for a in articles] == [("First", "Para one .\n\nPara two ."), ("Second", "Only .")]
    paragraphs = list(wikitext_documents(lines, "t", unit="paragraph"))
    assert [p.text for p in paragraphs] == ["Para one .", "Para two .", "Only ."]


def test_embedded_wikipedia_excerpt_is_real_and_complete():
    articles = list(iter_documents("wikipedia-excerpt", unit="article"))
    assert len(articles) == 106  # every non-redirect article of gensim's excerpt
    assert articles[0].title == "Anarchism"
    assert "political philosophy" in articles[0].text
    assert sum(len(a.text) for a in articles) > 2_500_000
    assert "'''" not in articles[0].text  # wiki markup removed


def test_the_excerpt_parsed_once_gives_what_a_fresh_parse_gives_to_interleaved_readers(monkeypatch):
    """The kept articles (ParsedExcerpt) against the file parsed here from scratch, read by two readers that take
    turns; a later read parses nothing again."""
    import bz2

    from gensim.corpora import wikicorpus
    from gensim.test.utils import datapath

    from probes.text.corpora import WIKIPEDIA_EXCERPT, ParsedExcerpt, _clean_wiki_markup

    path = datapath(WIKIPEDIA_EXCERPT)
    monkeypatch.setattr(ParsedExcerpt, "_by_path", {})  # a process that has not read it yet
    with bz2.open(path, "rb") as handle:
        expected = [(title, tuple(_clean_wiki_markup(wikicorpus.filter_wiki(text))))
                    for title, text, _ in wikicorpus.extract_pages(handle, filter_namespaces=("0",))
                    if not text.lstrip().upper().startswith("#REDIRECT")]
    first, second = iter(ParsedExcerpt.of(path)), iter(ParsedExcerpt.of(path))
    one, other = [next(first) for _ in range(3)], [next(second) for _ in range(5)]
    one += list(first)
    other += list(second)
    assert one == other == expected and len(expected) == 107  # one article is all markup: no paragraph
    parsed = []
    monkeypatch.setattr(wikicorpus, "filter_wiki", lambda text: parsed.append(text) or text)
    again = [(d.title, d.text) for d in iter_documents("wikipedia-excerpt", unit="article")]
    assert not parsed and again == [(title, "\n\n".join(paragraphs)) for title, paragraphs in expected
                                    if paragraphs]
    kept = ParsedExcerpt.of(path)
    monkeypatch.setattr(kept, "pid", kept.pid + 1)  # as a forked child sees its parent's parse
    assert ParsedExcerpt.of(path) is not kept and ParsedExcerpt.of(path) is ParsedExcerpt.of(path)


def test_an_excerpt_parse_that_fails_is_not_kept_as_a_shorter_corpus(monkeypatch):
    from probes.text.corpora import ParsedExcerpt

    monkeypatch.setattr(ParsedExcerpt, "_by_path", {})
    real_parse = ParsedExcerpt._parse

    def fails_after_two(self):
        parse = real_parse(self)
        yield next(parse)
        yield next(parse)
        raise OSError("truncated file")

    monkeypatch.setattr(ParsedExcerpt, "_parse", fails_after_two)
    for _ in range(2):  # the second reader meets the error too, not the two articles kept before it
        with pytest.raises(OSError, match="truncated"):
            list(iter_documents("wikipedia-excerpt", unit="article"))
    monkeypatch.setattr(ParsedExcerpt, "_parse", real_parse)
    assert len(list(iter_documents("wikipedia-excerpt", unit="article"))) == 106


@needs_wikitext
def test_local_wikitext_file_keeps_every_line():
    paragraphs = list(iter_documents(WIKITEXT_RAW, unit="paragraph"))
    headings = sum(1 for line in WIKITEXT_RAW.read_text(encoding="utf-8").splitlines()
                   if line.strip().startswith("=") and line.strip().endswith("="))
    assert len(paragraphs) + headings == 2891  # the split's non-empty lines (data README)
    assert paragraphs[0].title == "Robert Boulter"


@needs_wikitext
def test_datasets_text_loader_gives_the_same_documents():
    from datasets import load_dataset

    dataset = load_dataset("text", data_files=str(WIKITEXT_RAW), split="train")
    from_dataset = [d.text for d in iter_documents(dataset, max_documents=50)]
    from_file = [d.text for d in iter_documents(WIKITEXT_RAW, max_documents=50)]
    assert from_dataset == from_file


def test_folder_of_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("First paragraph.\n\nSecond\nparagraph.\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("Other file.", encoding="utf-8")
    docs = list(iter_documents(tmp_path))
    assert [(d.title, d.text) for d in docs] == [("a", "First paragraph."), ("a", "Second paragraph."),
                                                 ("b", "Other file.")]


def test_max_documents_and_min_chars():
    docs = list(iter_documents("wikipedia-excerpt", max_documents=5, min_chars=300))
    assert len(docs) == 5 and all(len(d.text) >= 300 for d in docs)


@pytest.mark.parametrize(
    "content, message",
    [(b"", "holds no text"), (b"\x00\x01\x02binary", "binary"), ("caf\u00e9".encode("latin-1"), "not UTF-8")],
)
def test_bad_corpus_files(tmp_path, content, message):
    path = tmp_path / "corpus.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        list(iter_documents(path))


def test_missing_path_empty_folder_and_bad_dataset(tmp_path):
    with pytest.raises(InputError, match="Unknown corpus"):
        list(iter_documents(tmp_path / "nope.txt"))
    with pytest.raises(InputError, match=re.escape("no .txt files")):
        list(iter_documents(tmp_path))
    from datasets import Dataset

    with pytest.raises(InputError, match="'text' column"):
        list(iter_documents(Dataset.from_dict({"body": ["x"]})))


def test_hub_wikitext_without_network_says_what_to_do():
    with pytest.raises(InputError, match="local WikiText file"):
        list(iter_documents("wikitext-2"))


def test_huge_single_line_is_one_paragraph(tmp_path):
    path = tmp_path / "one_line.txt"
    path.write_text("word " * 200_000, encoding="utf-8")
    (doc,) = list(iter_documents(path))
    assert len(doc.text) == len("word " * 200_000) - 1


def test_jsonl_and_parquet_give_one_document_a_row(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"body": "First row.\n\nIts second paragraph.", "id": 1}, {"body": "Second row.", "id": 2},
            {"body": None, "id": 3}]
    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text("\n".join(__import__("json").dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet, row_group_size=2)
    for path in (jsonl, parquet):
        articles = list(iter_documents(path, unit="article", text_column="body"))
        assert [d.text for d in articles] == ["First row.\n\nIts second paragraph.", "Second row."]
        paragraphs = list(iter_documents(path, unit="paragraph", text_column="body"))
        assert [d.text for d in paragraphs] == ["First row.", "Its second paragraph.", "Second row."]
        assert paragraphs[0].title == paragraphs[1].title != paragraphs[2].title


def test_jsonl_and_parquet_bad_input(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text('{"text": "ok"}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"no column 'body' \(columns: text\).*text_column setting"):
        list(iter_documents(jsonl, text_column="body"))
    jsonl.write_text('{"text": "ok"}\nnot json\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"docs.jsonl:2 is not JSON"):
        list(iter_documents(jsonl))
    jsonl.write_text('[1, 2]\n', encoding="utf-8")
    with pytest.raises(InputError, match="not an object"):
        list(iter_documents(jsonl))
    jsonl.write_text('{"text": 3}\n', encoding="utf-8")
    with pytest.raises(InputError, match="holds int values, not text"):
        list(iter_documents(jsonl))
    parquet = tmp_path / "docs.parquet"
    pq.write_table(pa.Table.from_pylist([{"text": "a"}]), parquet)
    with pytest.raises(InputError, match=r"no column 'body'"):
        list(iter_documents(parquet, text_column="body"))
    parquet.write_bytes(b"PAR1 damaged")
    with pytest.raises(InputError, match="not a readable Parquet file"):
        list(iter_documents(parquet))


def test_hub_dataset_spec_parsing_and_offline_message(monkeypatch):
    from probes.text.corpora import check_corpus_spec, parse_hub_spec

    assert parse_hub_spec("hf:imdb") == ("imdb", None, "train")
    assert parse_hub_spec("hf:Salesforce/wikitext:wikitext-2-raw-v1:test") == (
        "Salesforce/wikitext", "wikitext-2-raw-v1", "test")
    for bad in ("hf:", "hf::x", "hf:a:b:c:d", "hf:a:"):
        with pytest.raises(InputError, match="hf:NAME"):
            check_corpus_spec(bad)
    with pytest.raises(InputError, match="text_column must name a column"):
        check_corpus_spec("hf:imdb", text_column=" ")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError) as caught:
        list(iter_documents("hf:stanfordnlp/imdb", max_documents=2))
    message = str(caught.value)
    assert "\n" not in message and "hf:stanfordnlp/imdb" in message and ".jsonl" in message
