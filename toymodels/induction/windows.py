"""Layer-1 window states of the induction models: sequences grouped by what the last-token prediction needs.

:class:`WindowBatch` lets the simplified and full models (:mod:`toymodels.induction.simplified`,
:mod:`toymodels.induction.full`) compute their kernel once per pair of (query state, key state).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Int
from torch import Tensor


@dataclass(frozen=True)
class WindowBatch:
    """Sequences grouped by the state of their layer-1 windows (what the last-token prediction needs).

    A key slot ``t``'s features depend only on its tokens at distances ``1 .. max_distance``
    (``-1`` before the sequence start) and, with content attention, its own token; the query
    slot ``L``'s only on its window. ``query_windows`` [query_state distance] and
    ``key_windows`` / ``key_own`` [key_state distance] / [key_state] list the distinct states;
    ``query_index`` [batch] and ``key_index`` [batch key] point into them; ``key_tokens``
    [batch key] are the values. With ``S`` states and window ``M`` there are at most
    ``(S + 1)^M`` (times ``S``) states, far fewer than ``batch * L`` slots.
    """

    query_windows: Tensor
    query_index: Tensor
    key_windows: Tensor
    key_own: Tensor
    key_index: Tensor
    key_tokens: Tensor

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
        return WindowBatch(**{name: getattr(self, name).to(device) for name in self.__dataclass_fields__})

