"""Head sets to ablate: validated ``(layer, head)`` lists, random sets matched layer by layer, derangements."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mechprobe.validation import is_integer
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo

Heads = tuple[tuple[int, int], ...]
log = logging.getLogger(__name__)


def check_heads(heads: Iterable[tuple[int, int]], info: ModelInfo) -> Heads:
    """``heads`` as a sorted tuple of ``(layer, head)`` pairs, each inside the model; raises :class:`InputError`
    for an empty list, a pair that is not two integers, a duplicate, or a head out of range.

    Example: ``check_heads([(1, 0)], ModelInfo.of(model)) == ((1, 0),)``.
    """
    pairs = []
    for pair in heads:
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or any(not is_integer(v) for v in pair)):
            raise InputError(f"Each head must be a (layer, head) pair of integers; got {pair!r}. Write heads as "
                             f"[(17, 3), (18, 6)].")
        layer, head = pair
        if not (0 <= layer < info.n_layers and 0 <= head < info.n_heads):
            raise InputError(
                f"Head ({layer}, {head}) is outside {info.name}, which has layers 0..{info.n_layers - 1} and heads "
                f"0..{info.n_heads - 1}. Use a layer and head inside those ranges."
            )
        pairs.append((layer, head))
    if not pairs:
        raise InputError("The head list is empty: name at least one (layer, head) to ablate, e.g. [(1, 0)].")
    if len(set(pairs)) != len(pairs):
        duplicates = sorted({p for p in pairs if pairs.count(p) > 1})
        raise InputError(f"Each head may be named once; {duplicates} repeat. Remove the repeats.")
    return tuple(sorted(pairs))


def head_layers(heads: Heads) -> tuple[int, ...]:
    """The layers the heads sit in, ascending."""
    return tuple(sorted({layer for layer, _ in heads}))


def head_mask(heads: Heads, layers: tuple[int, ...], n_heads: int) -> Bool[Tensor, "layer head"]:
    """``mask[i, h]``: head ``h`` of layer ``layers[i]`` is in ``heads``."""
    mask = torch.zeros(len(layers), n_heads, dtype=torch.bool)
    for layer, head in heads:
        mask[layers.index(layer), head] = True
    return mask


def layer_matched_head_sets(heads: Heads, n_heads: int, n_draws: int, *, seed: int
                            ) -> Bool[Tensor, "draw layer head"]:
    """``n_draws`` random head sets with as many heads in each of ``head_layers(heads)`` as ``heads`` has there:
    per draw and layer, that many heads drawn uniformly without replacement (a draw may hit ``heads`` itself).
    Sets that take every head of each of their layers have no null (:class:`InputError` when ``n_draws > 0``); fewer
    than 100 distinct matched sets log a warning (the p-value cannot fall much below one over their number).

    Example: for ``heads=((1, 0), (1, 2), (3, 1))`` every draw has two heads of layer 1 and one of layer 3.
    """
    if not is_integer(n_draws) or n_draws < 0:
        raise ConfigError(f"n_draws must be an integer >= 0 (random head sets of the null); got {n_draws!r}.")
    layers = head_layers(heads)
    per_layer = head_mask(heads, layers, n_heads).sum(1)
    n_sets = math.prod(math.comb(n_heads, int(k)) for k in per_layer)
    if n_draws and n_sets == 1:
        raise InputError(
            f"The heads {list(heads)} are every head of layer(s) {', '.join(map(str, layers))}: the random head sets "
            f"matched layer by layer can only be these heads again, so the null equals the ablation (p = 1 by "
            f"construction). Leave at least one head of each layer out, or measure without a null (0 draws).")
    if n_draws and n_sets < 100:
        log.warning("Only %d head sets are matched layer by layer to %s: a draw is the chosen set itself about once "
                    "in %d, so the null's p-value cannot fall much below 1/%d.", n_sets, list(heads), n_sets, n_sets)
    generator = torch.Generator().manual_seed(seed)
    ranks = torch.rand(n_draws, len(layers), n_heads, generator=generator).argsort(-1).argsort(-1)
    return ranks < per_layer[None, :, None]


def mask_heads(mask: Bool[Tensor, "layer head"], layers: tuple[int, ...]) -> Int[Tensor, "k 2"]:
    """The ``(layer, head)`` pairs a mask marks, as a ``[k, 2]`` tensor."""
    index = mask.nonzero()
    return torch.stack([torch.tensor(layers, dtype=torch.long)[index[:, 0]], index[:, 1]], 1)


def derangement(n: int, *, seed: int) -> Int[Tensor, " n"]:
    """A permutation of ``range(n)`` with no fixed point, uniform over derangements, fixed by ``seed``:
    row ``i`` of a batch takes its resampled head output from row ``derangement[i]``.

    Example: ``derangement(4, seed=0)`` never maps a row to itself.
    """
    if n < 2:
        raise InputError(f"Resample ablation takes each head's output from another sequence of the batch, so batches "
                         f"need at least 2 sequences; got {n}. Use a batch size >= 2 or method 'mean'.")
    generator = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(n, generator=generator)
        if not (perm == torch.arange(n)).any():
            return perm
