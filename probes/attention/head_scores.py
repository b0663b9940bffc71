"""Induction, previous-token and duplicate-token scores per (layer, head).

Definition (the same for every model and every batch). For a query position ``q`` that is
valid (not padding, not a special token), its target keys ``T(q)`` are

- ``previous_token``: ``{q - 1}`` when ``q - 1`` is valid;
- ``duplicate_token``: ``{k < q : tok[k] == tok[q]}`` (earlier copies of the current token);
- ``induction``: ``{1 <= k <= q : tok[k - 1] == tok[q], k - 1 < q}`` (the token just after an
  earlier copy of the current token);

restricted to valid keys. The score of head ``(l, h)`` is the attention mass on the targets,
averaged over the queries that have at least one target (over all batches and positions)::

    score[l, h] = sum_{b, q : T(q) != {}} sum_{k in T(q)} A[b, l, h, q, k] / #{(b, q) : T(q) != {}}

Queries without a target are left out, not counted as zero, and attention mass on special
tokens (e.g. a BOS sink) is never credited. A perfect head scores exactly 1.0.

``chance`` is the score a head would get by attending uniformly over the keys it can see
(the positions the attention_mask keeps: ``k <= q`` for causal models, all of them for
bidirectional ones), so it does not depend on how far a batch was padded.

Relation to ``transformer_lens.head_detector.detect_head(..., error_measure="mul")``: its target
patterns are the same sets ``T(q)``, but it divides the mass by the total attention of *all* query
rows, including rows with no target, so on one sequence of length ``n``
``detect_head = score * rows_with_target / n`` (a perfect induction head on BOS + X + X scores
about 0.5 there). It also credits attention to BOS as a previous-token target; we do not.

Other target sets (``self``, ``first_token``, ``offset:D``, ``induction:D``) and your own
(:class:`probes.HeadPattern`, a function of the tokens) are scored the same way: pass them in
``kinds`` (see :mod:`probes.attention.head_patterns`).

Bidirectional encoders (BERT, MiniLM): the same definitions are applied to the full attention
matrix, so the scores measure the mass on *earlier* positions only; a head that attends to the
next token or to later copies scores low here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from mechprobe.validation import integer
from probes.attention.head_patterns import HEAD_PATTERNS, HeadPattern, head_pattern
from probes.attention.key_mask_probe import KeyMaskProbe
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.pattern_sums import KeyMask, check_pattern_block
from probes.core.result import ProbeResult, Provenance
from probes.core.runner import run_probes
from probes.core.token_pairs import per_query_counts
from probes.display.head_maps import HeadMap, HeadMapDisplay

if TYPE_CHECKING:
    import pandas as pd

HEAD_SCORE_KINDS = ("induction", "previous_token", "duplicate_token")
"""The kinds :class:`HeadScoreProbe` and :func:`head_scores` score by default (names in :data:`HEAD_PATTERNS`)."""


def _check_kinds(kinds: Sequence[str | HeadPattern] | str | HeadPattern) -> tuple[HeadPattern, ...]:
    if isinstance(kinds, (str, HeadPattern)):
        kinds = (kinds,)
    patterns = tuple(head_pattern(kind) for kind in kinds)
    names = [pattern.name for pattern in patterns]
    if not patterns or len(set(names)) != len(names):
        raise ConfigError(
            f"Head-score kinds must be a non-empty list of distinct patterns (names in {tuple(HEAD_PATTERNS)}, "
            f"offset:D, induction:D or probes.HeadPattern objects); got {names}."
        )
    return patterns


def target_mask(
    kind: str | HeadPattern, tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"]
) -> Bool[Tensor, "batch q_pos k_pos"]:
    """``mask[b, q, k]`` is True when key ``k`` is a target of query ``q`` (see module docstring and
    :mod:`probes.attention.head_patterns` for the named and custom patterns)."""
    return head_pattern(kind).mask(tokens, valid)


def visible_keys(
    valid: Bool[Tensor, "batch pos"], causal: bool, attention_mask: Int[Tensor, "batch pos"] | None = None
) -> Float[Tensor, "batch q_pos"]:
    """How many keys each query can attend to: positions the ``attention_mask`` keeps (all when None),
    and of those only ``k <= q`` for causal models. Padding is never visible, so the count (and every
    chance level built on it) does not depend on how far a batch is padded."""
    n_batch, n_pos = valid.shape
    attended = torch.ones(n_batch, n_pos, dtype=torch.float64, device=valid.device)
    if attention_mask is not None:
        attended = attention_mask.to(device=valid.device, dtype=torch.float64)
    if causal:
        return attended.cumsum(-1)
    return attended.sum(-1, keepdim=True).expand(n_batch, n_pos)


@dataclass(frozen=True)
class HeadScores(ProbeResult, HeadMapDisplay):
    """Head scores per kind: ``scores[kind]`` is a float tensor [n_layers, n_heads].

    ``target_mass[kind]`` is the summed attention on targets and ``rows_with_target[kind]`` the
    number of queries that had a target (``scores = target_mass / rows_with_target``); ``rows`` is
    the number of valid queries, ``chance[kind]`` the uniform-attention score.
    """

    scores: dict[str, Tensor]
    target_mass: dict[str, Tensor]
    rows_with_target: dict[str, int]
    rows: int
    chance: dict[str, float]

    def top_heads(self, kind: str, k: int = 5) -> list[tuple[int, int, float]]:
        """The ``k`` highest-scoring heads of ``kind`` as ``(layer, head, score)``, best first."""
        if kind not in self.scores:
            raise ConfigError(f"No scores of kind {kind!r}; this result has {sorted(self.scores)}.")
        table = self.scores[kind]
        values, flat = table.flatten().topk(min(k, table.numel()))
        n_heads = table.shape[1]
        return [(int(i) // n_heads, int(i) % n_heads, float(v)) for v, i in zip(values, flat)]

    def head_maps(self) -> list[HeadMap]:
        """One map per kind, with its uniform-attention chance."""
        return [HeadMap(kind, table, self.chance[kind]) for kind, table in self.scores.items()]

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (kind, layer, head) with the score and the chance level."""
        import pandas as pd

        rows = [
            {"kind": kind, "layer": layer, "head": head, "score": float(table[layer, head]),
             "chance": self.chance[kind]}
            for kind, table in self.scores.items()
            for layer in range(table.shape[0])
            for head in range(table.shape[1])
        ]
        return pd.DataFrame(rows)


class HeadScoreProbe(KeyMaskProbe[HeadScores]):
    """Accumulates the head scores of ``kinds`` over batches (definitions in the module docstring)."""

    def __init__(self, kinds: Sequence[str | HeadPattern] = HEAD_SCORE_KINDS) -> None:
        super().__init__()
        self.patterns = _check_kinds(kinds)
        self.kinds = tuple(pattern.name for pattern in self.patterns)


    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return tuple(pattern_hook(layer) for layer in range(info.n_layers))

    def _batch_context(self, batch: TokenBatch, first: Tensor) -> list[tuple[str, KeyMask]]:
        info = self.info
        n_batch, n_pos = batch.tokens.shape
        check_pattern_block(first, n_batch, info.n_heads, n_pos)
        causal = info.is_causal(first)
        visible = visible_keys(batch.valid, causal, batch.attention_mask)
        self._add("rows", batch.valid.sum())
        masks = []
        for kind, pattern in zip(self.kinds, self.patterns):
            pairs = pattern.target_pairs(batch.tokens, batch.valid)  # no [batch q k] mask for the built-ins
            counts = per_query_counts(pairs, n_batch, n_pos)
            has_target = counts > 0
            self._add(f"{kind}/rows_with_target", has_target.sum())
            self._add(f"{kind}/chance_mass", (counts / visible)[has_target].sum())
            masks.append((kind, KeyMask.from_pairs(pairs, n_batch, n_pos)))
        return masks

    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> HeadScores:
        scores, masses, counts, chance = {}, {}, {}, {}
        for kind in self.kinds:
            n = float(state[f"{kind}/rows_with_target"])
            masses[kind] = state[f"{kind}/mass"].float()
            counts[kind] = int(n)
            scores[kind] = (state[f"{kind}/mass"] / n).float() if n else torch.full_like(masses[kind], float("nan"))
            chance[kind] = float(state[f"{kind}/chance_mass"]) / n if n else float("nan")
        return HeadScores(
            provenance=provenance,
            scores=scores,
            target_mass=masses,
            rows_with_target=counts,
            rows=int(state["rows"]),
            chance=chance,
        )


def _token_batches(tokens: Any, batch_size: int) -> list[Tensor | TokenBatch]:
    if isinstance(tokens, TokenBatch):
        return [
            TokenBatch(
                tokens.tokens[i : i + batch_size],
                tokens.valid[i : i + batch_size],
                None if tokens.attention_mask is None else tokens.attention_mask[i : i + batch_size],
            )
            for i in range(0, tokens.tokens.shape[0], batch_size)
        ]
    if isinstance(tokens, Tensor):
        if tokens.ndim == 1:
            raise InputError(
                f"Tokens must have rank 2 [batch, pos]; got shape {tuple(tokens.shape)}. "
                f"Add a batch dimension with tokens.unsqueeze(0)."
            )
        return list(torch.split(tokens, batch_size)) if tokens.ndim == 2 else [tokens]
    if isinstance(tokens, Iterable) and not isinstance(tokens, (str, bytes)):
        return list(tokens)
    raise InputError(
        f"tokens must be None (the repeated-random-token protocol), an integer tensor [batch, pos], "
        f"a TokenBatch or an iterable of them; got {type(tokens).__name__}."
    )


def head_scores(
    model: HookedModel,
    tokens: Any = None,
    *,
    kinds: Sequence[str | HeadPattern] = HEAD_SCORE_KINDS,
    seq_len: int = 50,
    n_batches: int = 4,
    batch_size: int = 8,
    seed: int = 0,
    prepend_bos: bool | None = None,
    progress: bool = False,
) -> HeadScores:
    """Head scores of every (layer, head) of ``model``.

    ``tokens=None`` runs the standard protocol: ``n_batches`` batches of ``batch_size`` rows of
    ``[BOS] X X`` with ``X`` ``seq_len`` random non-special tokens (seeded by ``seed``). Otherwise
    ``tokens`` are scored as given (natural text), split into batches of ``batch_size`` rows.
    ``kinds`` may name any pattern of :mod:`probes.attention.head_patterns` or be your own ``HeadPattern``.

    Example::

        scores = probes.head_scores(probes.load_model("smollm2-135m"))
        scores.top_heads("induction", k=3)
    """
    kinds = _check_kinds(kinds)
    info = ModelInfo.of(model)
    integer("batch_size", batch_size, 1)
    if tokens is None:
        integer("n_batches", n_batches, 1)
        generator = torch.Generator().manual_seed(seed)
        batches: list[Tensor | TokenBatch] = [
            repeated_random_tokens(
                info, seq_len=seq_len, n_sequences=batch_size, generator=generator, prepend_bos=prepend_bos
            )
            for _ in range(n_batches)
        ]
        data = f"repeated random tokens (seq_len={seq_len}, {n_batches}x{batch_size}, seed={seed})"
    else:
        batches = _token_batches(tokens, batch_size)
        data = "given tokens"
    (result,) = run_probes(model, [HeadScoreProbe(kinds)], batches, data=data, seed=seed, progress=progress)
    return result
