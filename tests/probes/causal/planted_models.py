"""A hooked model with one planted induction head whose output can be knocked out at ``hook_z``.

Two causal layers of four heads, attention by rule (no weights to learn). Each head's value is the one-hot of the
key token, so ``z[b, q, h]`` is the head's attention-weighted token distribution (``d_head = d_vocab``), and the
logits are ``SCALE * sum_{l,h} weight[l, h] * z[b, q, l, h]``. Layer 1 head 0 attends to the token after an earlier
copy of the current token (``induction=True``; uniform otherwise) with weight 1: it alone predicts the repeated
half of ``[BOS] X X``. Every other head (previous token in layer 0, uniform in layer 1) has weight 0.1.
"""

from __future__ import annotations

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from tests.hooked_models import OracleConfig

SCALE = 8.0
INDUCTION_HEAD = (1, 0)


class PlantedInductionModel(HookedRootModule):
    def __init__(self, *, induction: bool = True, d_vocab: int = 24, with_z: bool = True) -> None:
        super().__init__()
        self.cfg = OracleConfig(n_layers=2, n_heads=4, n_ctx=64, d_vocab=d_vocab, model_name="planted-induction")
        self.cfg.d_head = d_vocab
        self.induction, self.with_z = induction, with_z
        self.weight = nn.Parameter(torch.full((2, 4), 0.1))
        with torch.no_grad():
            self.weight[INDUCTION_HEAD] = 1.0
        self.blocks = nn.ModuleList()
        for _ in range(2):
            block = nn.Module()
            block.attn = nn.Module()
            block.attn.hook_pattern = HookPoint()
            if with_z:
                block.attn.hook_z = HookPoint()
            self.blocks.append(block)
        self.setup()

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

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        values = nn.functional.one_hot(tokens, self.cfg.d_vocab).float()  # [b, k, d_vocab]
        logits = 0.0
        for layer, pattern in enumerate(self.patterns(tokens)):
            pattern = self.blocks[layer].attn.hook_pattern(pattern)
            z = torch.einsum("bhqk,bkd->bqhd", pattern, values)
            if self.with_z:
                z = self.blocks[layer].attn.hook_z(z)
            logits = logits + SCALE * torch.einsum("bqhd,h->bqd", z, self.weight[layer])
        return logits


def repeated_batches(n_batches: int = 4, rows: int = 4, seq_len: int = 8, d_vocab: int = 24, seed: int = 0):
    """``[BOS=0] X X`` rows with X distinct tokens from 1..d_vocab-1, as TokenBatches (BOS invalid)."""
    from probes.core.batch import TokenBatch

    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        block = torch.stack([torch.randperm(d_vocab - 1, generator=g)[:seq_len] + 1 for _ in range(rows)])
        tokens = torch.cat([torch.zeros(rows, 1, dtype=torch.long), block, block], 1)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        valid[:, 0] = False
        batches.append(TokenBatch(tokens, valid))
    return batches
