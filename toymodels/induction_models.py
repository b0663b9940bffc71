"""Chen et al. (2024)'s simplified two-attention-layer transformer as a TransformerLens hooked model.

Positions follow TransformerLens: the output at position ``q`` predicts token ``q + 1``.

- **Layer 1, copier** (``blocks.0``): ``H`` position-only heads. Head ``h`` gives *slot* ``t`` the
  mix ``v_t^h = sum_d softmax_d(w[h, d]) x_{t-d}`` over distances ``d = 1 .. window`` (``d <= t``;
  slot 0 sees nothing and is 0), then L2-normalises it. Slot ``t`` holds features of the parents
  of token ``t``. Head ``h`` starts peaked at distance ``h + 1``. ``blocks.0.attn.hook_pattern``
  [batch head q_pos k_pos] is the attention of slots ``0 .. L-1``; the normalised outputs are at
  ``blocks.0.attn.hook_z`` [batch pos head d_vocab].
- **Selector** (FFN with normalisation, ``blocks.0.mlp``): the kernel over subsets ``S`` of heads
  (``1 <= |S| <= D``)::

      K(t, t') = sum_S  w_S  prod_{h in S} <v_t^h, v_t'^h>,     w_S = c_S^2 / sum_S' c_S'^2

  The weights ``w_S`` [batch subset] are at ``blocks.0.mlp.hook_subset_weights`` (same for every
  sequence); ``model.subsets`` lists the subsets in that order.
- **Layer 2, classifier** (``blocks.1``): query position ``q`` uses slot ``q + 1`` (the parents of
  the token to predict, all at positions ``<= q``), key ``k <= q`` uses slot ``k`` and carries the
  one-hot token ``x_k``: ``p_q = sum_k softmax_k(a K(q + 1, k)) x_k``. The output is
  ``log((1 - eps) p_q + eps / S)`` (a proper log-likelihood; ``eps`` keeps unseen tokens finite).
  TransformerLens probes expect one head count for every layer, so the single classifier head is
  shown as ``H`` identical heads at ``blocks.1.attn.hook_attn_scores`` / ``hook_pattern`` and
  their outputs are averaged (patching one copy changes the output by ``1/H`` of it).

The last query slot ``L`` (parents of the token after the input) uses the same position weights;
it is computed beside the hooked pattern, which covers slots ``0 .. L-1``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from toymodels.errors import ToyConfigError

SUBSET_WEIGHTS_HOOK = "blocks.0.mlp.hook_subset_weights"


def subset_label(subset: tuple[int, ...]) -> str:
    """The text label of a subset of heads, e.g. ``(0, 1) -> "{0,1}"``."""
    return "{" + ",".join(str(h) for h in subset) + "}"


@dataclass(frozen=True)
class SimplifiedInductionConfig:
    """Settings of the simplified model (validated on construction).

    ``n_states`` = S (vocabulary), ``n_heads`` = H, ``max_subset`` = D, ``window`` = the largest
    relative distance a layer-1 head sees, ``n_ctx`` = the longest input. Initialisation:
    ``w_plus`` at head ``h``'s distance ``h + 1`` and ``w_minus`` elsewhere, every ``c_S = c_init``,
    ``a = a_init`` (``seed`` draws the full model's ``W_Q``, ``W_K``). ``eps`` = the uniform
    mixture in the output.
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
    seed: int = 0
    model_name: str = "chen-simplified"
    attention_dir: str = field(default="causal", init=False)

    def __post_init__(self) -> None:
        for name, low in (("n_states", 2), ("n_heads", 1), ("max_subset", 1), ("window", 1), ("n_ctx", 2)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ToyConfigError(f"{name} must be an integer >= {low}; got {value!r}.")
        if self.max_subset > self.n_heads:
            raise ToyConfigError(
                f"max_subset (D) must be <= n_heads (H = {self.n_heads}); got {self.max_subset}."
            )
        if self.n_heads > self.window:
            raise ToyConfigError(
                f"window ({self.window}) must be >= n_heads ({self.n_heads}): head h starts at distance h + 1."
            )
        if not 0 <= self.eps < 1:
            raise ToyConfigError(f"eps must lie in [0, 1); got {self.eps!r}.")

    # TransformerLens-style fields the probes read (ModelInfo.of).
    @property
    def n_layers(self) -> int:
        return 2

    @property
    def d_vocab(self) -> int:
        return self.n_states


class SimplifiedInductionModel(HookedRootModule):
    """The simplified model of the module docstring; ``forward(tokens)`` -> log-probs [batch pos d_vocab].

    The weights are initialised on the CPU, then moved to ``device``.

    Example::

        model = SimplifiedInductionModel(SimplifiedInductionConfig(n_states=3), device="cpu")
        log_probs = model(tokens)          # tokens [batch, L] with ids < 3
    """

    def __init__(self, cfg: SimplifiedInductionConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.cfg = cfg
        H, M = cfg.n_heads, cfg.window
        self.subsets: tuple[tuple[int, ...], ...] = tuple(
            s for size in range(1, cfg.max_subset + 1) for s in itertools.combinations(range(H), size)
        )
        init = torch.full((H, M), float(cfg.w_minus))
        init[torch.arange(H), torch.arange(H)] = float(cfg.w_plus)  # column d-1 holds distance d
        self.rel_logits = nn.Parameter(init)
        self.c = nn.Parameter(torch.full((len(self.subsets),), float(cfg.c_init)))
        self.a = nn.Parameter(torch.tensor(float(cfg.a_init)))
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([nn.Module(), nn.Module()])
        for block in self.blocks:
            block.attn = nn.Module()
            block.attn.hook_pattern = HookPoint()
        self.blocks[0].attn.hook_z = HookPoint()
        self.blocks[0].mlp = nn.Module()
        self.blocks[0].mlp.hook_subset_weights = HookPoint()
        self.blocks[1].attn.hook_attn_scores = HookPoint()
        self.setup()
        self.to(device)

    # -- pieces ---------------------------------------------------------------------------------
    @property
    def subset_labels(self) -> list[str]:
        return [subset_label(s) for s in self.subsets]

    def subset_weights(self) -> Float[Tensor, " subset"]:
        """``w_S = c_S^2 / sum c^2`` (the selector's normalised weights)."""
        squared = self.c.square()
        return squared / squared.sum()

    def distance_weights(self) -> Float[Tensor, "head distance"]:
        """Head ``h``'s attention over distances ``1 .. window`` far from the sequence start."""
        return self.rel_logits.softmax(-1)

    def slot_pattern(self, n_slots: int, n_pos: int) -> Float[Tensor, "head slot k_pos"]:
        """Layer-1 attention of slots ``0 .. n_slots-1`` over token positions ``0 .. n_pos-1``."""
        H, M = self.rel_logits.shape
        t = torch.arange(n_slots, device=self.rel_logits.device)[:, None]
        d = torch.arange(1, M + 1, device=self.rel_logits.device)[None, :]
        key = t - d  # [slot, distance]
        ok = (key >= 0) & (key < n_pos)
        # a finite fill keeps gradients NaN-free on slot 0, whose row is then zeroed by ``ok``
        logits = self.rel_logits[:, None, :].expand(H, n_slots, M).masked_fill(~ok, -1e9)
        weights = logits.softmax(-1)
        pattern = torch.zeros(H, n_slots, n_pos, dtype=weights.dtype, device=weights.device)
        index = key.clamp(min=0).expand(H, n_slots, M)
        return pattern.scatter_add(2, index, weights * ok)

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
        """``prod_{h in S} gram[h]`` for every subset ``S`` (the kernel before the weights)."""
        return torch.stack([gram[list(subset)].prod(0) for subset in self.subsets])

    # -- layer 1 ---------------------------------------------------------------------------------
    def layer1_parameters(self) -> list[nn.Parameter]:
        """The parameters of the copier layer (trained in the ``w`` stage)."""
        return [self.rel_logits]

    def _key_features(self, tokens: Tensor, x: Tensor, *, hooked: bool) -> tuple[Tensor, Tensor | None]:
        """Normalised features of slots ``0 .. L-1`` [batch pos head d_vocab] and (hooked) the pattern."""
        n_batch, L = tokens.shape
        slots = self.slot_pattern(L, L)
        if not hooked:
            return self._normalise(torch.einsum("htk,bks->bths", slots, x)), None
        pattern = self.blocks[0].attn.hook_pattern(slots.unsqueeze(0).expand(n_batch, -1, L, L))
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
        u, pattern = self._key_features(tokens, x, hooked=True)
        u = self.blocks[0].attn.hook_z(u)  # [b, slot 0..L-1, h, s]
        u_query = self._query_features(tokens, x, pattern)  # query q uses slot q + 1
        weights = self.blocks[0].mlp.hook_subset_weights(self.subset_weights().expand(n_batch, -1))
        gram = torch.einsum("bqhs,bkhs->hbqk", u_query, u)
        kernel = torch.einsum("sbqk,bs->bqk", self.subset_terms(gram), weights)
        causal = torch.ones(L, L, dtype=torch.bool, device=tokens.device).tril()
        scores = (self.a * kernel).masked_fill(~causal, float("-inf"))
        scores = self.blocks[1].attn.hook_attn_scores(scores[:, None].expand(n_batch, H, L, L))
        pattern2 = self.blocks[1].attn.hook_pattern(scores.softmax(-1))
        p = torch.einsum("bhqk,bks->bqs", pattern2, x) / H
        return ((1 - self.cfg.eps) * p + self.cfg.eps / S).log()

    def final_log_probs(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab"]:
        """``forward(tokens)[:, -1]`` (the prediction of the token after the input) in O(L) per
        sequence, without hooks: the path used for full-batch training."""
        self._check(tokens)
        S = self.cfg.n_states
        x = F.one_hot(tokens, S).to(self.rel_logits.dtype)
        u, _ = self._key_features(tokens, x, hooked=False)
        u_last = self._query_features(tokens, x, None)[:, 0]
        gram = torch.einsum("bhs,bkhs->hbk", u_last, u)
        kernel = torch.einsum("sbk,s->bk", self.subset_terms(gram), self.subset_weights())
        p = torch.einsum("bk,bks->bs", (self.a * kernel).softmax(-1), x)
        return ((1 - self.cfg.eps) * p + self.cfg.eps / S).log()


class FullInductionModel(SimplifiedInductionModel):
    """The appendix's full model: layer-1 heads with ``W_Q``, ``W_K``, ``W_OV`` plus the relative
    position bias, then normalisation; the same selector and classifier.

    Head ``h`` gives key slot ``t`` (which holds token ``x_t``) the attention over distances
    ``d = 1 .. window``::

        softmax_d( w[h, d] + (W_Q^h x_t) . (W_K^h x_{t-d}) ),     v_t^h = sum_d A[d] W_OV^h x_{t-d}

    normalised to unit L2 norm. The query slot of position ``q`` (slot ``q + 1``) must not see the
    token it predicts, so its query token is zero (as the paper's code appends a zero token):
    its attention is position-only, its values ``W_OV^h x``. ``blocks.0.attn.hook_pattern`` shows
    the key slots' (token-dependent) attention. ``W_OV`` starts at the identity, ``W_Q`` and
    ``W_K`` small and random (seeded by ``cfg.seed``), so at initialisation the model is close to
    the simplified one.
    """

    def __init__(self, cfg: SimplifiedInductionConfig, *, device: str | torch.device = "cpu",
                 qk_init_scale: float = 0.1) -> None:
        super().__init__(cfg)
        H, S = cfg.n_heads, cfg.n_states
        generator = torch.Generator().manual_seed(cfg.seed)
        self.W_Q = nn.Parameter(qk_init_scale * torch.randn(H, S, S, generator=generator))
        self.W_K = nn.Parameter(qk_init_scale * torch.randn(H, S, S, generator=generator))
        self.W_OV = nn.Parameter(torch.eye(S).repeat(H, 1, 1))
        self.to(device)

    def layer1_parameters(self) -> list[nn.Parameter]:
        return [self.rel_logits, self.W_Q, self.W_K, self.W_OV]

    def _windowed(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Key-slot attention over distances [batch head pos distance], key ids and validity."""
        n_batch, L = tokens.shape
        M = self.cfg.window
        t = torch.arange(L, device=tokens.device)[:, None]
        d = torch.arange(1, M + 1, device=tokens.device)[None, :]
        key = t - d
        ok = key >= 0
        key_tok = tokens[:, key.clamp(min=0)]  # [b, L, M]
        bilinear = torch.einsum("hds,hdr->hsr", self.W_Q, self.W_K)  # B_h[s, r] = (W_Q e_s) . (W_K e_r)
        content = bilinear[:, tokens[:, :, None], key_tok]  # [h, b, L, M]
        logits = (self.rel_logits[:, None, None, :] + content).permute(1, 0, 2, 3)
        weights = logits.masked_fill(~ok, -1e9).softmax(-1) * ok  # slot 0 gets a zero row
        return weights, key, ok

    def _key_features(self, tokens: Tensor, x: Tensor, *, hooked: bool) -> tuple[Tensor, Tensor | None]:
        n_batch, L = tokens.shape
        weights, key, ok = self._windowed(tokens)
        key_x = x[:, key.clamp(min=0)]  # [b, L, M, S]
        if hooked:
            dense = torch.zeros(n_batch, self.cfg.n_heads, L, L, dtype=weights.dtype, device=weights.device)
            index = key.clamp(min=0).expand(n_batch, self.cfg.n_heads, L, -1)
            pattern = self.blocks[0].attn.hook_pattern(dense.scatter_add(3, index, weights))
            mixed = torch.einsum("bhtk,bks->bths", pattern, x)
        else:
            pattern = None
            mixed = torch.einsum("bhtm,btms->bths", weights, key_x)
        return self._normalise(torch.einsum("hrs,bths->bthr", self.W_OV, mixed)), pattern

    def _query_features(self, tokens: Tensor, x: Tensor, key_pattern: Tensor | None) -> Tensor:
        L = tokens.shape[1]
        slots = self.slot_pattern(L + 1, L)
        rows = slots[:, L:] if key_pattern is None else slots[:, 1:]
        mixed = torch.einsum("htk,bks->bths", rows, x)
        return self._normalise(torch.einsum("hrs,bths->bthr", self.W_OV, mixed))
