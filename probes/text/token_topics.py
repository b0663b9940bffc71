"""Which vocabulary ids of a model carry each topic word: :func:`token_topic_labels` and its :class:`TokenTopicMap`.

BPE leading-space and capitalised variants, WordPiece lower case; words that are not a single token
are reported, not guessed. The word -> topic assignment comes from :mod:`probes.text.topics`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from jaxtyping import Int
from torch import Tensor

from mechprobe.validation import is_integer
from probes.core.errors import InputError


@dataclass(frozen=True)
class TokenTopicMap:
    """``labels[token id]`` = topic of that vocabulary entry, -1 when it carries no (or an ambiguous) topic."""

    labels: Int[Tensor, " d_vocab"]
    n_words: int
    n_words_mapped: int
    n_multi_token_words: int
    n_conflicting_tokens: int

    @property
    def coverage(self) -> float:
        """Fraction of topic words that landed on at least one single token."""
        return self.n_words_mapped / self.n_words if self.n_words else 0.0


def word_variants(word: str) -> list[str]:
    """Surface forms whose single token carries the word: bare, leading space, capitalised."""
    forms = [word, " " + word, word.capitalize(), " " + word.capitalize()]
    return list(dict.fromkeys(forms))


def token_topic_labels(word_topics: Mapping[str, int], tokenizer: Any, d_vocab: int) -> TokenTopicMap:
    """Label the vocabulary ids of ``tokenizer`` with the topics of the words they spell.

    A word contributes each variant (see :func:`word_variants`) that encodes to exactly one token other than
    the tokenizer's ``unk_token_id`` (an unknown token spells no word). A token claimed by words of different
    topics is marked -1 (ambiguous). Words with no single-token variant are counted in ``n_multi_token_words``
    and left out.
    """
    if not isinstance(word_topics, Mapping):
        raise InputError(
            f"word_topics must map word -> topic (e.g. assign_word_topics(...)); got {type(word_topics).__name__}."
        )
    if not word_topics:
        raise InputError(
            "The word -> topic assignment is empty. From assign_word_topics: with the default top_words rule a "
            "word must be among the top_words_per_topic words of exactly one topic, so on a small corpus (few "
            "dictionary words) use fewer topics or top words, chunk_words=0 or a lower no_below; topics below "
            "min_held_out_npmi get no words (lower it, or held_out_fraction=0); with the threshold rule, lower "
            "threshold."
        )
    bad = next(((w, t) for w, t in word_topics.items()
                if not isinstance(w, str) or isinstance(t, bool) or not isinstance(t, (int, np.integer)) or t < 0),
               None)
    if bad is not None:
        raise InputError(f"word_topics must map str words to topic ids >= 0; got {bad[0]!r} -> {bad[1]!r}.")
    if not callable(getattr(tokenizer, "encode", None)):
        raise InputError(
            f"tokenizer must have encode(text, add_special_tokens=False) (a Hugging Face tokenizer such as "
            f"model.tokenizer); got {type(tokenizer).__name__}."
        )
    if not is_integer(d_vocab) or d_vocab < 1:
        raise InputError(f"d_vocab must be a positive integer (the model's vocabulary size); got {d_vocab!r}.")
    labels = torch.full((d_vocab,), -1, dtype=torch.long)
    unknown = getattr(tokenizer, "unk_token_id", None)
    owner: dict[int, int] = {}
    conflicts: set[int] = set()
    mapped = multi = 0
    for word, topic in word_topics.items():
        hit = False
        for form in word_variants(word):
            ids = tokenizer.encode(form, add_special_tokens=False)
            if len(ids) != 1 or not 0 <= ids[0] < d_vocab or ids[0] == unknown:
                continue
            hit = True
            token = ids[0]
            if owner.setdefault(token, topic) != topic:
                conflicts.add(token)
        mapped += hit
        multi += not hit
    for token, topic in owner.items():
        labels[token] = -1 if token in conflicts else topic
    if not (labels >= 0).any():
        raise InputError(
            "None of the topic words is a single token of this model's vocabulary; the topic probes "
            "would have nothing to measure. Use more topics/words or a model with a word-level vocabulary."
        )
    return TokenTopicMap(labels, len(word_topics), mapped, multi, len(conflicts))
