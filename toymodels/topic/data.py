"""LDA documents with disjoint topics and BERT-style masking (Li, Li & Risteski 2023, synthetic setting).

Vocabulary: ``n_topics * words_per_topic`` words, word ``w`` belongs to topic
``w // words_per_topic``, then the special tokens ``[MASK]`` and ``[PAD]``. A document of length
``N ~ Uniform{min_len..max_len}`` draws a topic mixture ``theta ~ Dirichlet(alpha * 1_T)`` and
each word as ``topic ~ theta``, ``word ~ Uniform(words of that topic)``.

Masking: every real (non-pad) position is *selected* with probability ``p_select``; a selected
position becomes ``[MASK]`` with probability ``frac_mask``, a uniformly random word with
``frac_random`` and stays unchanged with ``frac_keep``. The loss is on selected positions only.

Example::

    config = LDAConfig()
    docs = sample_documents(config, 1000, torch.Generator().manual_seed(0))
    masked = mask_documents(docs, MaskingConfig(), torch.Generator().manual_seed(1))
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mechprobe.validation import integer
from toymodels.errors import ToyConfigError


@dataclass(frozen=True)
class LDAConfig:
    """Topic model of the documents. The paper uses T = 10, v = 10, alpha = 0.1, N in 100..150.

    ``d_vocab`` (optional) is the size of the model vocabulary the words must fit into together
    with ``[MASK]`` and ``[PAD]``; by default it is exactly ``n_words + 2``.
    """

    n_topics: int = 10
    words_per_topic: int = 10
    alpha: float = 0.1
    min_len: int = 100
    max_len: int = 150
    d_vocab: int | None = None

    def __post_init__(self) -> None:
        integer("n_topics", self.n_topics, error=ToyConfigError)
        integer("words_per_topic", self.words_per_topic, error=ToyConfigError)
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not (
            math.isfinite(self.alpha) and self.alpha > 0
        ):
            raise ToyConfigError(
                f"alpha (the Dirichlet concentration) must be a finite number > 0; got {self.alpha!r}. "
                f"The paper uses alpha = 0.1."
            )
        integer("min_len", self.min_len, 2, error=ToyConfigError)
        integer("max_len", self.max_len, 2, error=ToyConfigError)
        if self.min_len > self.max_len:
            raise ToyConfigError(
                f"min_len ({self.min_len}) must be <= max_len ({self.max_len}); swap or equalise them."
            )
        if self.d_vocab is not None:
            integer("d_vocab", self.d_vocab, error=ToyConfigError)
            if self.n_words + 2 > self.d_vocab:
                raise ToyConfigError(
                    f"n_topics * words_per_topic + 2 special tokens = {self.n_words + 2} does not fit "
                    f"into a vocabulary of d_vocab = {self.d_vocab}; lower n_topics or "
                    f"words_per_topic, or raise d_vocab."
                )

    @property
    def n_words(self) -> int:
        """Number of topic words (ids ``0 .. n_words - 1``)."""
        return self.n_topics * self.words_per_topic

    @property
    def mask_id(self) -> int:
        return self.n_words

    @property
    def pad_id(self) -> int:
        return self.n_words + 1

    @property
    def vocab_size(self) -> int:
        """Model vocabulary size: words, ``[MASK]``, ``[PAD]`` (or ``d_vocab`` when given)."""
        return self.d_vocab if self.d_vocab is not None else self.n_words + 2

    def token_topics(self) -> Int[Tensor, " d_vocab"]:
        """Topic of every token id; -1 for ``[MASK]``, ``[PAD]`` and unused ids."""
        topics = torch.full((self.vocab_size,), -1, dtype=torch.long)
        topics[: self.n_words] = torch.arange(self.n_words) // self.words_per_topic
        return topics


@dataclass(frozen=True)
class MaskingConfig:
    """BERT-style masking (paper: p_select = 0.15, then 80% [MASK], 10% random, 10% unchanged)."""

    p_select: float = 0.15
    frac_mask: float = 0.8
    frac_random: float = 0.1
    frac_keep: float = 0.1

    def __post_init__(self) -> None:
        for name in ("p_select", "frac_mask", "frac_random", "frac_keep"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ToyConfigError(f"{name} must be a probability in [0, 1]; got {value!r}.")
        if self.p_select == 0:
            raise ToyConfigError("p_select must be > 0, otherwise no position carries a loss; the paper uses 0.15.")
        total = self.frac_mask + self.frac_random + self.frac_keep
        if not math.isclose(total, 1.0, abs_tol=1e-9):
            raise ToyConfigError(
                f"frac_mask + frac_random + frac_keep must sum to 1; got {self.frac_mask} + "
                f"{self.frac_random} + {self.frac_keep} = {total}. The paper uses 0.8 + 0.1 + 0.1."
            )


@dataclass(frozen=True)
class Documents:
    """A batch of documents padded with ``[PAD]`` to the longest one.

    ``word_topics[b, p]`` is the topic the word at ``(b, p)`` was drawn from (-1 at padding) and
    ``theta[b]`` the document's topic mixture.
    """

    tokens: Int[Tensor, "batch pos"]
    lengths: Int[Tensor, " batch"]
    theta: Tensor
    word_topics: Int[Tensor, "batch pos"]

    @property
    def is_word(self) -> Bool[Tensor, "batch pos"]:
        """True at real (non-pad) positions."""
        return self.word_topics >= 0


def sample_documents(config: LDAConfig, n_documents: int, generator: torch.Generator, *,
                     length: int | None = None) -> Documents:
    """``n_documents`` LDA documents; ``length`` fixes every length (no padding) instead of sampling it.

    Vectorised: tens of thousands of documents per second on one core.
    """
    integer("n_documents", n_documents, error=ToyConfigError)
    if length is not None:
        integer("length", length, 2, error=ToyConfigError)
        lengths = torch.full((n_documents,), length, dtype=torch.long)
    else:
        lengths = torch.randint(config.min_len, config.max_len + 1, (n_documents,), generator=generator)
    n_pos = int(lengths.max())
    # Dirichlet as normalised Gamma draws; torch's Gamma/Dirichlet samplers take no generator.
    gamma = _gamma(float(config.alpha), (n_documents, config.n_topics), generator)
    theta = gamma / gamma.sum(-1, keepdim=True)
    topics = torch.multinomial(theta, n_pos, replacement=True, generator=generator)
    offsets = torch.randint(0, config.words_per_topic, (n_documents, n_pos), generator=generator)
    tokens = topics * config.words_per_topic + offsets
    is_word = torch.arange(n_pos)[None, :] < lengths[:, None]
    tokens = tokens.masked_fill(~is_word, config.pad_id)
    word_topics = topics.masked_fill(~is_word, -1)
    return Documents(tokens=tokens, lengths=lengths, theta=theta, word_topics=word_topics)


def _gamma(alpha: float, shape: tuple[int, int], generator: torch.Generator) -> Tensor:
    """Gamma(alpha, 1) draws from ``generator`` (Marsaglia-Tsang, with the alpha < 1 boost)."""
    boost = alpha < 1.0
    a = alpha + 1.0 if boost else alpha
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = torch.empty(shape, dtype=torch.float64)
    todo = torch.ones(shape, dtype=torch.bool)
    while bool(todo.any()):
        n = int(todo.sum())
        x = torch.randn(n, generator=generator, dtype=torch.float64)
        u = torch.rand(n, generator=generator, dtype=torch.float64)
        v = (1.0 + c * x) ** 3
        ok = (v > 0) & (torch.log(u.clamp_min(1e-300)) < 0.5 * x**2 + d - d * v + d * torch.log(v.clamp_min(1e-300)))
        idx = todo.nonzero(as_tuple=True)
        accepted = tuple(i[ok] for i in idx)
        out[accepted] = (d * v)[ok]
        todo[accepted] = False
    if boost:
        u = torch.rand(shape, generator=generator, dtype=torch.float64).clamp_min(1e-300)
        out = out * u ** (1.0 / alpha)
    return out.clamp_min(1e-300).float()


@dataclass(frozen=True)
class MaskedDocuments:
    """Model inputs after masking; ``targets`` are the original tokens, scored where ``selected``."""

    inputs: Int[Tensor, "batch pos"]
    targets: Int[Tensor, "batch pos"]
    selected: Bool[Tensor, "batch pos"]
    is_word: Bool[Tensor, "batch pos"]

    def to(self, device: str | torch.device) -> MaskedDocuments:
        """The same documents with every tensor on ``device``."""
        return MaskedDocuments(*(getattr(self, f.name).to(device) for f in fields(self)))


def mask_documents(documents: Documents, config: MaskingConfig, generator: torch.Generator, *,
                   lda: LDAConfig) -> MaskedDocuments:
    """Select positions with ``p_select`` and replace them by ``[MASK]`` / a random word / themselves."""
    tokens, is_word = documents.tokens, documents.is_word
    selected = (torch.rand(tokens.shape, generator=generator) < config.p_select) & is_word
    kind = torch.rand(tokens.shape, generator=generator)
    random_words = torch.randint(0, lda.n_words, tokens.shape, generator=generator)
    to_mask = selected & (kind < config.frac_mask)
    to_random = selected & (kind >= config.frac_mask) & (kind < config.frac_mask + config.frac_random)
    inputs = torch.where(to_mask, torch.full_like(tokens, lda.mask_id), tokens)
    inputs = torch.where(to_random, random_words, inputs)
    return MaskedDocuments(inputs=inputs, targets=tokens, selected=selected, is_word=is_word)
