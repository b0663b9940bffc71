"""Real text corpora as streams of documents (articles or paragraphs), model-agnostic.

Specs accepted by :func:`iter_documents`:

- ``"wikipedia-excerpt"`` (the offline default): the real English Wikipedia excerpt that ships in
  gensim's test data (~100 articles, ~3 M characters after markup removal);
- ``"wikitext-2"`` / ``"wikitext-103"``: WikiText raw from the Hugging Face hub
  (``Salesforce/wikitext``), streamed, needs network; ``"wikitext-2:validation"`` picks a split;
- ``"hf:NAME[:CONFIG][:SPLIT]"``: any Hugging Face dataset, streamed (``load_dataset(NAME, CONFIG,
  split=SPLIT, streaming=True)``, split ``train`` unless named), one row a document, its text in
  ``text_column`` (default ``text``); needs network or the local datasets cache;
- a local file: WikiText ``.raw``/``.tokens`` files are split at their `` = Title = `` headings;
  ``.jsonl`` (one JSON object a line) and ``.parquet`` files give one document a row, read from
  ``text_column``; other text files are split at blank lines; or a folder of ``.txt`` files (one
  article per file);
- a ``datasets.Dataset`` / ``IterableDataset`` with a ``text`` column (one row per WikiText line).

Documents with blank lines inside are split into paragraphs when ``unit="paragraph"``.

Documents are yielded one at a time; nothing holds a whole corpus in memory but the packaged Wikipedia excerpt's
articles (3 MB of text), kept once parsed (:class:`ParsedExcerpt`).
"""

from __future__ import annotations

import bz2
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from mechprobe.validation import is_integer
from probes.core.errors import InputError

WIKIPEDIA_EXCERPT = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKITEXT_CONFIGS = {"wikitext-2": "wikitext-2-raw-v1", "wikitext-103": "wikitext-103-raw-v1"}
_HEADING = re.compile(r"^\s*(=+)\s*(.*?)\s*\1\s*$")
_MARKUP = re.compile(r"'{2,}|^[*#:;]+\s*", re.MULTILINE)
Unit = Literal["article", "paragraph"]


@dataclass(frozen=True)
class Document:
    """One article or paragraph: ``source`` names the corpus, ``title`` the article it came from."""

    text: str
    title: str
    source: str


def corpus_digest(documents: Iterable[Document]) -> str:
    """SHA-256 of the documents' texts in order (each length-prefixed), so a result names its exact corpus."""
    digest = hashlib.sha256()
    for document in documents:
        text = document.text.encode("utf-8")
        digest.update(len(text).to_bytes(8, "little"))
        digest.update(text)
    return digest.hexdigest()


def _check_unit(unit: str) -> None:
    if unit not in ("article", "paragraph"):
        raise InputError(f"unit must be 'article' or 'paragraph'; got {unit!r}.")


def _emit(title: str, paragraphs: Sequence[str], source: str, unit: Unit, min_chars: int) -> Iterator[Document]:
    if unit == "article":
        text = "\n\n".join(paragraphs)
        if len(text) >= min_chars:
            yield Document(text, title, source)
        return
    for paragraph in paragraphs:
        if len(paragraph) >= min_chars:
            yield Document(paragraph, title, source)


def wikitext_heading(line: str) -> tuple[int, str] | None:
    """``(level, title)`` of a WikiText heading line (`` = Title = `` is level 1, `` = = Sub = = `` 2)."""
    parts = line.split()
    level = 0
    while level < len(parts) // 2 and parts[level] == "=" and parts[-1 - level] == "=":
        level += 1
    if level == 0:
        return None
    return level, " ".join(parts[level : len(parts) - level])


def wikitext_documents(lines: Iterable[str], source: str, unit: Unit = "paragraph",
                       min_chars: int = 1) -> Iterator[Document]:
    """Group WikiText lines into articles at top-level `` = Title = `` headings.

    Sub-headings (`` = = Sub = = ``) are dropped; each non-empty other line is one paragraph.
    """
    title = ""
    paragraphs: list[str] = []
    for line in lines:
        heading = wikitext_heading(line)
        if heading:
            if heading[0] == 1:
                yield from _emit(title, paragraphs, source, unit, min_chars)
                title, paragraphs = heading[1], []
            continue
        text = line.strip()
        if text:
            paragraphs.append(text)
    yield from _emit(title, paragraphs, source, unit, min_chars)


def _clean_wiki_markup(text: str) -> list[str]:
    paragraphs = []
    for block in re.split(r"\n\s*\n", text):
        lines = [ln for ln in block.splitlines() if ln.strip() and not _HEADING.match(ln)]
        paragraph = _MARKUP.sub("", " ".join(ln.strip() for ln in lines)).strip()
        if paragraph and not paragraph.startswith(("|", "{", "!")):
            paragraphs.append(re.sub(r"\s+", " ", paragraph))
    return paragraphs


class ParsedExcerpt:
    """The articles of the packaged Wikipedia excerpt (title, paragraphs with markup removed), parsed once per process
    and only as far as a reader went: the file ships with gensim and never changes, and parsing all of it costs about
    4 s, so a process that reads it again (an analysis script, a notebook, the test suite) reads the articles parsed
    before and parses only those no reader reached yet. Readers may interleave; a parse that fails is forgotten, so
    the next reader meets the same error instead of a shorter corpus; a forked process starts its own parse (an open
    file's position is shared with the parent)."""

    _by_path: ClassVar[dict[str, ParsedExcerpt]] = {}
    _lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path
        self.pid = os.getpid()
        self.articles: list[tuple[str, tuple[str, ...]]] = []
        self._rest = self._parse()

    @classmethod
    def of(cls, path: str) -> ParsedExcerpt:
        with cls._lock:
            found = cls._by_path.get(path)
            if found is None or found.pid != os.getpid():
                found = cls._by_path[path] = cls(path)
            return found

    def _parse(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        from gensim.corpora.wikicorpus import extract_pages, filter_wiki

        with bz2.open(self.path, "rb") as handle:
            for title, text, _ in extract_pages(handle, filter_namespaces=("0",)):
                if not text.lstrip().upper().startswith("#REDIRECT"):
                    yield title, tuple(_clean_wiki_markup(filter_wiki(text)))

    def __iter__(self) -> Iterator[tuple[str, tuple[str, ...]]]:
        index = 0
        while True:
            with self._lock:
                if index == len(self.articles):
                    try:
                        article = next(self._rest, None)
                    except BaseException:
                        self._by_path.pop(self.path, None)
                        raise
                    if article is None:
                        return
                    self.articles.append(article)
                article = self.articles[index]
            yield article
            index += 1


def wikipedia_excerpt_documents(unit: Unit = "paragraph", min_chars: int = 1) -> Iterator[Document]:
    """The real Wikipedia excerpt bundled with gensim, markup removed, redirects skipped (parsed once per process:
    :class:`ParsedExcerpt`)."""
    from gensim.test.utils import datapath

    path = datapath(WIKIPEDIA_EXCERPT)
    if not os.path.isfile(path):
        raise InputError(
            f"gensim's bundled Wikipedia excerpt is missing ({path}); reinstall gensim "
            f"(pip install --force-reinstall gensim)."
        )
    for title, paragraphs in ParsedExcerpt.of(path):
        yield from _emit(title, paragraphs, "wikipedia-excerpt", unit, min_chars)


def _read_lines(path: Path) -> Iterator[str]:
    try:
        with path.open("r", encoding="utf-8", errors="strict") as handle:
            for line in handle:
                if "\x00" in line:
                    raise InputError(f"{path} looks binary (it contains NUL bytes); give a UTF-8 text file.")
                yield line
    except UnicodeDecodeError as error:
        raise InputError(
            f"{path} is not UTF-8 text ({error.reason} at byte {error.start}); convert it with "
            f"iconv -t UTF-8 or give another file."
        ) from None


def local_documents(path: Path, unit: Unit = "paragraph", min_chars: int = 1,
                    text_column: str = "text") -> Iterator[Document]:
    """Documents from a local file (text, WikiText, ``.jsonl``, ``.parquet``) or a folder of ``.txt`` files."""
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise InputError(f"The folder {path} holds no .txt files; put the corpus there as UTF-8 .txt files.")
        for file in files:
            paragraphs = [p.strip() for p in re.split(r"\n\s*\n", "".join(_read_lines(file))) if p.strip()]
            yield from _emit(file.stem, [re.sub(r"\s+", " ", p) for p in paragraphs], str(path), unit, min_chars)
        return
    if path.suffix == ".jsonl":
        yield from _row_documents(jsonl_rows(path, text_column), str(path), unit, min_chars, text_column)
        return
    if path.suffix == ".parquet":
        yield from _row_documents(parquet_rows(path, text_column), str(path), unit, min_chars, text_column)
        return
    if path.suffix in (".raw", ".tokens") or path.name.startswith("wiki."):
        yield from wikitext_documents(_read_lines(path), str(path), unit, min_chars)
        return
    paragraphs, buffer = [], []
    for line in _read_lines(path):
        if line.strip():
            buffer.append(line.strip())
        elif buffer:
            paragraphs.append(" ".join(buffer))
            buffer = []
    if buffer:
        paragraphs.append(" ".join(buffer))
    yield from _emit(path.stem, paragraphs, str(path), unit, min_chars)


def _row_documents(texts: Iterable[tuple[str, Any]], source: str, unit: Unit, min_chars: int,
                   text_column: str) -> Iterator[Document]:
    """One document a row: ``texts`` yields ``(title, value of text_column)``; paragraphs at blank lines."""
    for title, value in texts:
        if value is None:
            continue
        if not isinstance(value, str):
            raise InputError(
                f"{source}: column {text_column!r} holds {type(value).__name__} values, not text; name the text "
                f"column (the text_column setting)."
            )
        paragraphs = [re.sub(r"\s+", " ", p).strip() for p in re.split(r"\n\s*\n", value)]
        yield from _emit(title, [p for p in paragraphs if p], source, unit, min_chars)


def _missing_column(source: str, text_column: str, columns: Iterable[str]) -> InputError:
    return InputError(
        f"{source} has no column {text_column!r} (columns: {', '.join(map(str, columns)) or 'none'}); name the "
        f"text column (the text_column setting)."
    )


def jsonl_rows(path: Path, text_column: str) -> Iterator[tuple[str, Any]]:
    """``(title, text)`` per line of a JSON-lines file; blank lines are skipped."""
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{number} is not JSON ({error.msg}); each line of a .jsonl file is one object.") \
                from None
        if not isinstance(row, dict):
            raise InputError(f"{path}:{number} is a JSON {type(row).__name__}, not an object with a {text_column!r} "
                             f"key.")
        if text_column not in row:
            raise _missing_column(f"{path}:{number}", text_column, row)
        yield f"{path.stem} line {number}", row[text_column]


def parquet_rows(path: Path, text_column: str) -> Iterator[tuple[str, Any]]:
    """``(title, text)`` per row of a Parquet file, read one record batch at a time."""
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except Exception as error:  # pyarrow raises ArrowInvalid, OSError, ... for damaged files
        raise InputError(f"{path} is not a readable Parquet file ({type(error).__name__}: {error}).") from None
    names = handle.schema_arrow.names
    if text_column not in names:
        raise _missing_column(str(path), text_column, names)
    row = 0
    for batch in handle.iter_batches(columns=[text_column], batch_size=1024):
        for value in batch.column(0).to_pylist():
            yield f"{path.stem} row {row}", value
            row += 1


def parse_hub_spec(spec: str) -> tuple[str, str | None, str]:
    """``"hf:NAME[:CONFIG][:SPLIT]"`` as ``(name, config or None, split)``; split defaults to ``train``."""
    parts = spec.split(":")[1:]
    if not 1 <= len(parts) <= 3 or not parts[0].strip() or any(not p.strip() for p in parts[1:]):
        raise InputError(
            f"{spec!r}: a hub corpus is hf:NAME, hf:NAME:CONFIG or hf:NAME:CONFIG:SPLIT, e.g. "
            f"hf:Salesforce/wikitext:wikitext-2-raw-v1:test."
        )
    name = parts[0]
    config = parts[1] if len(parts) > 1 else None
    split = parts[2] if len(parts) > 2 else "train"
    return name, config, split


def hub_rows(spec: str, text_column: str) -> Iterator[tuple[str, Any]]:
    """``(title, text)`` per row of a Hugging Face dataset, streamed (needs network or the datasets cache)."""
    from datasets import load_dataset

    name, config, split = parse_hub_spec(spec)
    try:
        dataset = load_dataset(name, config, split=split, streaming=True)
        columns = dataset.column_names
        if columns is not None and text_column not in columns:
            raise _missing_column(spec, text_column, columns)
        for number, row in enumerate(dataset):
            if text_column not in row:
                raise _missing_column(spec, text_column, row)
            yield f"{name} {split} row {number}", row[text_column]
    except InputError:
        raise
    except (ConnectionError, OSError) as error:
        raise InputError(
            f"Cannot stream {spec} from the Hugging Face hub ({type(error).__name__}): no network or HF_HUB_OFFLINE=1. "
            f"Run where the hub is reachable, download it once (datasets caches it), or export the text to a local "
            f".txt/.jsonl/.parquet file and pass its path."
        ) from None
    except ValueError as error:  # unknown config or split
        raise InputError(f"Cannot open {spec}: {error}") from None


def hub_wikitext_lines(name: str, split: str = "test") -> Iterator[str]:
    """Stream the lines of WikiText-2/103 raw from the Hugging Face hub (needs network)."""
    from datasets import load_dataset

    try:
        dataset = load_dataset("Salesforce/wikitext", WIKITEXT_CONFIGS[name], split=split, streaming=True)
        for row in dataset:
            yield row["text"]
    except (ConnectionError, OSError) as error:
        raise InputError(
            f"Cannot stream {name} from the Hugging Face hub ({type(error).__name__}). Without network, "
            f"give a local WikiText file as the corpus instead (e.g. path/to/wiki.test.raw) or use wikipedia-excerpt."
        ) from error


def check_corpus_spec(spec: Any, text_column: str = "text") -> None:
    """Raise :class:`InputError` unless ``spec`` names a corpus :func:`iter_documents` can open.

    Checks the name or path only (nothing is read), so a command can fail before slow work.
    Example: ``check_corpus_spec("wikipedia-excerpt")``.
    """
    if hasattr(spec, "column_names") or hasattr(spec, "features"):
        columns = getattr(spec, "column_names", None) or list(getattr(spec, "features", {}) or {})
        if "text" not in columns:
            raise InputError(f"The datasets dataset needs a 'text' column; it has {columns}. Rename the text column.")
        return
    if not isinstance(spec, (str, os.PathLike)):
        raise InputError(
            f"A corpus is a name, a path or a datasets dataset with a 'text' column; got {type(spec).__name__}."
        )
    text = os.fspath(spec)
    name = text.partition(":")[0]
    if not text.strip():
        raise InputError("The corpus spec is empty; give wikipedia-excerpt, wikitext-2[:split], a file or a folder.")
    if not isinstance(text_column, str) or not text_column.strip():
        raise InputError(f"text_column must name a column; got {text_column!r}.")
    if name == "hf" and not Path(text).exists():
        parse_hub_spec(text)
        return
    if text == "wikipedia-excerpt" or (name in WIKITEXT_CONFIGS and not Path(text).exists()):
        return
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(
            f"Unknown corpus {text!r}: not 'wikipedia-excerpt', 'wikitext-2[:split]', 'wikitext-103[:split]', "
            f"'hf:NAME[:CONFIG][:SPLIT]', nor an existing file or folder. Check the path."
        )
    if path.is_dir() and not any(p.is_file() for p in path.rglob("*.txt")):
        raise InputError(f"The folder {path} holds no .txt files; put the corpus there as UTF-8 .txt files.")
    if not path.is_dir() and not path.is_file():
        raise InputError(f"The corpus {path} is neither a regular file nor a folder; give a UTF-8 text file.")


def local_corpus_path(spec: str) -> Path | None:
    """The file or folder a corpus spec names (``~`` expanded; relative to the working folder when relative), or
    None for a named corpus (``wikipedia-excerpt``, ``wikitext-2[:split]``, ``hf:...``) that no path of that name
    shadows. Example: ``local_corpus_path("wikipedia-excerpt") is None``."""
    name = spec.partition(":")[0]
    if spec == "wikipedia-excerpt" or (name in ("hf", *WIKITEXT_CONFIGS) and not Path(spec).exists()):
        return None
    return Path(spec).expanduser()


def iter_documents(spec: Any = "wikipedia-excerpt", *, unit: Unit = "paragraph", min_chars: int = 1,
                   max_documents: int | None = None, text_column: str = "text") -> Iterator[Document]:
    """Stream the documents of a corpus spec (see the module docstring), at most ``max_documents``.

    ``text_column`` names the text of ``hf:`` datasets and ``.jsonl``/``.parquet`` files.

    Example: ``next(iter_documents("wikipedia-excerpt", unit="article")).title == "Anarchism"``.
    """
    _check_unit(unit)
    if not is_integer(min_chars) or min_chars < 0:
        raise InputError(f"min_chars must be an integer >= 0 (characters per document); got {min_chars!r}.")
    if max_documents is not None and (not is_integer(max_documents) or max_documents < 1):
        raise InputError(f"max_documents must be an integer >= 1 or None; got {max_documents!r}.")
    check_corpus_spec(spec, text_column)
    stream: Iterable[Document]
    if isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        name, _, split = text.partition(":")
        path = local_corpus_path(text)
        if path is not None:
            stream = local_documents(path, unit, min_chars, text_column)
        elif text == "wikipedia-excerpt":
            stream = wikipedia_excerpt_documents(unit, min_chars)
        elif name == "hf":
            stream = _row_documents(hub_rows(text, text_column), text, unit, min_chars, text_column)
        else:
            stream = wikitext_documents(hub_wikitext_lines(name, split or "test"), text, unit, min_chars)
    else:
        stream = wikitext_documents((row["text"] for row in spec), "datasets", unit, min_chars)
    count = 0
    for document in stream:
        yield document
        count += 1
        if max_documents is not None and count >= max_documents:
            return
    if count == 0:
        shorter = " or lower min_chars" if min_chars > 1 else ""  # below 1 nothing is gained: the text is empty
        raise InputError(
            f"The corpus {spec!r} holds no text: no {unit} of at least {min_chars} characters "
            f"(paragraphs are separated by blank lines). Give a larger UTF-8 text{shorter}."
        )
