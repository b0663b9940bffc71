"""Layer-1 window states of the induction models: sequences grouped by what the last-token prediction needs.

:class:`WindowBatch` lets the simplified and full models (:mod:`toymodels.induction.simplified`,
:mod:`toymodels.induction.full`) compute their kernel once per pair of (query state, key state), and keeps
their layer-1 kernel terms (:class:`WeightKeyedMemo`) while the model and its layer-1 weights stay as they are.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from jaxtyping import Int
from torch import Tensor


def _same_bits(kept: Sequence[Tensor], weights: Sequence[Tensor]) -> bool:
    """Whether ``weights`` hold exactly the values of ``kept`` (same device, dtype, shape, values and signs of
    zeros; a NaN never matches)."""
    return len(kept) == len(weights) and all(
        k.device == w.device and k.dtype == w.dtype and torch.equal(k, w) and torch.equal(k.signbit(), w.signbit())
        for k, w in zip(kept, weights))


class WeightKeyedMemo:
    """One tensor computed by one owner (a model) from its weights (and data that do not change), kept until the
    owner or a weight changes.

    :meth:`get` returns the kept tensor while it is asked by the same owner (held by a weak reference) and every
    weight still holds exactly the values it had when the tensor was computed (:func:`_same_bits` against a copy
    taken then); another owner or any change in a weight's values invalidates it and it is computed again. Keep
    only tensors that carry no gradient.
    """

    def __init__(self) -> None:
        self._owner: weakref.ref[object] | None = None
        self._weights: list[Tensor] = []
        self._value: Tensor | None = None

    def get(self, owner: object, weights: Sequence[Tensor], compute: Callable[[], Tensor]) -> Tensor:
        """The kept tensor if ``owner`` and its ``weights`` are unchanged, else ``compute()`` (then kept with
        ``owner`` and a copy of ``weights``)."""
        same_owner = self._owner is not None and self._owner() is owner
        if self._value is None or not same_owner or not _same_bits(self._weights, weights):
            self._value = compute()
            self._owner, self._weights = weakref.ref(owner), [w.detach().clone() for w in weights]
        return self._value


@dataclass(frozen=True)
class WindowBatch:
    """Sequences grouped by the state of their layer-1 windows (what the last-token prediction needs).

    A key slot ``t``'s features depend only on its tokens at distances ``1 .. max_distance``
    (``-1`` before the sequence start) and, with content attention, its own token; the query
    slot ``L``'s only on its window. ``query_windows`` [query_state distance] and
    ``key_windows`` / ``key_own`` [key_state distance] / [key_state] list the distinct states;
    ``query_index`` [batch] and ``key_index`` [batch key] point into them; ``key_tokens``
    [batch key] are the values. With ``S`` states and window ``M`` there are at most
    ``(S + 1)^M`` (times ``S``) states, far fewer than ``batch * L`` slots. ``layer1_terms``: a model's
    kernel terms of these sequences, kept while the same model asks with unchanged layer-1 weights (its
    ``final_probs`` fills and reads it; the tensors above must not be changed in place).
    """

    query_windows: Tensor
    query_index: Tensor
    key_windows: Tensor
    key_own: Tensor
    key_index: Tensor
    key_tokens: Tensor
    layer1_terms: WeightKeyedMemo = field(default_factory=WeightKeyedMemo, compare=False, repr=False)

    @classmethod
    def of(cls, tokens: Int[Tensor, "batch pos"], max_distance: int, n_states: int, *, with_own: bool) -> WindowBatch:
        n_batch, L = tokens.shape
        padded = torch.cat([tokens.new_full((n_batch, max_distance), -1), tokens], dim=1)
        # windows[b, t, m] = token at t - (m + 1), for slots t = 0 .. L (slot L: the query)
        windows = torch.stack([padded[:, max_distance - d: max_distance - d + L + 1]
                               for d in range(1, max_distance + 1)], dim=2)
        base = n_states + 1
        powers = base ** torch.arange(max_distance, device=tokens.device)
        codes = ((windows + 1) * powers).sum(-1)  # [batch, L + 1]
        query_codes, query_index = torch.unique(codes[:, L], return_inverse=True)
        key_codes = codes[:, :L] * n_states + tokens if with_own else codes[:, :L]
        key_states, key_index = torch.unique(key_codes, return_inverse=True)

        def decode(state_codes: Tensor) -> Tensor:
            digits = (state_codes[:, None] // powers[None]) % base
            return digits - 1

        key_own = key_states % n_states if with_own else torch.zeros_like(key_states)
        key_window_codes = key_states // n_states if with_own else key_states
        return cls(query_windows=decode(query_codes), query_index=query_index,
                   key_windows=decode(key_window_codes), key_own=key_own, key_index=key_index,
                   key_tokens=tokens)

    @property
    def grouping_pays(self) -> bool:
        """Whether the (query state x key state) table is smaller than the slots themselves; with long
        windows almost every slot is its own state and the slot-by-slot path is cheaper."""
        return self.query_windows.shape[0] * self.key_windows.shape[0] <= self.key_tokens.numel()

    def to(self, device: str | torch.device) -> WindowBatch:
        """The same states on ``device`` (with nothing kept in ``layer1_terms``)."""
        tensors = (name for name in self.__dataclass_fields__ if name != "layer1_terms")
        return WindowBatch(**{name: getattr(self, name).to(device) for name in tensors})

