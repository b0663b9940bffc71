"""The PyTorch language-modelling tutorial transformer, as a TransformerLens hooked model.

Scan and Snap (Tian et al. 2023) checks its WikiText-2 prediction on the model of PyTorch's
"Language Modeling with nn.Transformer" tutorial (also the baseline ``TransformerModel`` of the
paper's reference code): a word embedding (uniform in ``+-0.1``) scaled by ``sqrt(d_model)``, plus
sinusoidal positions, dropout, then ``n_layers`` post-LayerNorm encoder layers with a causal mask
(``x = LN1(x + Dropout(Attn(x)))``, ``x = LN2(x + Dropout(W2 Dropout(ReLU(W1 x))))``, dropout also on
the attention weights, as ``nn.MultiheadAttention`` does), no final norm, and a linear decoder
(weight uniform in ``+-0.1``, bias 0). Initialisation follows ``nn.TransformerEncoderLayer``: the
stacked Q/K/V projection is Xavier-uniform over its ``[3 d_model, d_model]`` matrix with zero bias,
the output projection has ``nn.Linear``'s default weight and a zero bias, the FFN has
``nn.Linear``'s defaults.

Hooks (TransformerLens names): ``hook_embed`` (scaled embedding), ``hook_pos_embed``,
``blocks.{l}.hook_resid_pre``, ``blocks.{l}.attn.hook_q/k/v`` [batch pos head d_head],
``blocks.{l}.attn.hook_attn_scores`` / ``hook_pattern`` [batch head q_pos k_pos] (the pattern before
attention dropout), ``blocks.{l}.attn.hook_z``, ``blocks.{l}.hook_attn_out``, ``blocks.{l}.hook_resid_mid``
(after LN1), ``blocks.{l}.hook_mlp_out``, ``blocks.{l}.hook_resid_post`` (after LN2). Inputs are
``[batch pos]`` (batch first; the tutorial is sequence-first, which changes nothing else).

Example::

    model = TutorialTransformer(TutorialTransformerConfig(d_vocab=1000))
    logits = model(tokens)                     # [batch pos d_vocab]
    _, cache = model.run_with_cache(tokens)
    cache["blocks.0.attn.hook_pattern"]        # [batch head q_pos k_pos]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from mechprobe.validation import integer
from toymodels.errors import ToyConfigError


@dataclass(frozen=True)
class TutorialTransformerConfig:
    """Sizes of the tutorial model (defaults: the tutorial's ``emsize = d_hid = 200``, dropout 0.2, one
    layer and one head as in Scan and Snap's reference configuration); doubles as the probes' ``cfg``.

    ``n_ctx`` is the longest sequence (the tutorial's ``bptt = 35``); ``seed`` fixes the initialisation.
    """

    d_vocab: int
    d_model: int = 200
    d_mlp: int = 200
    n_heads: int = 1
    n_layers: int = 1
    n_ctx: int = 35
    dropout: float = 0.2
    layer_norm_eps: float = 1e-5
    seed: int = 0
    model_name: str = "pytorch-tutorial-transformer"

    attention_dir = "causal"

    def __post_init__(self) -> None:
        for name, low in (("d_vocab", 2), ("d_model", 1), ("d_mlp", 1), ("n_heads", 1), ("n_layers", 1),
                          ("n_ctx", 1), ("seed", 0)):
            value = getattr(self, name)
            integer(f"TutorialTransformerConfig.{name}", value, low, error=ToyConfigError)
        if self.d_model % self.n_heads:
            raise ToyConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}).")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ToyConfigError(f"TutorialTransformerConfig.dropout must lie in [0, 1); got {self.dropout!r}.")
        if not (isinstance(self.layer_norm_eps, (int, float)) and self.layer_norm_eps > 0):
            raise ToyConfigError(f"layer_norm_eps must be a number > 0; got {self.layer_norm_eps!r}.")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


def sinusoidal_positions(n_ctx: int, d_model: int) -> Float[Tensor, "pos d_model"]:
    """The tutorial's table: ``sin`` on even, ``cos`` on odd features, wavelengths up to ``10000 * 2 pi``."""
    position = torch.arange(n_ctx, dtype=torch.float32)[:, None]
    frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_ctx, d_model)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)[:, : d_model // 2]
    return table


def _uniform(shape: tuple[int, ...], bound: float, generator: torch.Generator) -> Tensor:
    return (torch.rand(shape, generator=generator) * 2 - 1) * bound


class _Attention(nn.Module):
    def __init__(self, cfg: TutorialTransformerConfig, generator: torch.Generator) -> None:
        super().__init__()
        d, h, d_head = cfg.d_model, cfg.n_heads, cfg.d_head
        stacked = _uniform((3 * d, d), math.sqrt(6.0 / (d + 3 * d)), generator)  # xavier_uniform_ of in_proj_weight
        # nn.MultiheadAttention computes x @ W.T per projection; head i uses rows [i*d_head, (i+1)*d_head)
        self.W_Q, self.W_K, self.W_V = (nn.Parameter(w.T.reshape(d, h, d_head).permute(1, 0, 2).contiguous())
                                        for w in stacked.split(d))
        self.b_Q, self.b_K, self.b_V = (nn.Parameter(torch.zeros(h, d_head)) for _ in range(3))
        self.W_O = nn.Parameter(_uniform((d, d), 1 / math.sqrt(d), generator).T.reshape(h, d_head, d).contiguous())
        self.b_O = nn.Parameter(torch.zeros(d))
        self.dropout = cfg.dropout
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        q = self.hook_q(torch.einsum("bpd,hde->bphe", x, self.W_Q) + self.b_Q)
        k = self.hook_k(torch.einsum("bpd,hde->bphe", x, self.W_K) + self.b_K)
        v = self.hook_v(torch.einsum("bpd,hde->bphe", x, self.W_V) + self.b_V)
        scores = torch.einsum("bqhe,bkhe->bhqk", q, k) / math.sqrt(q.shape[-1])
        n_pos = x.shape[1]
        future = torch.triu(torch.ones(n_pos, n_pos, dtype=torch.bool, device=x.device), diagonal=1)
        scores = self.hook_attn_scores(scores.masked_fill(future, float("-inf")))
        pattern = self.hook_pattern(scores.softmax(-1))
        pattern = F.dropout(pattern, self.dropout, self.training)
        z = self.hook_z(torch.einsum("bhqk,bkhe->bqhe", pattern, v))
        return torch.einsum("bqhe,hed->bqd", z, self.W_O) + self.b_O


class _Block(nn.Module):
    def __init__(self, cfg: TutorialTransformerConfig, generator: torch.Generator) -> None:
        super().__init__()
        self.attn = _Attention(cfg, generator)
        self.ln1 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.ln2 = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps)
        self.mlp_in = nn.Linear(cfg.d_model, cfg.d_mlp)
        self.mlp_out = nn.Linear(cfg.d_mlp, cfg.d_model)
        with torch.no_grad():  # nn.Linear's default initialisation, drawn from our generator
            for layer in (self.mlp_in, self.mlp_out):
                bound = 1 / math.sqrt(layer.in_features)
                layer.weight.copy_(_uniform(tuple(layer.weight.shape), bound, generator))
                layer.bias.copy_(_uniform(tuple(layer.bias.shape), bound, generator))
        self.dropout = cfg.dropout
        self.hook_resid_pre = HookPoint()
        self.hook_attn_out = HookPoint()
        self.hook_resid_mid = HookPoint()
        self.hook_mlp_out = HookPoint()
        self.hook_resid_post = HookPoint()

    def forward(self, x: Float[Tensor, "batch pos d_model"]) -> Float[Tensor, "batch pos d_model"]:
        x = self.hook_resid_pre(x)
        attn_out = self.hook_attn_out(self.attn(x))
        x = self.hook_resid_mid(self.ln1(x + F.dropout(attn_out, self.dropout, self.training)))
        hidden = F.dropout(F.relu(self.mlp_in(x)), self.dropout, self.training)
        mlp_out = self.hook_mlp_out(self.mlp_out(hidden))
        return self.hook_resid_post(self.ln2(x + F.dropout(mlp_out, self.dropout, self.training)))


class TutorialTransformer(HookedRootModule):
    """The tutorial's ``TransformerModel`` (module docstring); ``forward(tokens)`` gives ``[batch pos d_vocab]``."""

    positions: Tensor  # a buffer [n_ctx d_model]

    def __init__(self, cfg: TutorialTransformerConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        if not isinstance(cfg, TutorialTransformerConfig):
            raise ToyConfigError(f"TutorialTransformer needs a TutorialTransformerConfig; got {type(cfg).__name__}.")
        self.cfg = cfg
        generator = torch.Generator().manual_seed(cfg.seed)
        self.W_E = nn.Parameter(_uniform((cfg.d_vocab, cfg.d_model), 0.1, generator))
        self.register_buffer("positions", sinusoidal_positions(cfg.n_ctx, cfg.d_model), persistent=False)
        self.blocks = nn.ModuleList([_Block(cfg, generator) for _ in range(cfg.n_layers)])
        self.W_U = nn.Parameter(_uniform((cfg.d_model, cfg.d_vocab), 0.1, generator))
        self.b_U = nn.Parameter(torch.zeros(cfg.d_vocab))
        self.hook_embed = HookPoint()
        self.hook_pos_embed = HookPoint()
        self.setup()
        self.to(device)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]:
        if tokens.ndim != 2 or not 1 <= tokens.shape[1] <= self.cfg.n_ctx:
            raise ToyConfigError(f"TutorialTransformer expects tokens [batch, pos] with 1 <= pos <= n_ctx = "
                                 f"{self.cfg.n_ctx}; got shape {tuple(tokens.shape)}.")
        embed = self.hook_embed(self.W_E[tokens] * math.sqrt(self.cfg.d_model))
        positions = self.hook_pos_embed(self.positions[: tokens.shape[1]].expand(tokens.shape[0], -1, -1))
        x = F.dropout(embed + positions, self.cfg.dropout, self.training)
        for block in self.blocks:
            x = block(x)
        return x @ self.W_U + self.b_U
