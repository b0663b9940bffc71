"""Chen et al. (2024)'s simplified two-attention-layer transformer as a TransformerLens hooked model.

Positions follow TransformerLens: the output at position ``q`` predicts token ``q + 1``.

- **Layer 1, copier** (``blocks.0``): ``H`` position-only heads. Head ``h`` gives *slot* ``t`` the
  mix ``v_t^h = sum_d softmax_d(w[h, d]) x_{t-d}`` over its distances ``d`` (``d <= t``; a slot
  that sees nothing is 0), then L2-normalises it. Slot ``t`` holds features of the parents of
  token ``t``. Head ``h`` starts peaked at distance ``h + 1``. ``head_windows="shared"``: every
  head sees ``d = 1 .. window``; ``"shifted"`` (the reference code): head ``h`` sees
  ``d = h + 1 .. h + window``. ``blocks.0.attn.hook_pattern``
  [batch head q_pos k_pos] is the attention of slots ``0 .. L-1``; the normalised outputs are at
  ``blocks.0.attn.hook_z`` [batch pos head d_vocab].
- **Selector** (FFN with normalisation, ``blocks.0.mlp``): the kernel over subsets ``S`` of heads
  (``1 <= |S| <= D``; with ``empty_subset`` also ``S = {}``, whose product is 1)::

      K(t, t') = sum_S  w_S  prod_{h in S} <v_t^h, v_t'^h>,     w_S = c_S^2 / sum_S' c_S'^2

  With ``token_subsets`` (the reference code's polynomial features also take the token's own
  component, which is the zero vector for the query), the subsets that contain the token
  component get their own ``c`` (``model.c_token``): their kernel terms are 0, but their ``c^2``
  enter the normaliser, so ``w_S = c_S^2 / (sum c^2 + sum c_token^2)``.
  The *shares* ``c_S^2 / sum_S' c_S'^2`` over the head subsets only [batch subset] are at
  ``blocks.0.mlp.hook_subset_weights`` (same for every sequence; the kernel uses them times the
  live fraction ``sum c^2 / (sum c^2 + sum c_token^2)``); ``model.subsets`` lists the subsets.
- **Layer 2, classifier** (``blocks.1``): query position ``q`` uses slot ``q + 1`` (the parents of
  the token to predict, all at positions ``<= q``), key ``k <= q`` uses slot ``k`` and carries the
  one-hot token ``x_k``: ``p_q = sum_k softmax_k(a K(q + 1, k)) x_k``. The output is
  ``log((1 - eps) p_q + eps / S)`` (a proper log-likelihood; ``eps`` keeps unseen tokens finite).
  ``final_probs`` returns ``p`` itself (the reference code's loss is a cross-entropy that treats
  ``p`` as logits). TransformerLens probes expect one head count for every layer, so the single classifier head is
  shown as ``H`` identical heads at ``blocks.1.attn.hook_attn_scores`` / ``hook_pattern`` and
  their outputs are averaged (patching one copy changes the output by ``1/H`` of it).

The last query slot ``L`` (parents of the token after the input) uses the same position weights;
it is computed beside the hooked pattern, which covers slots ``0 .. L-1``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Literal, cast

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from mechprobe.validation import integer
from toymodels.errors import ToyConfigError
from toymodels.induction.windows import WindowBatch

SUBSET_WEIGHTS_HOOK = "blocks.0.mlp.hook_subset_weights"


def subset_label(subset: tuple[int, ...]) -> str:
    """The text label of a subset of heads, e.g. ``(0, 1) -> "{0,1}"`` (``() -> "{}"``)."""
    return "{" + ",".join(str(h) for h in subset) + "}"


def head_distances(n_heads: int, window: int, head_windows: str) -> list[list[int]]:
    """The relative distances each layer-1 head may attend to (see the module docstring).

    Example: ``head_distances(3, 3, "shifted") == [[1, 2, 3], [2, 3, 4], [3, 4, 5]]``.
    """
    if head_windows == "shared":
        return [list(range(1, window + 1)) for _ in range(n_heads)]
    if head_windows == "shifted":
        return [list(range(h + 1, h + window + 1)) for h in range(n_heads)]
    raise ToyConfigError(f"head_windows must be 'shared' or 'shifted'; got {head_windows!r}.")


@dataclass(frozen=True)
class SimplifiedInductionConfig:
    """Settings of the simplified model (validated on construction).

    ``n_states`` = S (vocabulary), ``n_heads`` = H, ``max_subset`` = D, ``window`` = how many
    relative distances a layer-1 head sees (``head_windows``: ``"shared"`` 1 .. window for every
    head, ``"shifted"`` h + 1 .. h + window for head h), ``empty_subset`` / ``token_subsets``: the
    extra candidate subsets of the reference code (module docstring), ``n_ctx`` = the longest
    input. Initialisation: ``w_plus`` at head ``h``'s distance ``h + 1`` and ``w_minus`` at its
    other distances, every ``c_S = c_init``, ``a = a_init`` (``seed`` draws the full model's
    ``W_Q``, ``W_K`` with scale ``qk_init``). ``eps`` = the uniform mixture in the output.
    """

    n_states: int = 3
    n_heads: int = 3
    max_subset: int = 2
    window: int = 8
    n_ctx: int = 512
    w_plus: float = 3.0
    w_minus: float = 0.1
    c_init: float = 1.0
    a_init: float = 0.1
    eps: float = 1e-3
    head_windows: Literal["shared", "shifted"] = "shared"
    empty_subset: bool = False
    token_subsets: bool = False
    qk_init: float = 0.1
    seed: int = 0
    model_name: str = "chen-simplified"
    attention_dir: str = field(default="causal", init=False)

    def __post_init__(self) -> None:
        for name, low in (("n_states", 2), ("n_heads", 1), ("max_subset", 1), ("window", 1), ("n_ctx", 2)):
            value = getattr(self, name)
            integer(name, value, low, error=ToyConfigError)
        if self.max_subset > self.n_heads:
            raise ToyConfigError(
                f"max_subset (D) must be <= n_heads (H = {self.n_heads}); got {self.max_subset}."
            )
        if self.head_windows not in ("shared", "shifted"):
            raise ToyConfigError(f"head_windows must be 'shared' or 'shifted'; got {self.head_windows!r}.")
        if self.head_windows == "shared" and self.n_heads > self.window:
            raise ToyConfigError(
                f"window ({self.window}) must be >= n_heads ({self.n_heads}) with shared head windows: head h "
                f"starts at distance h + 1 (or use head_windows='shifted')."
            )
        if not 0 <= self.eps < 1:
            raise ToyConfigError(f"eps must lie in [0, 1); got {self.eps!r}.")
        for name in ("empty_subset", "token_subsets"):
            if not isinstance(getattr(self, name), bool):
                raise ToyConfigError(f"{name} must be true or false; got {getattr(self, name)!r}.")
        if not self.c_init or not (self.c_init == self.c_init):
            raise ToyConfigError(f"c_init must be a nonzero number (w_S = c_S^2 / sum c^2); got {self.c_init!r}.")

    @property
    def max_distance(self) -> int:
        """The largest relative distance any layer-1 head sees."""
        return self.window + (self.n_heads - 1 if self.head_windows == "shifted" else 0)

    # TransformerLens-style fields the probes read (ModelInfo.of).
    @property
    def n_layers(self) -> int:
        return 2

    @property
    def d_vocab(self) -> int:
        return self.n_states


class _CopierAttention(nn.Module):
    """Layer 1's hook points: the slots' attention pattern and their mixed features (the weights are the root's)."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()


class _Selector(nn.Module):
    """The selector's hook point: the subset weights."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_subset_weights = HookPoint()


class _CopierBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _CopierAttention()
        self.mlp = _Selector()


class _ClassifierAttention(nn.Module):
    """Layer 2's hook points: the attention scores and pattern."""

    def __init__(self) -> None:
        super().__init__()
        self.hook_pattern = HookPoint()
        self.hook_attn_scores = HookPoint()


class _ClassifierBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _ClassifierAttention()


class SimplifiedInductionModel(HookedRootModule):
    """The simplified model of the module docstring; ``forward(tokens)`` -> log-probs [batch pos d_vocab].

    The weights are initialised on the CPU, then moved to ``device``.

    Example::

        model = SimplifiedInductionModel(SimplifiedInductionConfig(n_states=3), device="cpu")
        log_probs = model(tokens)          # tokens [batch, L] with ids < 3
    """

    allowed: Tensor  # a buffer [head distance]: the distances in each head's window

    def __init__(self, cfg: SimplifiedInductionConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.cfg = cfg
        H, M = cfg.n_heads, cfg.max_distance
        smallest = 0 if cfg.empty_subset else 1
        self.subsets: tuple[tuple[int, ...], ...] = tuple(
            s for size in range(smallest, cfg.max_subset + 1) for s in itertools.combinations(range(H), size)
        )
        allowed = torch.zeros(H, M, dtype=torch.bool)
        for h, distances in enumerate(head_distances(H, cfg.window, cfg.head_windows)):
            allowed[h, [d - 1 for d in distances]] = True  # column d-1 holds distance d
        self.register_buffer("allowed", allowed, persistent=False)
        init = torch.where(allowed, float(cfg.w_minus), 0.0)
        init[torch.arange(H), torch.arange(H)] = float(cfg.w_plus)
        self.rel_logits = nn.Parameter(init)
        self.c = nn.Parameter(torch.full((len(self.subsets),), float(cfg.c_init)))
        # subsets of {token component} + heads that contain the token component (size <= D)
        n_token = sum(math.comb(H, size - 1) for size in range(1, cfg.max_subset + 1)) if cfg.token_subsets else 0
        self.c_token = nn.Parameter(torch.full((n_token,), float(cfg.c_init)))
        self.a = nn.Parameter(torch.tensor(float(cfg.a_init)))
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([_CopierBlock(), _ClassifierBlock()])
        self.setup()
        self.to(device)

    # -- pieces ---------------------------------------------------------------------------------
    def _layers(self) -> tuple[_CopierBlock, _ClassifierBlock]:
        """``blocks[0]`` and ``blocks[1]`` with their classes (nn.ModuleList does not keep them)."""
        return cast(_CopierBlock, self.blocks[0]), cast(_ClassifierBlock, self.blocks[1])

    @property
    def subset_labels(self) -> list[str]:
        return [subset_label(s) for s in self.subsets]

    def subset_weights(self) -> Float[Tensor, " subset"]:
        """The shares ``c_S^2 / sum_S' c_S'^2`` over the head subsets (the selector's normalised
        weights; they sum to 1; the reference code's figure plots these)."""
        squared = self.c.square()
        return squared / squared.sum()

    def live_fraction(self) -> Tensor:
        """``sum c^2 / (sum c^2 + sum c_token^2)``: 1 without token subsets."""
        live = self.c.square().sum()
        return live / (live + self.c_token.square().sum())

    def kernel_weights(self) -> Float[Tensor, " subset"]:
        """``w_S = c_S^2 / (sum c^2 + sum c_token^2)``: the weights the kernel uses."""
        return self.subset_weights() * self.live_fraction()

    def distance_weights(self) -> Float[Tensor, "head distance"]:
        """Head ``h``'s attention over distances ``1 .. max_distance`` far from the sequence start
        (0 outside the head's window)."""
        return self.rel_logits.masked_fill(~self.allowed, float("-inf")).softmax(-1)

    def slot_weights(self, n_slots: int, n_pos: int) -> tuple[Float[Tensor, "head slot distance"], Tensor]:
        """Layer-1 weights of slots ``0 .. n_slots-1`` over distances ``1 .. max_distance`` (0 where the
        key ``t - d`` is outside ``0 .. n_pos-1`` or the head's window) and the key positions [slot distance]."""
        H, M = self.rel_logits.shape
        t = torch.arange(n_slots, device=self.rel_logits.device)[:, None]
        d = torch.arange(1, M + 1, device=self.rel_logits.device)[None, :]
        key = t - d  # [slot, distance]
        ok = (key >= 0) & (key < n_pos) & self.allowed[:, None, :]  # [head, slot, distance]
        # a finite fill keeps gradients NaN-free on empty slots, whose rows are then zeroed by ``ok``
        logits = self.rel_logits[:, None, :].expand(H, n_slots, M).masked_fill(~ok, -1e9)
        return logits.softmax(-1) * ok, key

    def slot_pattern(self, n_slots: int, n_pos: int) -> Float[Tensor, "head slot k_pos"]:
        """Layer-1 attention of slots ``0 .. n_slots-1`` over token positions ``0 .. n_pos-1``."""
        weights, key = self.slot_weights(n_slots, n_pos)
        H, _, M = weights.shape
        pattern = torch.zeros(H, n_slots, n_pos, dtype=weights.dtype, device=weights.device)
        index = key.clamp(min=0, max=n_pos - 1).expand(H, n_slots, M)
        return pattern.scatter_add(2, index, weights)

    @staticmethod
    def _shifted(x: Tensor, max_distance: int) -> Tensor:
        """``out[b, t, m] = x[b, t - m - 1]`` (zero before the sequence start) [batch pos distance ...]."""
        L = x.shape[1]
        padded = torch.cat([x.new_zeros((x.shape[0], max_distance, *x.shape[2:])), x], dim=1)
        return torch.stack([padded[:, max_distance - d: max_distance - d + L] for d in range(1, max_distance + 1)],
                           dim=2)

    @staticmethod
    def _normalise(v: Tensor) -> Tensor:
        return v / ((v * v).sum(-1, keepdim=True) + 1e-12).sqrt()  # finite gradient at v = 0 (slot 0)

    def _check(self, tokens: Tensor) -> None:
        if tokens.ndim != 2 or tokens.dtype.is_floating_point:
            raise ToyConfigError(f"tokens must be integer ids [batch, pos]; got {tuple(tokens.shape)} {tokens.dtype}.")
        if tokens.shape[1] > self.cfg.n_ctx:
            raise ToyConfigError(f"sequences of {tokens.shape[1]} tokens exceed n_ctx = {self.cfg.n_ctx}.")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.n_states):
            raise ToyConfigError(f"token ids must lie in [0, {self.cfg.n_states}).")

    def subset_terms(self, gram: Float[Tensor, "head batch ..."]) -> Float[Tensor, "subset batch ..."]:
        """``prod_{h in S} gram[h]`` for every subset ``S`` (the kernel before the weights; 1 for ``{}``)."""
        return torch.stack([gram[list(subset)].prod(0) if subset else torch.ones_like(gram[0])
                            for subset in self.subsets])

    # -- layer 1 ---------------------------------------------------------------------------------
    def layer1_parameters(self) -> list[nn.Parameter]:
        """The parameters of the copier layer (trained in the ``w`` stage)."""
        return [self.rel_logits]

    def _key_features(self, tokens: Tensor, x: Tensor, *, hooked: bool) -> tuple[Tensor, Tensor | None]:
        """Normalised features of slots ``0 .. L-1`` [batch pos head d_vocab] and (hooked) the pattern."""
        n_batch, L = tokens.shape
        if not hooked:  # O(L * max_distance): the windowed form of the same mix
            weights, _ = self.slot_weights(L, L)
            return self._normalise(torch.einsum("htm,btms->bths", weights, self._shifted(x, weights.shape[-1]))), None
        slots = self.slot_pattern(L, L)
        pattern = self._layers()[0].attn.hook_pattern(slots.unsqueeze(0).expand(n_batch, -1, L, L))
        return self._normalise(torch.einsum("bhtk,bks->bths", pattern, x)), pattern

    def _query_features(self, tokens: Tensor, x: Tensor, key_pattern: Tensor | None) -> Tensor:
        """Normalised features of the query slots ``1 .. L`` [batch pos head d_vocab] (``L`` only when
        ``key_pattern`` is None). Slots ``1 .. L-1`` reuse the hooked key pattern."""
        L = tokens.shape[1]
        last = self.slot_pattern(L + 1, L)[:, L]
        v_last = torch.einsum("hk,bks->bhs", last, x)[:, None]
        if key_pattern is None:
            return self._normalise(v_last)
        v = torch.einsum("bhtk,bks->bths", key_pattern[:, :, 1:], x)
        return self._normalise(torch.cat([v, v_last], dim=1))

    # -- forward --------------------------------------------------------------------------------
    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]:
        self._check(tokens)
        n_batch, L = tokens.shape
        H, S = self.cfg.n_heads, self.cfg.n_states
        x = self.hook_embed(F.one_hot(tokens, S).to(self.rel_logits.dtype))
        copier, classifier = self._layers()
        u, pattern = self._key_features(tokens, x, hooked=True)
        u = copier.attn.hook_z(u)  # [b, slot 0..L-1, h, s]
        u_query = self._query_features(tokens, x, pattern)  # query q uses slot q + 1
        weights = copier.mlp.hook_subset_weights(self.subset_weights().expand(n_batch, -1))
        gram = torch.einsum("bqhs,bkhs->hbqk", u_query, u)
        kernel = torch.einsum("sbqk,bs->bqk", self.subset_terms(gram), weights) * self.live_fraction()
        causal = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        scores = (self.a * kernel).masked_fill(~causal, float("-inf"))
        scores = classifier.attn.hook_attn_scores(scores[:, None].expand(n_batch, H, L, L))
        pattern2 = classifier.attn.hook_pattern(scores.softmax(-1))
        p = torch.einsum("bhqk,bks->bqs", pattern2, x) / H
        return ((1 - self.cfg.eps) * p + self.cfg.eps / S).log()

    def window_batch(self, tokens: Int[Tensor, "batch pos"]) -> WindowBatch:
        """Group ``tokens`` [batch, L] by layer-1 window states for :meth:`final_probs` (see
        :class:`WindowBatch`); compute it once for a fixed training set."""
        self._check(tokens)
        return WindowBatch.of(tokens, self.cfg.max_distance, self.cfg.n_states, with_own=self.content_attention)

    content_attention = False  # whether layer-1 attention depends on the key slot's own token

    def _content_logits(self, windows: Tensor, own: Tensor | None) -> Tensor | float:
        """Token-dependent layer-1 logits [state head distance] (0 for the position-only model)."""
        return 0.0

    def _window_features(self, windows: Int[Tensor, "state distance"], own: Tensor | None) -> Tensor:
        """Normalised layer-1 features [state head d_vocab] of slots whose tokens at distances
        ``1 .. max_distance`` are ``windows`` (-1: before the sequence start) and whose own token is
        ``own`` (None: the zero query token)."""
        available = (windows >= 0)[:, None, :] & self.allowed[None]  # [state, head, distance]
        logits = self.rel_logits[None] + self._content_logits(windows, own)
        weights = logits.expand(available.shape).masked_fill(~available, -1e9).softmax(-1) * available
        onehot = F.one_hot(windows.clamp(min=0), self.cfg.n_states).to(weights.dtype) * (windows >= 0)[..., None]
        return self._normalise(self._output(torch.einsum("nhm,nms->nhs", weights, onehot)))

    def _output(self, mixed: Tensor) -> Tensor:
        """The layer-1 value map applied to the mixed one-hot tokens [... head d_vocab] (identity here)."""
        return mixed

    def final_probs(self, tokens: Int[Tensor, 'batch pos'] | WindowBatch) -> Float[Tensor, "batch d_vocab"]:
        """The classifier's mixture ``p`` of the last query (before the ``eps`` smoothing), without hooks:
        the path used for full-batch training.

        Slots are grouped by window state (:class:`WindowBatch`): the kernel is computed once per pair
        of (query state, key state) and gathered for each sequence, so a step costs O(batch * L) plus
        the table, not O(batch * L * H * S * window). Pass a precomputed :meth:`window_batch` to skip
        the grouping. Where the table would be larger than the slots (long windows: most slots are
        their own state) the slot-by-slot :meth:`final_probs_direct` runs instead (same values).
        A precomputed batch also keeps its :meth:`kernel_terms` while no layer-1 weight needs a
        gradient (:meth:`_kept_kernel_terms`): a stage that trains only ``c`` or ``a`` computes layer 1 once.
        """
        batch = tokens if isinstance(tokens, WindowBatch) else self.window_batch(tokens)
        terms = self._kept_kernel_terms(batch)
        if batch.grouping_pays:
            return self._grouped_probs(batch, terms)
        return self._slot_probs(batch.key_tokens, terms)

    def kernel_terms(self, batch: WindowBatch) -> Tensor:
        """What :meth:`final_probs` takes from layer 1: the kernel before the selector weights, through the
        (query state x key state) table [subset query_state key_state] where grouping pays
        (:attr:`WindowBatch.grouping_pays`), else slot by slot [subset batch key]. They depend on the tokens
        and the layer-1 weights only."""
        return self._table_terms(batch) if batch.grouping_pays else self._slot_terms(batch.key_tokens)

    def _kept_kernel_terms(self, batch: WindowBatch) -> Tensor:
        """:meth:`kernel_terms` of ``batch``, kept in ``batch.layer1_terms`` and reused until another model asks or a
        layer-1 weight (:meth:`layer1_parameters`) changes value; computed afresh, and not kept, where a layer-1
        weight needs a gradient (a kept tensor carries none)."""
        weights = self.layer1_parameters()
        if torch.is_grad_enabled() and any(w.requires_grad for w in weights):
            return self.kernel_terms(batch)
        return batch.layer1_terms.get(self, weights, lambda: self.kernel_terms(batch))

    def final_probs_grouped(self, batch: WindowBatch) -> Float[Tensor, "batch d_vocab"]:
        """:meth:`final_probs` through the (query state x key state) kernel table, whatever its size."""
        return self._grouped_probs(batch, self._table_terms(batch))

    def _table_terms(self, batch: WindowBatch) -> Float[Tensor, "subset query_state key_state"]:
        """The kernel terms of every (query state, key state) pair of ``batch``."""
        query = self._window_features(batch.query_windows, None)
        keys = self._window_features(batch.key_windows, batch.key_own if self.content_attention else None)
        return self.subset_terms(torch.einsum("qhs,khs->hqk", query, keys))

    def _grouped_probs(self, batch: WindowBatch, terms: Tensor) -> Float[Tensor, "batch d_vocab"]:
        """The mixtures from the table's kernel terms (:meth:`_table_terms`)."""
        table = torch.einsum("sqk,s->qk", terms, self.kernel_weights())
        scores = self.a * table[batch.query_index[:, None], batch.key_index]  # [batch, key]
        attention = scores.softmax(-1)
        p = attention.new_zeros(attention.shape[0], self.cfg.n_states)
        return p.scatter_add(1, batch.key_tokens, attention)

    def final_probs_direct(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab"]:
        """:meth:`final_probs` computed slot by slot (no grouping); a check of the fast path."""
        return self._slot_probs(tokens, self._slot_terms(tokens))

    def _slot_terms(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "subset batch key"]:
        """The kernel terms of the last query slot against every key slot of ``tokens``."""
        self._check(tokens)
        x = F.one_hot(tokens, self.cfg.n_states).to(self.rel_logits.dtype)
        u, _ = self._key_features(tokens, x, hooked=False)
        u_last = self._query_features(tokens, x, None)[:, 0]
        return self.subset_terms(torch.einsum("bhs,bkhs->hbk", u_last, u))

    def _slot_probs(self, tokens: Int[Tensor, "batch pos"], terms: Tensor) -> Float[Tensor, "batch d_vocab"]:
        """The mixtures from the slots' kernel terms (:meth:`_slot_terms`)."""
        x = F.one_hot(tokens, self.cfg.n_states).to(self.rel_logits.dtype)
        kernel = torch.einsum("sbk,s->bk", terms, self.kernel_weights())
        return torch.einsum("bk,bks->bs", (self.a * kernel).softmax(-1), x)

    def final_log_probs(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab"]:
        """``forward(tokens)[:, -1]`` (the prediction of the token after the input) from
        :meth:`final_probs`."""
        p = self.final_probs(tokens)
        return ((1 - self.cfg.eps) * p + self.cfg.eps / self.cfg.n_states).log()


