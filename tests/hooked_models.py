"""Hand-made hooked models for tests: attention patterns with known answers."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint


def pattern_blocks(n_layers: int) -> nn.ModuleList:
    """``n_layers`` blocks with only ``attn.hook_pattern``: the hook a hand-made model feeds its patterns to."""
    blocks = nn.ModuleList()
    for _ in range(n_layers):
        block = nn.Module()
        block.attn = nn.Module()
        block.attn.hook_pattern = HookPoint()
        blocks.append(block)
    return blocks


@dataclass
class OracleConfig:
    n_layers: int = 2
    n_heads: int = 4
    n_ctx: int = 64
    d_vocab: int = 50
    model_name: str = "oracle"
    attention_dir: str = "causal"


class OracleModel(HookedRootModule):
    """A causal model whose heads attend by rule, so head scores have exact known values.

    Head 0: previous token (position 0 attends to itself). Head 1: uniform over induction targets
    (the token after an earlier copy of the current token), else itself. Head 2: uniform over
    earlier copies of the current token, else itself. Head 3: uniform over k <= q.
    Every layer has the same heads. ``calls`` counts how many times each layer ran.
    """

    def __init__(self, cfg: OracleConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or OracleConfig()
        self.blocks = nn.ModuleList()
        for _ in range(self.cfg.n_layers):
            block = nn.Module()
            block.attn = nn.Module()
            block.attn.hook_pattern = HookPoint()
            block.hook_resid_post = HookPoint()
            self.blocks.append(block)
        self.unembed = nn.Linear(1, self.cfg.d_vocab)
        self.calls = [0] * self.cfg.n_layers
        self.setup()

    @staticmethod
    def patterns(tokens: torch.Tensor, n_heads: int) -> torch.Tensor:
        b, n = tokens.shape
        eye = torch.eye(n).expand(b, n, n)
        causal = torch.ones(n, n).tril()
        prev = torch.zeros(n, n)
        prev[1:, :-1] = torch.eye(n - 1)
        prev[0, 0] = 1
        same = tokens[:, :, None] == tokens[:, None, :]
        dup = (same & torch.ones(n, n, dtype=torch.bool).tril(-1)).float()
        ind = torch.zeros(b, n, n)
        ind[:, :, 1:] = dup[:, :, :-1]  # the key after each earlier copy

        def rows(mask: torch.Tensor) -> torch.Tensor:
            has = mask.sum(-1, keepdim=True) > 0
            return torch.where(has, mask / mask.sum(-1, keepdim=True).clamp(min=1), eye)

        heads = [prev.expand(b, n, n), rows(ind), rows(dup), (causal / causal.sum(-1, keepdim=True)).expand(b, n, n)]
        heads = (heads * ((n_heads + 3) // 4))[:n_heads]
        return torch.stack(heads, dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        pattern = self.patterns(tokens, self.cfg.n_heads)
        resid = tokens.float()[..., None]
        for layer, block in enumerate(self.blocks):
            self.calls[layer] += 1
            block.attn.hook_pattern(pattern)
            resid = block.hook_resid_post(resid)
        return self.unembed(resid)


class NoHooksModel(HookedRootModule):
    """A HookedRootModule without attention-pattern hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = OracleConfig()
        self.hook_embed = HookPoint()
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.hook_embed(tokens.float())


class PreviousTokenWriter(HookedRootModule):
    """A residual stream with a known answer for linear probes: layer 0 writes the embedding of the previous
    token (``copies=True``) or seeded noise (``copies=False``); its one head attends to the previous token."""

    def __init__(self, copies: bool = True) -> None:
        super().__init__()
        self.copies = copies
        self.cfg = OracleConfig(n_layers=1, n_heads=1, d_vocab=12, model_name="copy" if copies else "noise")
        self.W_E = nn.Parameter(torch.randn(12, 16, generator=torch.Generator().manual_seed(0)))
        self.hook_embed = HookPoint()
        self.blocks = pattern_blocks(1)
        self.blocks[0].hook_resid_post = HookPoint()
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.hook_embed(self.W_E[tokens])
        n = tokens.shape[1]
        self.blocks[0].attn.hook_pattern(torch.eye(n).roll(-1, 1).tril().expand(tokens.shape[0], 1, n, n))
        if not self.copies:
            noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(int(tokens.sum())))
            return self.blocks[0].hook_resid_post(noise)
        previous = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
        return self.blocks[0].hook_resid_post(previous)
