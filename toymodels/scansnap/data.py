"""Scan and Snap's co-occurrence data (Tian, Wang, Chen & Du, NeurIPS 2023).

A *fact* is a pair (last token ``m``, next token ``n``). Each next token ``n`` owns
``num_distinct`` distinct context tokens with unnormalised weights ``linspace(0.1, 1.0,
num_distinct)``; ``num_common`` common tokens, shared by every class, have weight 1 each. The
context distribution of fact ``(m, n)`` is these weights normalised, ``P(l | m, n) = P(l | n)``.
A sequence is ``seq_len - 1`` context tokens drawn i.i.d. with replacement, then ``m``; its label
is ``n``. There is no positional information anywhere.

Vocabulary layout (one shared id space, inputs and labels)::

    [0, C)                       common tokens
    [C, C + N * D)               distinct tokens, block j (D ids) belongs to next token j
    [C + N * D, ... + M)         last tokens m = 0..M-1
    [C + N * D + M, ... + N)     next tokens n = 0..N-1   (N = M * num_next_per_last)

Fact ``f`` has last token ``f // num_next_per_last`` and next token ``f``. The paper's main run
(2 facts, 10 common, 10 distinct, L = 128) has a vocabulary of 34.

Example::

    data = CooccurrenceData(CooccurrenceConfig())
    tokens, labels, facts = data.sample(128, torch.Generator().manual_seed(0))
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Int
from torch import Tensor

from mechprobe.validation import integer, is_integer
from toymodels.errors import ToyConfigError

DISTINCT_WEIGHT_RANGE = (0.1, 1.0)


@dataclass(frozen=True)
class CooccurrenceConfig:
    """Sizes of the co-occurrence task (the defaults are the paper's main run)."""

    num_last: int = 2
    num_next_per_last: int = 1
    num_common: int = 10
    num_distinct: int = 10
    seq_len: int = 128

    def __post_init__(self) -> None:
        for name, low in (("num_last", 1), ("num_next_per_last", 1), ("num_common", 0), ("num_distinct", 1),
                          ("seq_len", 2)):
            value = getattr(self, name)
            if not is_integer(value) or value < low:
                raise ToyConfigError(
                    f"CooccurrenceConfig.{name} must be an integer >= {low}; got {value!r}."
                    + (" A sequence needs at least one context token before the query." if name == "seq_len" else "")
                )

    @property
    def num_next(self) -> int:
        """Number of next tokens (= number of facts)."""
        return self.num_last * self.num_next_per_last

    @property
    def d_vocab(self) -> int:
        return self.num_common + self.num_next * self.num_distinct + self.num_last + self.num_next


class CooccurrenceData:
    """The vocabulary, the facts and their context distributions; samples batches vectorised."""

    def __init__(self, config: CooccurrenceConfig) -> None:
        if not isinstance(config, CooccurrenceConfig):
            raise ToyConfigError(f"CooccurrenceData needs a CooccurrenceConfig; got {type(config).__name__}.")
        self.config = config
        c, d, n_next = config.num_common, config.num_distinct, config.num_next
        self.common_tokens: Int[Tensor, " common"] = torch.arange(c)
        self.distinct_tokens: Int[Tensor, "next distinct"] = c + torch.arange(n_next * d).reshape(n_next, d)
        first_last = c + n_next * d
        self.last_tokens: Int[Tensor, " last"] = first_last + torch.arange(config.num_last)
        self.next_tokens: Int[Tensor, " next"] = first_last + config.num_last + torch.arange(n_next)
        self.fact_last: Int[Tensor, " fact"] = self.last_tokens[torch.arange(n_next) // config.num_next_per_last]
        self.fact_next: Int[Tensor, " fact"] = self.next_tokens
        weights = torch.zeros(n_next, config.d_vocab, dtype=torch.float64)
        weights[:, :c] = 1.0
        ramp = torch.linspace(*DISTINCT_WEIGHT_RANGE, d, dtype=torch.float64)
        weights.scatter_(1, self.distinct_tokens, ramp.expand(n_next, d).contiguous())
        self.context_probs: Float[Tensor, "fact d_vocab"] = weights / weights.sum(-1, keepdim=True)

    @property
    def n_facts(self) -> int:
        return self.config.num_next

    @property
    def d_vocab(self) -> int:
        return self.config.d_vocab

    def cooccurrence_with_last(self) -> Float[Tensor, "last d_vocab"]:
        """``P(l | m)``: the context distribution of query ``m`` averaged over its (equally likely) facts."""
        k = self.config.num_next_per_last
        return self.context_probs.reshape(self.config.num_last, k, -1).mean(1)

    def support(self, fact: int) -> Int[Tensor, " support"]:
        """The context tokens fact ``fact`` can draw: the common tokens, then its distinct tokens."""
        return torch.cat([self.common_tokens, self.distinct_tokens[fact]])

    def sample(
        self, batch_size: int, generator: torch.Generator, *, fact: int | None = None
    ) -> tuple[Int[Tensor, "batch pos"], Int[Tensor, " batch"], Int[Tensor, " batch"]]:
        """``batch_size`` sequences ``(tokens, labels, facts)``; facts uniform, or all ``fact`` when given."""
        integer("batch_size", batch_size, 1, error=ToyConfigError)
        if fact is None:
            facts = torch.randint(self.n_facts, (batch_size,), generator=generator)
        elif is_integer(fact) and 0 <= fact < self.n_facts:
            facts = torch.full((batch_size,), fact, dtype=torch.long)
        else:
            raise ToyConfigError(f"fact must be an integer in [0, {self.n_facts}); got {fact!r}.")
        context = torch.multinomial(
            self.context_probs[facts].float(), self.config.seq_len - 1, replacement=True, generator=generator
        )
        tokens = torch.cat([context, self.fact_last[facts, None]], dim=1)
        return tokens, self.fact_next[facts], facts
