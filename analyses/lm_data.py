"""Training rows for ``mechprobe train-lm``: a corpus tokenized by SmolLM2's tokenizer, its vocabulary cut to the most
frequent tokens, random windows of it, and in a fraction of them a span of the first half repeated later.

- Tokens: every document of the corpus (:func:`probes.text.corpora.iter_documents`) tokenized by the packaged
  SmolLM2 tokenizer and joined with its EOS token into one stream.
- Vocabulary: the ``vocab - 1`` most frequent token ids of the stream become ids ``0 .. vocab - 2`` (most
  frequent first); every other token becomes ``vocab - 1`` (``OTHER``).
- Rows: windows of ``seq_len`` tokens starting at uniformly drawn positions of the stream.
- Repeats: in each row, with probability ``repeat``, the ``span`` tokens starting at a uniform position of the first
  half (the span inside it) are copied to a uniform position of the second half: duplicated passages as web text
  has them, and exactly what an induction head predicts.

Example: ``rows = LmData.from_corpus("wikipedia-excerpt", vocab=2000).rows(32, 128, repeat=1.0, span=24,
generator=g)``.

A trained model reads text through :class:`CutVocabTokenizer` (SmolLM2's tokenizer, then the cut), which
:func:`analyses.toy_model_loader.load_toy_model` attaches to every ``train-lm`` checkpoint, so the text probes
(in-context loss, topic attention, co-occurrence ordering) run on it as on any pretrained model.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jaxtyping import Int
from torch import Tensor

from probes.core.errors import InputError
from probes.core.loading import PACKAGED_MODELS, cache_dir
from probes.text.corpora import iter_documents

VOCAB_FILE = "vocab.json"
"""A train-lm series' cut vocabulary: ``{"smollm2_ids": [...], "other": OTHER}`` (model id ``i`` is SmolLM2 id
``smollm2_ids[i]``; every other SmolLM2 id is ``OTHER``)."""


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer() -> Any:
    """SmolLM2's tokenizer: from the converted model in the mechprobe cache when there, else the packaged GGUF
    (loaded once per process: a few seconds; treat it as read-only)."""
    from transformers import AutoTokenizer

    entry = PACKAGED_MODELS["smollm2-135m"]
    converted = cache_dir() / "models" / entry.short_name
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    spec = importlib.util.find_spec(entry.package)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(f"train-lm tokenizes with SmolLM2's tokenizer, which ships in {entry.package!r}; install it "
                         f"with: {entry.install}")
    return AutoTokenizer.from_pretrained(next(iter(spec.submodule_search_locations)), gguf_file=entry.gguf_file)


@dataclass(frozen=True)
class LmData:
    """A corpus as one stream of ids in the cut vocabulary, and the SmolLM2 ids those stand for."""

    stream: Int[Tensor, " token"]
    kept_ids: tuple[int, ...]
    corpus: str

    @property
    def vocab(self) -> int:
        """The model's vocabulary: the kept tokens and ``OTHER``."""
        return len(self.kept_ids) + 1

    @classmethod
    def from_corpus(cls, corpus: str, *, vocab: int, max_documents: int | None = None) -> LmData:
        """Tokenize ``corpus`` and cut the vocabulary to ``vocab`` ids (module docstring)."""
        tokenizer = smollm2_tokenizer()
        eos = int(tokenizer.eos_token_id)
        pieces: list[int] = []
        for document in iter_documents(corpus, unit="article", max_documents=max_documents):
            pieces.extend(tokenizer(document.text, add_special_tokens=False)["input_ids"])
            pieces.append(eos)
        raw = torch.tensor(pieces, dtype=torch.long)
        counts = torch.bincount(raw)
        kept = counts.argsort(descending=True, stable=True)[: vocab - 1]
        kept = kept[counts[kept] > 0]
        mapping = torch.full((counts.shape[0],), len(kept), dtype=torch.long)
        mapping[kept] = torch.arange(len(kept))
        return cls(mapping[raw], tuple(int(i) for i in kept), str(corpus))

    def check_rows(self, seq_len: int) -> None:
        """Refuse a corpus too short for one row of ``seq_len`` tokens (before any run writes anything)."""
        if self.stream.shape[0] <= seq_len:
            raise InputError(f"The corpus {self.corpus!r} has {self.stream.shape[0]} tokens, fewer than one row of "
                             f"{seq_len}; give a larger corpus or a smaller seq_len.")

    def rows(self, n_rows: int, seq_len: int, *, repeat: float, span: int, generator: torch.Generator
             ) -> Int[Tensor, "batch pos"]:
        """``n_rows`` random windows of ``seq_len`` tokens, a ``repeat`` fraction with a repeated span."""
        self.check_rows(seq_len)
        starts = torch.randint(0, self.stream.shape[0] - seq_len, (n_rows,), generator=generator)
        rows = self.stream[starts[:, None] + torch.arange(seq_len)]
        repeated = torch.rand(n_rows, generator=generator) < repeat
        half = seq_len // 2
        sources = torch.randint(0, half - span + 1, (n_rows,), generator=generator)
        targets = torch.randint(half, seq_len - span + 1, (n_rows,), generator=generator)
        for row in repeated.nonzero().flatten().tolist():
            source, target = int(sources[row]), int(targets[row])
            rows[row, target : target + span] = rows[row, source : source + span].clone()
        return rows


class CutVocabTokenizer:
    """The text reader of a ``train-lm`` model: SmolLM2's tokenizer, then each id mapped into the cut vocabulary
    (``OTHER`` for the tokens cut). The model was trained on a stream with no BOS and no special positions, so
    the tokenizer names none (``bos_token_id``, ``pad_token_id`` ... None, ``all_special_ids`` empty: the probes
    then frame and mask text as for the training rows); ``unk_token_id`` is ``OTHER``, which carries no word (no
    topic label). Implements the part of the Hugging Face tokenizer interface the probes call.

    Example: ``CutVocabTokenizer.of_series("runs/lm").encode(" the cat", add_special_tokens=False)``.
    """

    bos_token_id = None
    cls_token_id = None
    sep_token_id = None
    pad_token_id = None
    all_special_ids: Sequence[int] = ()

    def __init__(self, kept_ids: Sequence[int]) -> None:
        self.kept_ids = tuple(int(i) for i in kept_ids)
        self.unk_token_id = len(self.kept_ids)
        self._cut = {smollm2: model for model, smollm2 in enumerate(self.kept_ids)}
        base = smollm2_tokenizer()
        self.eos_token_id = self._cut.get(int(base.eos_token_id), self.unk_token_id)
        self.name_or_path = f"{getattr(base, 'name_or_path', 'SmolLM2')} (cut to {len(self)} ids)"

    @classmethod
    def of_series(cls, folder: str | Path) -> CutVocabTokenizer:
        """The tokenizer of the train-lm series in ``folder`` (its ``vocab.json``, :func:`kept_ids`)."""
        return cls(kept_ids(folder))

    def __len__(self) -> int:
        return len(self.kept_ids) + 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = smollm2_tokenizer()(text, add_special_tokens=False)["input_ids"]
        return [self._cut.get(int(i), self.unk_token_id) for i in ids]

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def convert_ids_to_tokens(self, ids: int | Sequence[int]) -> str | list[str]:
        def one(i: int) -> str:
            if not 0 <= int(i) < len(self.kept_ids):
                return "<other>"
            return str(smollm2_tokenizer().convert_ids_to_tokens(self.kept_ids[int(i)]))

        return one(ids) if isinstance(ids, int) else [one(i) for i in ids]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("<other>" if not 0 <= int(i) < len(self.kept_ids) else
                       smollm2_tokenizer().decode([self.kept_ids[int(i)]]) for i in ids)


def kept_ids(folder: str | Path) -> list[int]:
    """The SmolLM2 ids the train-lm series in ``folder`` kept (its ``vocab.json``); a file that is not a list of
    ids there is one :class:`InputError` line naming it and how to write it again."""
    path = Path(folder) / VOCAB_FILE
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        kept = document["smollm2_ids"]
        if not isinstance(kept, list) or not all(type(i) is int and i >= 0 for i in kept):
            raise TypeError("smollm2_ids is not a list of ids")
        if len(set(kept)) != len(kept) or document.keys() != {"smollm2_ids", "other"} or document["other"] != len(
                kept):  # an id twice, or OTHER not the id after them: not a vocabulary train-lm wrote
            raise ValueError("its ids repeat, or 'other' is not their count, or it holds other keys")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise InputError(f"{path} does not hold a train-lm vocabulary ({type(error).__name__}: {error}); run the "
                         f"same mechprobe train-lm command (--out {folder}) again: it writes the vocabulary again "
                         f"from its corpus.") from None
    return kept
