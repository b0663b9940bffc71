"""The settings of ``mechprobe dynamics``: what is measured at each checkpoint and how events are judged."""

from __future__ import annotations

from dataclasses import dataclass, field

from mechprobe import validation
from probes.core.errors import ConfigError
from probes.text.topics import LdaTopicConfig


@dataclass(frozen=True)
class DynamicsConfig:
    """Settings of one dynamics run (validated on construction).

    - ``seq_len``, ``n_batches``, ``batch_size``: the ``[BOS] X X`` protocol batches (even batches choose the best
      heads, odd batches measure them and the losses, and are the bootstrap's units);
    - ``n_boot``, ``seed``: bootstrap draws and the seed of the tokens and the draws;
    - ``fraction``: an event is where a curve reaches this fraction of its way from the first checkpoint's value
      to the last's;
    - ``corpus``, ``text_seq_len``, ``text_batches``, ``early``, ``late``: natural text for ``context_loss_gain``
      (models with a tokenizer only; ``corpus=None`` skips it); ``early`` / ``late`` are ``[start, stop)``
      positions;
    - ``topic_batches``, ``n_permutations``, ``n_pair_tokens``, ``topics``: with a corpus, the report's text probes
      (same-topic attention, co-occurrence ordering; :mod:`analyses.dynamics.text_measure`) on that many batches
      of 8 paragraph rows, with that many shuffles of the topic and ordering nulls, that many tracked tokens, and
      the LDA settings of the topics.
    """

    seq_len: int = 40
    n_batches: int = 16
    batch_size: int = 8
    n_boot: int = 1000
    seed: int = 0
    fraction: float = 0.5
    corpus: str | None = None
    text_seq_len: int = 128
    text_batches: int = 8
    early: tuple[int, int] = (1, 11)
    late: tuple[int, int] = (100, 127)
    topic_batches: int = 16
    n_permutations: int = 200
    n_pair_tokens: int = 100
    topics: LdaTopicConfig = field(default_factory=LdaTopicConfig)

    def __post_init__(self) -> None:
        for name, low in (("seq_len", 2), ("n_batches", 4), ("batch_size", 1), ("n_boot", 10), ("text_seq_len", 4),
                          ("text_batches", 2), ("topic_batches", 4),
                          ("n_permutations", 1), ("n_pair_tokens", 3)):
            validation.integer(name, getattr(self, name), low)
        validation.seed("seed", self.seed)
        if self.n_batches % 2:
            raise ConfigError(f"n_batches must be even (half choose the heads, half measure them); got "
                              f"{self.n_batches}.")
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) or not 0 < self.fraction < 1:
            raise ConfigError(f"fraction must lie in (0, 1); got {self.fraction!r}.")
        for name in ("early", "late"):
            start, stop = getattr(self, name)
            if not 0 < start < stop <= self.text_seq_len:
                raise ConfigError(f"{name} must be positions [start, stop) with 0 < start < stop <= text_seq_len "
                                  f"({self.text_seq_len}); got {(start, stop)}.")
        if self.early[1] > self.late[0]:
            raise ConfigError(f"early {self.early} must end before late {self.late} starts.")
