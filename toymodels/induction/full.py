"""Chen et al. (2024)'s full two-attention-layer model (appendix B) as a TransformerLens hooked model.

Layer 1 has ``W_Q``, ``W_K``, ``W_OV`` plus the relative position bias, then normalisation; the
selector and classifier are those of :class:`~toymodels.induction.simplified.SimplifiedInductionModel`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toymodels.induction.simplified import SimplifiedInductionConfig, SimplifiedInductionModel


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
    ``W_K`` small and random (``cfg.qk_init`` times standard normal entries, seeded by
    ``cfg.seed``), so at initialisation the model is close to the simplified one.
    """

    def __init__(self, cfg: SimplifiedInductionConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__(cfg)
        H, S = cfg.n_heads, cfg.n_states
        generator = torch.Generator().manual_seed(cfg.seed)
        self.W_Q = nn.Parameter(cfg.qk_init * torch.randn(H, S, S, generator=generator))
        self.W_K = nn.Parameter(cfg.qk_init * torch.randn(H, S, S, generator=generator))
        self.W_OV = nn.Parameter(torch.eye(S).repeat(H, 1, 1))
        self.to(device)

    content_attention = True

    def layer1_parameters(self) -> list[nn.Parameter]:
        return [self.rel_logits, self.W_Q, self.W_K, self.W_OV]

    def _content_logits(self, windows: Tensor, own: Tensor | None) -> Tensor | float:
        if own is None:  # the query slot's own token is the appended zero token
            return 0.0
        bilinear = torch.einsum("hds,hdr->hsr", self.W_Q, self.W_K)  # B_h[s, r] = (W_Q e_s) . (W_K e_r)
        content = bilinear[:, own[:, None], windows.clamp(min=0)]  # [head, state, distance]
        return content.permute(1, 0, 2)

    def _output(self, mixed: Tensor) -> Tensor:
        return torch.einsum("hrs,nhs->nhr", self.W_OV, mixed)

    def _windowed(self, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Key-slot attention over distances [batch head pos distance], key ids and validity."""
        _n_batch, L = tokens.shape
        M = self.cfg.max_distance
        t = torch.arange(L, device=tokens.device)[:, None]
        d = torch.arange(1, M + 1, device=tokens.device)[None, :]
        key = t - d
        ok = (key >= 0)[None] & self.allowed[:, None, :]  # [h, L, M]
        key_tok = tokens[:, key.clamp(min=0)]  # [b, L, M]
        bilinear = torch.einsum("hds,hdr->hsr", self.W_Q, self.W_K)  # B_h[s, r] = (W_Q e_s) . (W_K e_r)
        content = bilinear[:, tokens[:, :, None], key_tok]  # [h, b, L, M]
        logits = (self.rel_logits[:, None, None, :] + content).permute(1, 0, 2, 3)
        weights = logits.masked_fill(~ok[None], -1e9).softmax(-1) * ok[None]  # empty slots get a zero row
        return weights, key, ok

    def _key_features(self, tokens: Tensor, x: Tensor, *, hooked: bool) -> tuple[Tensor, Tensor | None]:
        n_batch, L = tokens.shape
        weights, key, _ok = self._windowed(tokens)
        key_x = x[:, key.clamp(min=0)]  # [b, L, M, S]
        if hooked:
            dense = torch.zeros(n_batch, self.cfg.n_heads, L, L, dtype=weights.dtype, device=weights.device)
            index = key.clamp(min=0).expand(n_batch, self.cfg.n_heads, L, -1)
            pattern = self._layers()[0].attn.hook_pattern(dense.scatter_add(3, index, weights))
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
