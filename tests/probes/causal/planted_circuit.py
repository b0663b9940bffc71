"""A 2-layer attention-only native bridge with a planted previous-token -> induction K-composition, built from real
attention weights, and ``[BOS] X X`` batches for it.

The residual stream has four blocks: the token (one-hot), the position (one-hot), the previous token and the
output. Layer 0 head 0 (``PREVIOUS_HEAD``) attends to the previous position (query: the position, key: the
position + 1) and writes the token it reads into the previous-token block. Layer 1 head 0 (``INDUCTION_HEAD``) is
an induction head: its query reads the token, its key reads the previous-token block (the planted edge: K-composition
with layer 0 head 0), its value reads the token, and it writes that token into the output block, which the
unembedding reads with gain ``SCALE``. So the planted head's queries and values read nothing layer 0 writes (its Q-
and V-edges from the previous-token head are exactly zero), and its keys find the token after an earlier copy of the
current token, which predicts the repeated half of ``[BOS] X X``.

Every other head has random queries, keys and values (seeded) and writes ``NOISE`` times a random ``W_O``: small,
nonzero edges everywhere else, so a random edge is not exactly zero. No LayerNorm, no biases.
"""

from __future__ import annotations

import torch
from torch import nn

from probes.core.batch import TokenBatch
from toymodels.standard import StandardModelConfig, build_standard_model

V, N, HEADS, D_HEAD = 16, 24, 4, 20
D_MODEL = HEADS * D_HEAD  # 80 >= 3V + N
TOKEN, POSITION, PREVIOUS, OUT = 0, V, V + N, 2 * V + N
SHARP = 10.0
SCALE = 10.0
NOISE = 0.05
PREVIOUS_HEAD = (0, 0)
INDUCTION_HEAD = (1, 0)
SEQ_LEN = 8  # X: 8 distinct tokens of 1..V-1; rows of 17 positions


def planted_heads() -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """W_Q, W_K, W_V [d_model d_head] and W_O [d_head d_model] of the two planted heads."""
    prev = {name: torch.zeros(D_MODEL, D_HEAD) for name in ("W_Q", "W_K", "W_V")} | {"W_O": torch.zeros(D_HEAD,
                                                                                                       D_MODEL)}
    for p in range(D_HEAD):
        prev["W_Q"][POSITION + p, p] = SHARP
    for k in range(D_HEAD - 1):
        prev["W_K"][POSITION + k, k + 1] = SHARP
    for t in range(V):
        prev["W_V"][TOKEN + t, t] = 1.0
        prev["W_O"][t, PREVIOUS + t] = 1.0
    induction = {name: torch.zeros_like(value) for name, value in prev.items()}
    for t in range(V):
        induction["W_Q"][TOKEN + t, t] = SHARP
        induction["W_K"][PREVIOUS + t, t] = SHARP
        induction["W_V"][TOKEN + t, t] = 1.0
        induction["W_O"][t, OUT + t] = 1.0
    induction["W_K"][POSITION, :V] = -SHARP  # position 0 read itself in layer 0: not a key for anything
    return {PREVIOUS_HEAD: prev, INDUCTION_HEAD: induction}


def planted_circuit_bridge(*, planted: bool = True, seed: int = 0) -> nn.Module:
    """The planted model (``planted=False``: the same random heads, the two planted heads random too)."""
    assert N - 1 >= 2 * SEQ_LEN + 1 and D_HEAD >= V
    model = build_standard_model(StandardModelConfig(n_layers=2, d_model=D_MODEL, n_heads=HEADS, d_vocab=V, n_ctx=N,
                                                     normalization="none", seed=seed))
    params = {name.replace("_original_component.", ""): p for name, p in model.original_model.named_parameters()}
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        params["tok_embed.weight"].copy_(torch.eye(V, D_MODEL))
        w_pos = torch.zeros(N, D_MODEL)
        w_pos[:, POSITION:POSITION + N] = torch.eye(N)
        params["pos.weight"].copy_(w_pos)
        head = torch.zeros(V, D_MODEL)
        head[:, OUT:OUT + V] = SCALE * torch.eye(V)
        params["head.weight"].copy_(head)
        for layer in range(2):
            for name in "qkvo":
                params[f"layers.{layer}.attn.{name}.bias"].zero_()
                weight = torch.randn(D_MODEL, D_MODEL, generator=generator) / D_MODEL**0.5
                params[f"layers.{layer}.attn.{name}.weight"].copy_(NOISE * weight if name == "o" else weight)
        for (layer, head_index), weights in (planted_heads().items() if planted else ()):
            block = slice(head_index * D_HEAD, (head_index + 1) * D_HEAD)
            for name, value in weights.items():
                if name == "W_O":
                    params[f"layers.{layer}.attn.o.weight"][:, block] = value.T
                else:
                    params[f"layers.{layer}.attn.{name[-1].lower()}.weight"][block] = value.T
    return model.eval()


def circuit_batches(n_batches: int = 3, rows: int = 4, seed: int = 0) -> list[TokenBatch]:
    """``[BOS=0] X X`` rows, X of ``SEQ_LEN`` distinct tokens of 1..V-1 (BOS invalid)."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        block = torch.stack([torch.randperm(V - 1, generator=g)[:SEQ_LEN] + 1 for _ in range(rows)])
        tokens = torch.cat([torch.zeros(rows, 1, dtype=torch.long), block, block], 1)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        valid[:, 0] = False
        batches.append(TokenBatch(tokens, valid))
    return batches
