"""Target sets for head scores: the built-in kinds and user-defined ones.

A :class:`HeadPattern` names a set of target keys ``T(q)`` per query: a function of the tokens
(and which positions are valid) returning ``mask[b, q, k]``. ``HeadScoreProbe`` scores any of them
the same batched, streamed way as the built-ins, the way TransformerLens's
``detect_head(detection_pattern=...)`` does for one fixed matrix on one sequence. Pairs with an
invalid query or key (padding, special tokens) are never targets, whatever the function returns.

Named patterns (strings accepted wherever a pattern is): ``induction``, ``previous_token``,
``duplicate_token`` (the defaults, see :mod:`probes.attention.head_scores`), ``self`` (``k = q``),
``first_token`` (the first valid position of the sequence), ``offset:D`` (``k = q - D``; negative
``D`` looks ahead, for encoders) and ``induction:D`` (the token ``D`` after an earlier copy of the
current token; ``induction:1`` is ``induction``).

Example::

    vowel = HeadPattern("same_parity", lambda tok, valid: (tok[:, :, None] % 2) == (tok[:, None, :] % 2))
    scores = probes.head_scores(model, tokens, kinds=["induction", vowel, "offset:2"])
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from probes.core.errors import ConfigError, InputError
from probes.core.token_pairs import Pairs, equal_pairs

TargetFunction = Callable[[Tensor, Tensor], Tensor]
PairFunction = Callable[[Tensor, Tensor], Pairs]
_NAME = re.compile(r"[A-Za-z0-9_.:+-]+")


def _tri(n: int, device: torch.device, diagonal: int) -> Tensor:
    """``ones[n, n].tril(diagonal).triu(diagonal)``: the pairs ``k = q + diagonal``."""
    return torch.ones(n, n, dtype=torch.bool, device=device).tril(diagonal).triu(diagonal)


def _offset(distance: int) -> TargetFunction:
    def targets(tokens: Tensor, valid: Tensor) -> Tensor:
        n = tokens.shape[1]
        return _tri(n, tokens.device, -distance).expand(tokens.shape[0], n, n)

    return targets


def _offset_pairs(distance: int) -> PairFunction:
    def pairs(tokens: Tensor, valid: Tensor) -> Pairs:
        n_batch, n_pos = tokens.shape
        start = max(distance, 0)
        q = torch.arange(start, max(start, min(n_pos, n_pos + distance)), device=tokens.device)
        b, q = torch.arange(n_batch, device=tokens.device).repeat_interleave(len(q)), q.repeat(n_batch)
        return b, q, q - distance

    return pairs


def _duplicate_pairs(tokens: Tensor, valid: Tensor) -> Pairs:
    return equal_pairs(tokens, tokens, valid, valid, keys="before")


def _induction_pairs(distance: int) -> PairFunction:
    def pairs(tokens: Tensor, valid: Tensor) -> Pairs:
        b, q, copy = _duplicate_pairs(tokens, valid)
        k = copy + distance
        keep = k < tokens.shape[1]  # k = copy + distance keeps the order of the copies
        return b[keep], q[keep], k[keep]

    return pairs


def _first_token_pairs(tokens: Tensor, valid: Tensor) -> Pairs:
    n_batch, n_pos = tokens.shape
    has_valid = valid.any(-1)
    first = valid.int().argmax(-1)
    b = torch.arange(n_batch, device=tokens.device)[has_valid].repeat_interleave(n_pos)
    q = torch.arange(n_pos, device=tokens.device).repeat(int(has_valid.sum()))
    return b, q, first[b]


def _duplicate(tokens: Tensor, valid: Tensor) -> Tensor:
    earlier = torch.ones(tokens.shape[1], tokens.shape[1], dtype=torch.bool, device=tokens.device).tril(-1)
    return (tokens[:, :, None] == tokens[:, None, :]) & earlier


def _induction(distance: int) -> TargetFunction:
    def targets(tokens: Tensor, valid: Tensor) -> Tensor:
        # k is a target of q when tok[k - D] == tok[q], k - D < q, and k - D is itself a valid token
        copies = _duplicate(tokens, valid) & valid[:, None, :]
        shifted = torch.zeros_like(copies)
        shifted[:, :, distance:] = copies[:, :, :-distance]
        return shifted

    return targets


def _first_token(tokens: Tensor, valid: Tensor) -> Tensor:
    n = tokens.shape[1]
    first = torch.where(valid.any(-1), valid.int().argmax(-1), n)  # n: no valid position at all
    keys = torch.arange(n, device=tokens.device)
    return (keys[None, None, :] == first[:, None, None]).expand(tokens.shape[0], n, n)


@dataclass(frozen=True)
class HeadPattern:
    """A named target set: ``targets(tokens [b, n], valid [b, n]) -> bool mask [b, q, k]``.

    ``name`` identifies the pattern in results (``scores[name]``) and in merges, so two different
    patterns must not share a name. ``description`` is shown in tables and saved results. ``pairs``
    (optional, the built-ins have it) lists the same targets as ``(b, q, k)`` in the order of
    ``mask.nonzero()``, without building the mask (:mod:`probes.core.token_pairs`); :meth:`target_pairs` uses
    it where given.
    """

    name: str
    targets: TargetFunction
    description: str = ""
    pairs: PairFunction | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.fullmatch(self.name):
            raise ConfigError(
                f"A head pattern's name must be letters, digits and _.:+- (it keys the results); got {self.name!r}."
            )
        if not callable(self.targets):
            raise ConfigError(f"HeadPattern {self.name!r}: targets must be a function (tokens, valid) -> mask.")

    def mask(self, tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"]
             ) -> Bool[Tensor, "batch q_pos k_pos"]:
        """The targets of every query, restricted to valid (query, key) pairs; checks the function's output."""
        out = self.targets(tokens, valid)
        b, n = tokens.shape
        if not isinstance(out, Tensor) or tuple(out.shape) != (b, n, n):
            shape = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise InputError(
                f"HeadPattern {self.name!r} returned {shape}; it must return a mask [batch, q_pos, k_pos] = "
                f"{(b, n, n)} for tokens of shape {(b, n)}."
            )
        if out.dtype != torch.bool:
            if out.is_floating_point() or out.is_complex():
                raise InputError(f"HeadPattern {self.name!r} returned {out.dtype}; return a boolean mask.")
            out = out != 0
        return out.to(valid.device) & valid[:, :, None] & valid[:, None, :]

    def target_pairs(self, tokens: Int[Tensor, "batch pos"], valid: Bool[Tensor, "batch pos"]) -> Pairs:
        """The pairs of :meth:`mask` (valid query and key) as ``(b, q, k)``, ordered as ``mask.nonzero()``."""
        if self.pairs is None:
            b, q, k = self.mask(tokens, valid).nonzero(as_tuple=True)
            return b, q, k
        b, q, k = self.pairs(tokens, valid)
        keep = valid[b, q] & valid[b, k]
        return b[keep], q[keep], k[keep]

    @classmethod
    def from_matrix(cls, name: str, matrix: Tensor, description: str = "") -> HeadPattern:
        """A fixed ``[q, k]`` target matrix for sequences of exactly its length (nonzero = target), like
        TransformerLens's ``detection_pattern``; it is applied to every sequence of every batch."""
        if not isinstance(matrix, Tensor) or matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ConfigError(f"HeadPattern.from_matrix({name!r}) needs a square [q_pos, k_pos] tensor.")
        fixed = matrix.detach() != 0

        def targets(tokens: Tensor, valid: Tensor) -> Tensor:
            if tokens.shape[1] != fixed.shape[0]:
                raise InputError(
                    f"HeadPattern {name!r} is a fixed {tuple(fixed.shape)} matrix; the sequences have "
                    f"{tokens.shape[1]} positions. Give sequences of length {fixed.shape[0]}."
                )
            return fixed.to(tokens.device).expand(tokens.shape[0], *fixed.shape)

        return cls(name, targets, description or f"fixed {fixed.shape[0]}x{fixed.shape[0]} target matrix")


HEAD_PATTERNS: dict[str, HeadPattern] = {
    "induction": HeadPattern("induction", _induction(1), "the token after an earlier copy of the current token",
                             _induction_pairs(1)),
    "previous_token": HeadPattern("previous_token", _offset(1), "the previous position", _offset_pairs(1)),
    "duplicate_token": HeadPattern("duplicate_token", _duplicate, "earlier copies of the current token",
                                   _duplicate_pairs),
    "self": HeadPattern("self", _offset(0), "the query's own position", _offset_pairs(0)),
    "first_token": HeadPattern("first_token", _first_token, "the first valid (non-special) position",
                               _first_token_pairs),
}
"""The named target sets :func:`head_pattern` resolves (``offset:D`` and ``induction:D`` besides)."""
_PARAMETRISED = re.compile(r"(offset|induction):(-?\d+)")


def head_pattern(spec: str | HeadPattern) -> HeadPattern:
    """``spec`` as a :class:`HeadPattern`: a pattern, a name in ``HEAD_PATTERNS``, ``offset:D`` or ``induction:D``."""
    if isinstance(spec, HeadPattern):
        return spec
    if isinstance(spec, str):
        if spec in HEAD_PATTERNS:
            return HEAD_PATTERNS[spec]
        match = _PARAMETRISED.fullmatch(spec)
        if match:
            kind, distance = match.group(1), int(match.group(2))
            name = f"{kind}:{distance}"  # one name however the distance is spelt (offset:01 is offset:1)
            if kind == "offset":
                return HeadPattern(name, _offset(distance), f"the position {distance} before the query"
                                   if distance >= 0 else f"the position {-distance} after the query",
                                   _offset_pairs(distance))
            if distance >= 1:
                return HeadPattern(name, _induction(distance), f"{distance} after an earlier copy of the current token",
                                   _induction_pairs(distance))
    close = difflib.get_close_matches(spec, list(HEAD_PATTERNS), n=1) if isinstance(spec, str) else []
    guess = f" Did you mean {close[0]}?" if close else ""
    raise ConfigError(
        f"Unknown head pattern {spec!r}.{guess} Use one of {', '.join(HEAD_PATTERNS)}, offset:D, induction:D (D >= 1) "
        f"or a probes.HeadPattern(name, targets)."
    )
