"""Generalized induction score: attention on keys whose preceding n-1 tokens match the query's.

A head at query position ``q`` (which predicts token ``q + 1``) acts as an n-gram induction head
when it attends to keys ``k`` whose ``n - 1`` preceding tokens equal the ``n - 1`` tokens ending
at ``q`` (the parents of the next token), so that the key's own token is a continuation seen
before. More generally, for a set of parent distances ``D`` (``n``-gram: ``D = {1, .., n-1}``)::

    T_D(q) = {k <= q : tok[k - j] == tok[q + 1 - j] and positions k, k - j, q + 1 - j valid, for all j in D}

For ``D = {1}`` (``n = 2``) this is exactly the induction target of :mod:`probes.attention.head_scores`
(``tok[k - 1] == tok[q]``), so the score runs on pretrained LMs over natural text and coincides
with ``HeadScoreProbe``'s induction score there.

``score[l, h]`` = attention mass on ``T_D(q)``, averaged over queries with a nonempty target set
(over batches and positions). Beside it:

- ``chance``: the same score under uniform attention over the visible keys (causal: ``k <= q``).
  With sparse chains (small Dirichlet alpha) it is high, so always read the score against it.
- ``last_token_only[l, h]``: mass on keys that match the last token (``j = 1``) but not every
  distance in ``D``, averaged over the same queries; a true n-gram head drives it toward 0
  (its chance level is ``last_token_only_chance``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from mechprobe.validation import integer, is_integer
from probes.attention.head_scores import visible_keys
from probes.attention.key_mask_probe import KeyMaskProbe
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.pattern_sums import KeyMask, check_pattern_block
from probes.core.result import ProbeResult, Provenance
from probes.core.token_pairs import Pairs, equal_pairs, per_query_counts, shifted
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd


def check_distances(distances: Sequence[int]) -> tuple[int, ...]:
    """Validate a set of parent distances (positive integers) and return it sorted."""
    if isinstance(distances, int) or not distances:
        raise ConfigError(f"distances must be a non-empty sequence of integers >= 1; got {distances!r}.")
    out = tuple(sorted(set(distances)))
    if any(not is_integer(d) or d < 1 for d in out):
        raise ConfigError(f"distances must be integers >= 1; got {list(distances)}.")
    return out


def parent_match_mask(
    tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"], distances: Sequence[int]
) -> Bool[Tensor, "batch q_pos k_pos"]:
    """``mask[b, q, k]`` is True when ``k`` is in ``T_D(q)`` (see the module docstring)."""
    n_batch, n_pos = tokens.shape
    mask = torch.ones(n_pos, n_pos, dtype=torch.bool, device=tokens.device).tril().expand(n_batch, n_pos, n_pos)
    mask = mask & valid[:, :, None] & valid[:, None, :]
    for j in distances:
        # key side: position k - j; query side: position q + 1 - j.
        key_tok = torch.full_like(tokens, -1)
        key_ok = torch.zeros_like(valid)
        if j < n_pos:
            key_tok[:, j:] = tokens[:, :-j]
            key_ok[:, j:] = valid[:, :-j]
        query_tok = torch.full_like(tokens, -2)
        query_ok = torch.zeros_like(valid)
        shift = j - 1
        if shift == 0:
            query_tok, query_ok = tokens, valid
        elif shift < n_pos:
            query_tok[:, shift:] = tokens[:, :-shift]
            query_ok[:, shift:] = valid[:, :-shift]
        match = (query_tok[:, :, None] == key_tok[:, None, :]) & query_ok[:, :, None] & key_ok[:, None, :]
        mask = mask & match
    return mask


def parent_match_pairs(
    tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"], distances: Sequence[int]
) -> Pairs:
    """The True entries ``(b, q, k)`` of :func:`parent_match_mask`, found by joining on the first distance's tokens
    and checking the others per pair (no ``[batch q_pos k_pos]`` mask), ordered as ``mask.nonzero()``."""
    first, *others = distances
    key_tok, key_ok = shifted(tokens, valid, first)  # the token at k - j
    query_tok, query_ok = shifted(tokens, valid, first - 1)  # the token at q + 1 - j
    b, q, k = equal_pairs(query_tok, key_tok, query_ok & valid, key_ok & valid, keys="up_to")
    for j in others:
        key_tok, key_ok = shifted(tokens, valid, j)
        query_tok, query_ok = shifted(tokens, valid, j - 1)
        keep = key_ok[b, k] & query_ok[b, q] & (key_tok[b, k] == query_tok[b, q])
        b, q, k = b[keep], q[keep], k[keep]
    return b, q, k


@dataclass(frozen=True)
class GeneralizedInductionScores(ProbeResult, HeadMapDisplay):
    """``scores`` / ``last_token_only`` [n_layers, n_heads] and their uniform-attention chance.

    ``distances`` is the parent set ``D``; ``rows_with_target`` the number of queries averaged over.
    """

    scores: Tensor
    last_token_only: Tensor
    chance: float
    last_token_only_chance: float
    rows_with_target: int
    distances: list[int]

    def best_head(self, layer: int | None = None) -> tuple[int, int, float]:
        """``(layer, head, score)`` of the highest score (within ``layer`` when given)."""
        n_heads = self.scores.shape[1]
        table = self.scores if layer is None else self.scores[layer : layer + 1]
        flat = int(table.flatten().argmax())
        return flat // n_heads + (0 if layer is None else layer), flat % n_heads, float(table.flatten()[flat])

    def head_maps(self) -> list[HeadMap]:
        """The generalized induction score and the last-token-only mass, each with its chance."""
        return [HeadMap("generalized induction", self.scores, self.chance),
                HeadMap("last token only", self.last_token_only, self.last_token_only_chance)]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (layer, head): score, last-token-only mass and their chance levels."""
        import pandas as pd

        return pd.DataFrame(
            [
                {"layer": layer, "head": h, "score": float(self.scores[layer, h]), "chance": self.chance,
                 "last_token_only": float(self.last_token_only[layer, h]),
                 "last_token_only_chance": self.last_token_only_chance}
                for layer in range(self.scores.shape[0])
                for h in range(self.scores.shape[1])
            ]
        )


class GeneralizedInductionProbe(KeyMaskProbe[GeneralizedInductionScores]):
    """Accumulates generalized induction scores for parent distances ``1 .. n-1`` (or ``distances``).

    Example::

        (scores,) = probes.run_probes(model, [GeneralizedInductionProbe(n=3)], batches)
        scores.best_head(layer=1), scores.chance, scores.last_token_only
    """

    def __init__(self, n: int = 3, *, distances: Sequence[int] | None = None) -> None:
        super().__init__()
        if distances is None:
            integer("n (the n-gram order)", n, 2)
            distances = range(1, n)
        self.n = n  # the order; ignored when distances are given
        self.distances = check_distances(list(distances))


    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> list[tuple[str, KeyMask]]:
        n_batch, n_pos = batch.tokens.shape
        check_pattern_block(first, n_batch, None, n_pos)
        info = self.info
        causal = info.is_causal(first)
        full = parent_match_pairs(batch.tokens, batch.valid, self.distances)  # pairs, no [batch q k] mask
        b, q, k = parent_match_pairs(batch.tokens, batch.valid, (1,))
        index = (b * n_pos + q) * n_pos + k
        not_full = ~torch.isin(index, (full[0] * n_pos + full[1]) * n_pos + full[2])
        last = (b[not_full], q[not_full], k[not_full])
        has_target = per_query_counts(full, n_batch, n_pos) > 0
        visible = visible_keys(batch.valid, causal, batch.attention_mask)
        context = []
        for name, (b, q, k) in (("full", full), ("last", last)):
            counts = per_query_counts((b, q, k), n_batch, n_pos)
            self._add(f"{name}/chance_mass", (counts / visible)[has_target].sum())
            with_target = has_target[b, q]  # rows with a target
            context.append((name, KeyMask.from_pairs((b[with_target], q[with_target], k[with_target]), n_batch,
                                                     n_pos)))
        self._add("rows_with_target", has_target.sum())
        return context

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo,
                 provenance: Provenance) -> GeneralizedInductionScores:
        n = float(state["rows_with_target"])
        nan = float("nan")
        return GeneralizedInductionScores(
            provenance=provenance,
            scores=(state["full/mass"] / n).float() if n else torch.full_like(state["full/mass"], nan).float(),
            last_token_only=(state["last/mass"] / n).float() if n else torch.full_like(state["last/mass"], nan).float(),
            chance=float(state["full/chance_mass"]) / n if n else nan,
            last_token_only_chance=float(state["last/chance_mass"]) / n if n else nan,
            rows_with_target=int(n),
            distances=list(self.distances),
        )
