"""Label makers for linear probes: what each residual-stream position should be decoded as.

A label maker is called once per batch with the batch and the global index of each of its rows
(the order in which the probe saw them) and returns, for each of its keys, a label per position
[batch pos] (class index, ``-1`` = no label: the position is left out for that key):

- :class:`PreviousTokenLabels`: ``tok[t - k]`` for each distance ``k``, restricted to a fixed set of
  classes (the ``K`` most frequent tokens, :func:`most_frequent_tokens`; other tokens are dropped);
  key ``"k"`` (``"1"``, ``"2"``, ...). Chen et al.'s copier puts the parents into position ``t``.
- :class:`TokenClassLabels`: a class per vocabulary entry, e.g. the LDA topic of the word a token
  spells (:func:`probes.text.token_topics.token_topic_labels`); key ``"word"`` by default.
- :class:`RowLabels`: a class per row (per document or sequence), at every valid position
  (``positions="all"``, e.g. the document's dominant LDA topic, key ``"document"``) or only at the last
  valid one (``positions="last"``, e.g. Scan and Snap's next-token class, read at the query token).
- :class:`CombinedLabels`: several makers as one (their keys must differ).

Only valid positions (``batch.valid``: not padding, not special tokens) are ever labelled.

Each maker also names the baseline its labels are measured against (``baseline(key)``, see
:class:`probes.LinearProbe`): ``"control_task"`` for a property of the current word (Hewitt & Liang's
control task: :class:`TokenClassLabels`), ``"token_identity"`` for a label that is not a function of the
current word (:class:`PreviousTokenLabels`, :class:`RowLabels`): what the current token alone predicts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, Protocol

import torch
from jaxtyping import Int
from torch import Tensor

from mechprobe.validation import integer, is_integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError

Baseline = Literal["control_task", "token_identity"]
STATISTICS: dict[str, str] = {"control_task": "selectivity", "token_identity": "gain over token identity"}
"""The name of the statistic (accuracy minus the baseline's) for each baseline."""


class LabelMaker(Protocol):
    """What :class:`probes.LinearProbe` needs from its labels (see the module docstring)."""

    @property
    def keys(self) -> tuple[str, ...]:
        """The label keys, in order."""

    def n_classes(self, key: str) -> int:
        """The number of classes of ``key``."""

    def settings(self) -> dict[str, Any]:
        """JSON-serialisable description (it goes into the probe's provenance)."""

    def baseline(self, key: str) -> Baseline:
        """What the probe of ``key`` must beat (see the module docstring)."""

    def __call__(self, batch: TokenBatch, rows: Int[Tensor, " batch"]) -> dict[str, Int[Tensor, "batch pos"]]:
        """``{key: labels [batch pos]}`` (class index, -1 = unlabelled)."""


def most_frequent_tokens(batches: Iterable[Tensor | TokenBatch], k: int) -> tuple[int, ...]:
    """The ``k`` most frequent token ids at the valid positions of ``batches`` (ties: smaller id first).

    Example: ``most_frequent_tokens([torch.tensor([[5, 5, 7, 9, 7, 5]])], 2) == (5, 7)``.
    """
    integer("k (the number of token classes)", k, 2)
    counts: dict[int, int] = {}
    for batch in batches:
        tokens = batch.tokens[batch.valid] if isinstance(batch, TokenBatch) else batch.flatten()
        ids, n = torch.unique(tokens.cpu(), return_counts=True)
        for token, count in zip(ids.tolist(), n.tolist()):
            counts[token] = counts.get(token, 0) + count
    if len(counts) < 2:
        raise InputError(f"The batches hold {len(counts)} distinct token(s); at least 2 are needed to make classes.")
    ranked = sorted(counts, key=lambda token: (-counts[token], token))
    return tuple(ranked[:k])


def _check_classes(name: str, values: Sequence[int]) -> tuple[int, ...]:
    values = tuple(values)
    if len(values) < 2 or any(not is_integer(v) or v < 0 for v in values):
        raise ConfigError(f"{name} must hold at least 2 token ids >= 0; got {values!r}.")
    if len(set(values)) != len(values):
        raise ConfigError(f"{name} must not repeat a token id; got {values!r}.")
    return values


class PreviousTokenLabels:
    """``tok[t - k]`` as a class among ``classes`` for each of ``distances`` (keys ``"1"``, ``"2"``, ...).

    Position ``t`` gets label ``classes.index(tok[t - k])`` when ``t`` and ``t - k`` are both valid
    and ``tok[t - k]`` is one of ``classes``; otherwise -1.

    Example::

        labels = PreviousTokenLabels((1, 2), most_frequent_tokens(batches, 20))
    """

    def __init__(self, distances: Sequence[int], classes: Sequence[int]) -> None:
        distances = tuple(distances)
        if not distances or any(not is_integer(d) or d < 1 for d in distances) \
                or len(set(distances)) != len(distances):
            raise ConfigError(f"distances must be distinct integers >= 1, e.g. (1, 2, 3); got {distances!r}.")
        self.distances = distances
        self.classes = _check_classes("classes", classes)
        self.keys = tuple(str(d) for d in distances)
        self._lookup = torch.full((max(self.classes) + 1,), -1, dtype=torch.long)
        self._lookup[torch.tensor(self.classes)] = torch.arange(len(self.classes))

    def n_classes(self, key: str) -> int:
        return len(self.classes)

    def baseline(self, key: str) -> Baseline:
        return "token_identity"

    def settings(self) -> dict[str, Any]:
        return {"kind": "previous_token", "distances": list(self.distances), "classes": list(self.classes)}

    def __call__(self, batch: TokenBatch, rows: Tensor) -> dict[str, Tensor]:
        tokens, valid = batch.tokens, batch.valid
        lookup = self._lookup.to(tokens.device)
        in_range = tokens < lookup.shape[0]
        cls = torch.where(in_range, lookup[tokens.clamp(max=lookup.shape[0] - 1)], -1)
        cls = torch.where(valid, cls, -1)
        out = {}
        for d, key in zip(self.distances, self.keys):
            labels = torch.full_like(tokens, -1)
            if d < tokens.shape[1]:
                labels[:, d:] = torch.where(valid[:, d:], cls[:, :-d], -1)
            out[key] = labels
        return out


class TokenClassLabels:
    """A class per vocabulary entry: position ``t`` gets ``token_classes[tok[t]]`` (-1 = unlabelled).

    Example: ``TokenClassLabels(token_topic_labels(word_topics, model.tokenizer, d_vocab).labels)``.
    """

    def __init__(self, token_classes: Tensor, *, key: str = "word", n_classes: int | None = None) -> None:
        if not isinstance(token_classes, Tensor) or token_classes.ndim != 1 or token_classes.dtype.is_floating_point:
            raise InputError(
                f"token_classes must be an integer tensor [d_vocab] (class per token id, -1 = none); got "
                f"{type(token_classes).__name__} {tuple(getattr(token_classes, 'shape', ()))}."
            )
        labelled = token_classes[token_classes >= 0]
        if labelled.numel() == 0:
            raise InputError("token_classes labels no token (all -1); nothing could be probed.")
        self.token_classes = token_classes.long().cpu()
        self._n_classes = int(labelled.max()) + 1 if n_classes is None else n_classes
        self.key = key
        self.keys = (key,)

    def n_classes(self, key: str) -> int:
        return self._n_classes

    def baseline(self, key: str) -> Baseline:
        return "control_task"

    def settings(self) -> dict[str, Any]:
        return {"kind": "token_class", "key": self.key, "n_classes": self._n_classes,
                "labelled_tokens": int((self.token_classes >= 0).sum())}

    def __call__(self, batch: TokenBatch, rows: Tensor) -> dict[str, Tensor]:
        table = self.token_classes.to(batch.tokens.device)
        if int(batch.tokens.max()) >= table.shape[0]:
            raise InputError(
                f"token_classes covers ids < {table.shape[0]}, but the batch holds id {int(batch.tokens.max())}; "
                f"give one entry per vocabulary id (the model's d_vocab)."
            )
        return {self.key: torch.where(batch.valid, table[batch.tokens], -1)}


class RowLabels:
    """A class per row, indexed by the row's global position in the stream the probe sees.

    ``positions="all"`` labels every valid position of the row, ``"last"`` only its last valid one.
    Example: ``RowLabels("document", dominant_topic_per_row)``.
    """

    def __init__(self, key: str, row_classes: Tensor, *, positions: Literal["all", "last"] = "all",
                 n_classes: int | None = None) -> None:
        if not isinstance(row_classes, Tensor) or row_classes.ndim != 1 or row_classes.dtype.is_floating_point:
            raise InputError(
                f"row_classes must be an integer tensor [n_rows] (a class per row, -1 = none); got "
                f"{type(row_classes).__name__} {tuple(getattr(row_classes, 'shape', ()))}."
            )
        if positions not in ("all", "last"):
            raise ConfigError(f"positions must be 'all' or 'last'; got {positions!r}.")
        self.row_classes = row_classes.long().cpu()
        self._n_classes = int(self.row_classes.max()) + 1 if n_classes is None else n_classes
        self.key, self.positions, self.keys = key, positions, (key,)

    def n_classes(self, key: str) -> int:
        return self._n_classes

    def baseline(self, key: str) -> Baseline:
        return "token_identity"

    def settings(self) -> dict[str, Any]:
        return {"kind": "row", "key": self.key, "positions": self.positions, "n_classes": self._n_classes,
                "n_rows": int(self.row_classes.shape[0])}

    def __call__(self, batch: TokenBatch, rows: Tensor) -> dict[str, Tensor]:
        if int(rows.max()) >= self.row_classes.shape[0]:
            raise InputError(
                f"RowLabels {self.key!r} has classes for {self.row_classes.shape[0]} rows, but the probe is at row "
                f"{int(rows.max())}; give one class per row of every batch fed (in order)."
            )
        per_row = self.row_classes[rows.cpu()].to(batch.tokens.device)
        valid = batch.valid
        if self.positions == "last":
            position = torch.arange(valid.shape[1], device=valid.device).expand_as(valid)
            last = torch.where(valid, position, -1).max(1).values
            valid = position == last[:, None]
        return {self.key: torch.where(valid, per_row[:, None].expand_as(batch.tokens), -1)}


class CombinedLabels:
    """Several label makers as one; their keys must differ. Example: ``CombinedLabels(words, documents)``."""

    def __init__(self, *makers: LabelMaker) -> None:
        keys = [key for maker in makers for key in maker.keys]
        if not makers or len(set(keys)) != len(keys):
            raise ConfigError(f"CombinedLabels needs at least one maker and distinct keys; got keys {keys}.")
        self.makers, self.keys = makers, tuple(keys)
        self._owner: Mapping[str, LabelMaker] = {key: maker for maker in makers for key in maker.keys}

    def n_classes(self, key: str) -> int:
        return self._owner[key].n_classes(key)

    def baseline(self, key: str) -> Baseline:
        return self._owner[key].baseline(key)

    def settings(self) -> dict[str, Any]:
        return {"kind": "combined", "makers": [maker.settings() for maker in self.makers]}

    def __call__(self, batch: TokenBatch, rows: Tensor) -> dict[str, Tensor]:
        return {key: labels for maker in self.makers for key, labels in maker(batch, rows).items()}
