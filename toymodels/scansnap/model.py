"""Scan and Snap's 1-layer Y/Z transformer as a TransformerLens hooked model.

Inputs are one-hot tokens; there is no positional information, no residual stream and no
``1/sqrt(d)``. For the query (the last token ``m``) the attention logit of a context position
holding token ``l`` is ``Z[m, l]``; the softmax runs over the ``L - 1`` context positions (the
query itself is excluded). The pooled context ``sum_k attn_k onehot(x_k)`` is L2-normalised and
the logits are ``Y @ pooled``.

Attention-pattern convention (``blocks.0.attn.hook_pattern``, [batch head q_pos k_pos], one
head): row ``q`` is the attention that token ``x_q`` would pay, as a query, to every *other*
position, ``softmax_{k != q} Z[x_q, x_k]``. Only the last row (the real query) reaches the
logits and the loss; probes of this model should read query row ``-1`` (the probes'
``query_position="last"``). The other rows are computed with the same ``Z`` without gradient,
so every row is a proper distribution and generic probes see meaningful numbers. The logits
are returned for every position (each row's pooled context through ``Y``), as TransformerLens
models do; the loss uses position ``-1``. ``query_logits`` computes only that position, without
hooks: the training fast path (``L`` instead of ``L^2`` attention entries per sequence).

Hooks: ``blocks.0.attn.hook_attn_scores`` (logits, ``-inf`` on the diagonal),
``blocks.0.attn.hook_pattern``, ``blocks.0.attn.hook_z`` (pooled one-hot context,
[batch pos head d_vocab]) and ``blocks.0.hook_attn_out`` (its L2-normalised version).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from jaxtyping import Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from mechprobe.validation import integer
from toymodels.errors import ToyConfigError

_EPS = 1e-12


@dataclass(frozen=True)
class YZModelConfig:
    """Size and initialisation of the Y/Z model; doubles as the ``cfg`` the probes read.

    ``init="zero"`` sets Y = Z = 0 (the paper's main run, loss ``ln(d_vocab)`` at step 0);
    ``init="linear"`` draws both uniformly in ``+-1/sqrt(d_vocab)`` (nn.Linear's default).
    """

    d_vocab: int
    n_ctx: int = 128
    init: Literal["zero", "linear"] = "zero"
    seed: int = 0
    model_name: str = "scansnap-yz"

    def __post_init__(self) -> None:
        for name, low in (("d_vocab", 2), ("n_ctx", 2)):
            value = getattr(self, name)
            integer(f"YZModelConfig.{name}", value, low, error=ToyConfigError)
        if self.init not in ("zero", "linear"):
            raise ToyConfigError(f"YZModelConfig.init must be 'zero' or 'linear'; got {self.init!r}.")

    n_layers = 1
    n_heads = 1
    attention_dir = "bidirectional"


class YZTransformer(HookedRootModule):
    """The Y/Z model: ``Z`` [query token, key token] attention logits, ``Y`` [output token, d_vocab] decoder.

    The weights are initialised on the CPU (``cfg.seed``), then moved to ``device``.

    Example::

        model = YZTransformer(YZModelConfig(d_vocab=34), device="cpu")
        logits = model(tokens)            # [batch pos d_vocab]; the prediction is logits[:, -1]
    """

    def __init__(self, cfg: YZModelConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        if not isinstance(cfg, YZModelConfig):
            raise ToyConfigError(f"YZTransformer needs a YZModelConfig; got {type(cfg).__name__}.")
        self.cfg = cfg
        self.Y = nn.Parameter(torch.zeros(cfg.d_vocab, cfg.d_vocab))
        self.Z = nn.Parameter(torch.zeros(cfg.d_vocab, cfg.d_vocab))
        if cfg.init == "linear":
            generator = torch.Generator().manual_seed(cfg.seed)
            bound = cfg.d_vocab ** -0.5
            with torch.no_grad():
                for weight in (self.Y, self.Z):
                    weight.copy_((torch.rand(weight.shape, generator=generator) * 2 - 1) * bound)
        self.blocks = nn.ModuleList([_YZBlock()])
        self.setup()
        self.to(device)

    def forward(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch pos d_vocab"]:
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ToyConfigError(
                f"YZTransformer expects tokens [batch, pos] with pos >= 2 (context + query); got shape "
                f"{tuple(tokens.shape)}."
            )
        block = cast(_YZBlock, self.blocks[0])  # nn.ModuleList does not keep its items' class
        n_batch, n_pos = tokens.shape
        with torch.no_grad():
            # scores[b, q, k] = Z[tokens[b, q], tokens[b, k]]; rows then gather: ~4x faster than 2-D indexing
            scores = self.Z[tokens].gather(2, tokens[:, None, :].expand(-1, n_pos, -1))
            scores.diagonal(dim1=1, dim2=2).fill_(float("-inf"))
        if torch.is_grad_enabled() and self.Z.requires_grad:
            # only the real query row carries gradient; it excludes itself (the last key)
            last = self.Z[tokens[:, -1:, None], tokens[:, None, :-1]]
            last = torch.cat([last, scores[:, -1:, -1:]], dim=2)
            scores = torch.cat([scores[:, :-1], last], dim=1)
        scores = scores[:, None]
        scores = block.attn.hook_attn_scores(scores)
        pattern = block.attn.hook_pattern(scores.softmax(dim=-1))
        pooled = torch.zeros(n_batch, n_pos, self.cfg.d_vocab, dtype=pattern.dtype, device=pattern.device)
        pooled = pooled.scatter_add(2, tokens[:, None, :].expand(n_batch, n_pos, n_pos), pattern[:, 0])
        pooled = block.attn.hook_z(pooled[:, :, None, :])[:, :, 0, :]
        normalised = block.hook_attn_out(pooled / pooled.norm(dim=-1, keepdim=True).clamp_min(_EPS))
        return normalised @ self.Y.T

    def query_logits(self, tokens: Int[Tensor, "batch pos"]) -> Float[Tensor, "batch d_vocab"]:
        """``forward(tokens)[:, -1]`` computed for the query row only (the training fast path; no hooks fire)."""
        if tokens.ndim != 2 or tokens.shape[1] < 2:
            raise ToyConfigError(
                f"YZTransformer expects tokens [batch, pos] with pos >= 2 (context + query); got shape "
                f"{tuple(tokens.shape)}."
            )
        context = tokens[:, :-1]
        attention = self.Z[tokens[:, -1:], context].softmax(dim=-1)
        pooled = torch.zeros(tokens.shape[0], self.cfg.d_vocab, dtype=attention.dtype, device=attention.device)
        pooled = pooled.scatter_add(1, context, attention)
        return (pooled / pooled.norm(dim=-1, keepdim=True).clamp_min(_EPS)) @ self.Y.T

    def expected_attention(
        self, query_tokens: Int[Tensor, " fact"], context_probs: Float[Tensor, "fact d_vocab"]
    ) -> Float[Tensor, "fact d_vocab"]:
        """The long-context attention composition ``c_l`` proportional to ``P(l | fact) exp(Z[m, l])`` per fact
        (float64, on the model's device)."""
        logits = self.Z.detach().double()[query_tokens.to(self.Z.device, torch.long)]
        prior = context_probs.to(logits.device, torch.float64)
        weights = prior * torch.exp(logits - logits.max(-1, keepdim=True).values)
        return weights / weights.sum(-1, keepdim=True)


class _YZAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()


class _YZBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _YZAttention()
        self.hook_attn_out = HookPoint()
