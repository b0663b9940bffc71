"""Hooked models with planted heads whose outputs can be knocked out at ``hook_z``: a causal model with one induction
head, and an encoder whose masked-token loss has closed forms.

Heads attend by rule (no weights to learn). Each head's value is the one-hot of the key token, so ``z[b, q, h]`` is
the head's attention-weighted token distribution (``d_head = d_vocab``). Block ``l`` adds
``sum_h weight[l, h] * z[b, q, h]`` to a residual stream that starts at zero (``blocks.{l}.hook_resid_pre`` is its
input), and ``model.unembed`` multiplies the final residual by ``SCALE``, so the logits are
``SCALE * sum_{l,h} weight[l, h] * z[b, q, l, h]``. ``head`` picks how the logits leave the residual:
``"unembed"`` (above), ``"softcap"`` (``CAP * tanh(unembed(x) / CAP)`` after the unembedding, as Gemma 2 does) or
``"inline"`` (``SCALE * x`` with no ``unembed`` module). ``calls[l]`` counts the times block ``l`` computed.

:class:`PlantedInductionModel`: two causal layers of four heads. Layer 1 head 0 attends to the token after an
earlier copy of the current token (``induction=True``; uniform otherwise) with weight 1: it alone predicts the
repeated half of ``[BOS] X X``. Every other head (previous token in layer 0, uniform in layer 1) has weight 0.1.

:class:`PlantedMaskedEncoder`: two bidirectional layers of two heads on ``[BOS] X X``. Layer 1 head 0 (``TWIN_HEAD``)
attends to the same token of the other copy, head 1 (``SELF_HEAD``) to its own position, both with weight 1;
layer 0's uniform heads have weight 0. At a masked position of the second copy whose twin is unmasked, the logits
are ``SCALE * (onehot(original) + onehot(MASK))``, so the masked-token loss is ``log(2 + (V - 2) e^-SCALE)``; with the
twin head zeroed ``log(e^SCALE + V - 1)``, with the self head zeroed ``log(1 + (V - 1) e^-SCALE)`` (V = d_vocab).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from tests.hooked_models import OracleConfig

SCALE = 8.0
CAP = 5.0
INDUCTION_HEAD = (1, 0)
TWIN_HEAD = (1, 0)
SELF_HEAD = (1, 1)


class Unembed(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SCALE * x


class RuleBlock(nn.Module):
    """One layer of rule heads: adds the weighted one-hot values they attend to onto the residual."""

    def __init__(self, layer: int, calls: list[int], *, with_z: bool, resid_hook: bool) -> None:
        super().__init__()
        self.layer, self.calls, self.with_z = layer, calls, with_z
        if resid_hook:
            self.hook_resid_pre = HookPoint()
        self.attn = nn.Module()
        self.attn.hook_pattern = HookPoint()
        if with_z:
            self.attn.hook_z = HookPoint()

    def forward(self, resid: torch.Tensor, values: torch.Tensor, pattern: torch.Tensor,
                weight: torch.Tensor) -> torch.Tensor:
        self.calls[self.layer] += 1
        if hasattr(self, "hook_resid_pre"):
            resid = self.hook_resid_pre(resid)
        pattern = self.attn.hook_pattern(pattern)
        z = torch.einsum("bhqk,bkd->bqhd", pattern, values)
        if self.with_z:
            z = self.attn.hook_z(z)
        return resid + torch.einsum("bqhd,h->bqd", z, weight)


class RuleModel(HookedRootModule):
    """Residual blocks of rule heads (``patterns``: one ``[batch head q k]`` per layer) and a scaled unembedding."""

    def __init__(self, cfg: OracleConfig, weight: torch.Tensor, *, with_z: bool, head: str, resid_hook: bool) -> None:
        super().__init__()
        self.cfg = cfg
        self.cfg.d_head = cfg.d_vocab
        self.head = head
        self.weight = nn.Parameter(weight)
        self.calls = [0] * cfg.n_layers
        self.blocks = nn.ModuleList([RuleBlock(layer, self.calls, with_z=with_z, resid_hook=resid_hook)
                                     for layer in range(cfg.n_layers)])
        if head != "inline":
            self.unembed = Unembed()
        self.setup()

    def patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        raise NotImplementedError

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        values = nn.functional.one_hot(tokens, self.cfg.d_vocab).float()  # [b, k, d_vocab]
        resid = torch.zeros(values.shape)
        for layer, pattern in enumerate(self.patterns(tokens)):
            resid = self.blocks[layer](resid, values, pattern, self.weight[layer])
        if self.head == "inline":
            return SCALE * resid
        logits = self.unembed(resid)
        return CAP * torch.tanh(logits / CAP) if self.head == "softcap" else logits


class PlantedInductionModel(RuleModel):
    def __init__(self, *, induction: bool = True, d_vocab: int = 24, with_z: bool = True, head: str = "unembed",
                 resid_hook: bool = True) -> None:
        weight = torch.full((2, 4), 0.1)
        weight[INDUCTION_HEAD] = 1.0
        super().__init__(OracleConfig(n_layers=2, n_heads=4, n_ctx=64, d_vocab=d_vocab, model_name="planted-induction"),
                         weight, with_z=with_z, head=head, resid_hook=resid_hook)
        self.induction = induction

    def patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        b, n = tokens.shape
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        uniform = (causal.float() / causal.sum(-1, keepdim=True)).expand(b, n, n)
        previous = torch.eye(n).roll(-1, 1).tril()
        previous[0, 0] = 1.0
        earlier = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril(-1)
        targets = torch.zeros(b, n, n)
        targets[:, :, 1:] = earlier[:, :, :-1].float()
        has = targets.sum(-1, keepdim=True) > 0
        induction = torch.where(has, targets / targets.sum(-1, keepdim=True).clamp(min=1), uniform)
        layer0 = torch.stack([previous.expand(b, n, n)] * 4, 1)
        layer1 = torch.stack([induction if self.induction else uniform] + [uniform] * 3, 1)
        return [layer0, layer1]


class PlantedMaskedEncoder(RuleModel):
    def __init__(self, *, d_vocab: int = 24, with_mask_token: bool = True) -> None:
        weight = torch.tensor([[0.0, 0.0], [1.0, 1.0]])
        super().__init__(OracleConfig(n_layers=2, n_heads=2, n_ctx=64, d_vocab=d_vocab, model_name="planted-encoder",
                                      attention_dir="bidirectional"), weight, with_z=True, head="unembed",
                         resid_hook=True)
        mask = d_vocab - 1 if with_mask_token else None
        self.tokenizer = SimpleNamespace(cls_token_id=0, bos_token_id=0, mask_token_id=mask,
                                         all_special_ids=[0] + ([mask] if with_mask_token else []))

    def patterns(self, tokens: torch.Tensor) -> list[torch.Tensor]:
        b, n = tokens.shape
        half = (n - 1) // 2
        uniform = torch.full((b, 2, n, n), 1.0 / n)
        position = torch.arange(n)
        twin = torch.where(position == 0, 0, torch.where(position <= half, position + half, position - half))
        twin_pattern = nn.functional.one_hot(twin, n).float().expand(b, n, n)
        self_pattern = torch.eye(n).expand(b, n, n)
        return [uniform, torch.stack([twin_pattern, self_pattern], 1)]


def repeated_batches(n_batches: int = 4, rows: int = 4, seq_len: int = 8, d_vocab: int = 24, seed: int = 0,
                     n_tokens: int | None = None):
    """``[BOS=0] X X`` rows with X distinct tokens from 1..n_tokens (default d_vocab - 1), as TokenBatches (BOS
    invalid)."""
    from probes.core.batch import TokenBatch

    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        block = torch.stack([torch.randperm(n_tokens or d_vocab - 1, generator=g)[:seq_len] + 1 for _ in range(rows)])
        tokens = torch.cat([torch.zeros(rows, 1, dtype=torch.long), block, block], 1)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        valid[:, 0] = False
        batches.append(TokenBatch(tokens, valid))
    return batches
