"""What an edge measurement patches: one edge between two heads through one input of the receiver, and the null's
random edges of the same shape (same layer distance, same input, no head in common with the measured edge).

An edge ``(sender, receiver, input)`` names a sender head ``(l_s, h_s)``, a receiver head ``(l_r, h_r)`` in a later
layer (``l_r > l_s``) and the receiver's input it is measured through: its keys (``"k"``), queries (``"q"``) or
values (``"v"``). :class:`EdgePlan` holds the measured edge in row 0 and the null's draws after it, each row
``(l_s, h_s, l_r, h_r)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mechprobe.validation import integer
from probes.attention.head_patterns import head_pattern
from probes.causal.ablation import check_method
from probes.causal.head_sets import check_heads
from probes.causal.token_loss import check_loss, default_loss
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo

EDGE_INPUTS = ("k", "q", "v")
"""The receiver's inputs an edge can run through: keys, queries, values."""

Head = tuple[int, int]


def check_input(kind: str) -> str:
    if kind not in EDGE_INPUTS:
        raise ConfigError(f"Unknown receiver input {kind!r}; use 'k' (keys), 'q' (queries) or 'v' (values).")
    return kind


def check_edge(sender: Head, receiver: Head, info: ModelInfo) -> tuple[Head, Head]:
    """``(sender, receiver)`` as ``(layer, head)`` pairs inside the model with the sender in an earlier layer;
    :class:`InputError` otherwise."""
    (checked_sender,) = check_heads([sender], info)
    (checked_receiver,) = check_heads([receiver], info)
    if checked_sender[0] >= checked_receiver[0]:
        raise InputError(f"An edge runs from a sender to a receiver in a later layer; got sender {checked_sender} and "
                         f"receiver {checked_receiver}. Swap them, or pick a receiver above layer "
                         f"{checked_sender[0]}.")
    return checked_sender, checked_receiver


def distance_matched_edges(sender: Head, receiver: Head, n_layers: int, n_heads: int, n_draws: int, *,
                           seed: int) -> Int[Tensor, "draw 4"]:
    """``n_draws`` random edges ``(l_s, h_s, l_s + d, h_r)`` at the measured edge's layer distance
    ``d = receiver[0] - sender[0]`` that share no head with it: the sender layer uniform over
    ``0..n_layers - d - 1``, both heads uniform, redrawn where the draw's sender or receiver is the measured sender
    or receiver (uniform with replacement over the disjoint edges of that shape). Draw ``i`` is the same whatever
    ``n_draws`` is (one generator, drawn in order).

    Why disjoint: an edge that shares a head with the measured one measures that head's reach, not a random
    connection. In the induction toy one layer-1 copier feeds every layer-2 head's keys (each of the four loses 0.18
    to 0.41 of its induction attention when the copier is patched out of its keys, every other layer-1 head 0.09 at
    most), so a null holding the copier's other edges asks whether this classifier is the copier's favourite reader,
    not whether the copier -> classifier connection is there.

    Example: on a 2-layer model with 4 heads every draw is one of the 9 (layer 0, layer 1) pairs of the 3 other
    heads of each layer.
    """
    integer("n_draws", n_draws, 0)
    distance = receiver[0] - sender[0]
    n_sender_layers = n_layers - distance
    measured_heads = {tuple(sender), tuple(receiver)}
    n_disjoint = sum(sum((layer, h) not in measured_heads for h in range(n_heads))
                     * sum((layer + distance, h) not in measured_heads for h in range(n_heads))
                     for layer in range(n_sender_layers))
    if n_disjoint < 1 and n_draws:
        raise InputError(f"No edge spanning {distance} layers in a model of {n_layers} layers and {n_heads} head(s) "
                         f"shares no head with {format_edge(sender, receiver)}, so the null has nothing to draw; use "
                         f"n_draws=0.")
    generator = torch.Generator().manual_seed(seed)
    rows: list[Tensor] = []
    while len(rows) < n_draws:
        layer = int(torch.randint(0, n_sender_layers, (), generator=generator))
        heads = torch.randint(0, n_heads, (2,), generator=generator)
        if (layer, int(heads[0])) in measured_heads or (layer + distance, int(heads[1])) in measured_heads:
            continue
        rows.append(torch.tensor([layer, int(heads[0]), layer + distance, int(heads[1])]))
    return torch.stack(rows) if rows else torch.zeros(0, 4, dtype=torch.long)


def format_edge(sender: Head, receiver: Head) -> str:
    """``L0H1 -> L1H0``."""
    return f"L{sender[0]}H{sender[1]} -> L{receiver[0]}H{receiver[1]}"


@dataclass(frozen=True)
class EdgePlan:
    """One edge measurement: ``edges[0]`` the measured edge ``(l_s, h_s, l_r, h_r)``, ``edges[1:]`` the null's
    random edges (:func:`distance_matched_edges`), all through the receiver's ``input``. ``method``: how the
    sender's output is replaced (``zero``, ``mean``, ``resample``, as :func:`probes.head_ablation`); ``loss``:
    ``"next"`` or ``"masked"``; ``score``: the head pattern whose attention mass is the receiver's score
    (:func:`probes.head_pattern`, e.g. ``"induction"``).

    ``null_loss``: whether the null's edges get their loss change too. The measured edge always does; without it a
    null edge costs its sender's and receiver's blocks only (its score drop), not the final pass from the receiver's
    layer to the loss (:mod:`probes.causal.edges`), and its loss change is NaN. ``offset``: the index of
    ``edges[0]`` in the plan this one was cut from (:meth:`subset`; 0: ``edges[0]`` is the measured edge)."""

    edges: Int[Tensor, "set 4"]
    input: str
    method: str
    seed: int
    loss: str = "next"
    score: str = "induction"
    null_loss: bool = True
    offset: int = 0

    def __post_init__(self) -> None:
        check_input(self.input)
        check_method(self.method)
        check_loss(self.loss)
        head_pattern(self.score)
        if not isinstance(self.null_loss, bool):
            raise ConfigError(f"null_loss must be True (the null's edges get their loss change too) or False (their "
                              f"score drop only); got {self.null_loss!r}.")
        integer("offset", self.offset, 0)

    @classmethod
    def build(cls, info: ModelInfo, sender: Head, receiver: Head, *, input: str, method: str = "mean",
              n_draws: int = 0, seed: int = 0, loss: str | None = None, score: str = "induction",
              null_loss: bool = True) -> EdgePlan:
        """Validate the edge and settings and draw the null's ``n_draws`` edges from ``seed``; ``loss`` defaults to
        the model's direction (:func:`probes.causal.token_loss.default_loss`)."""
        sender, receiver = check_edge(sender, receiver, info)
        draws = distance_matched_edges(sender, receiver, info.n_layers, info.n_heads, n_draws, seed=seed)
        measured = torch.tensor([[sender[0], sender[1], receiver[0], receiver[1]]])
        return cls(torch.cat([measured, draws]), check_input(input), method, seed,
                   default_loss(info) if loss is None else check_loss(loss), score, null_loss)

    @property
    def sender(self) -> Head:
        return int(self.edges[0, 0]), int(self.edges[0, 1])

    @property
    def receiver(self) -> Head:
        return int(self.edges[0, 2]), int(self.edges[0, 3])

    @property
    def n_draws(self) -> int:
        return int(self.edges.shape[0]) - 1

    @property
    def sender_layers(self) -> tuple[int, ...]:
        """Every layer a sender of the plan sits in, ascending (the layers mean ablation needs means of)."""
        return tuple(sorted({int(v) for v in self.edges[:, 0]}))

    @property
    def measures_loss(self) -> Bool[Tensor, " edge"]:
        """Per edge: whether its loss change is measured (the measured edge always, the null's with ``null_loss``)."""
        rows = torch.arange(self.edges.shape[0]) + self.offset
        return torch.ones_like(rows, dtype=torch.bool) if self.null_loss else rows == 0

    def subset(self, start: int, stop: int) -> EdgePlan:
        """The plan measuring edges ``start..stop-1`` only (a null measured in groups)."""
        return replace(self, edges=self.edges[start:stop], offset=self.offset + start)

    def describe(self, row: int = 0) -> str:
        """``L0H1 -> L1H0 (k)`` for edge ``row``."""
        ls, hs, lr, hr = (int(v) for v in self.edges[row])
        return f"{format_edge((ls, hs), (lr, hr))} ({self.input})"
