"""A 2-layer attention-only model with a planted previous-token -> induction K-composition, built from real
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
nonzero edges everywhere else, so a random edge is not exactly zero. No LayerNorm, no biases. The same weights
build a native bridge (both TransformerLens generations) and a 3.9 ``HookedTransformer``.
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


def circuit_weights(*, planted: bool = True, seed: int = 0) -> dict[str, torch.Tensor]:
    """Every weight in ``nn.Linear`` layout: ``tok_embed`` [V d_model], ``pos`` [N d_model], ``head`` [V d_model],
    ``layers.{l}.{q,k,v,o}`` [d_model d_model] (head ``h`` in rows (q, k, v) / columns (o) ``h * D_HEAD`` onwards)."""
    generator = torch.Generator().manual_seed(seed)
    weights = {"tok_embed": torch.eye(V, D_MODEL), "pos": torch.zeros(N, D_MODEL), "head": torch.zeros(V, D_MODEL)}
    weights["pos"][:, POSITION:POSITION + N] = torch.eye(N)
    weights["head"][:, OUT:OUT + V] = SCALE * torch.eye(V)
    for layer in range(2):
        for name in "qkvo":
            weight = torch.randn(D_MODEL, D_MODEL, generator=generator) / D_MODEL**0.5
            weights[f"layers.{layer}.{name}"] = NOISE * weight if name == "o" else weight
    for (layer, head_index), heads in (planted_heads().items() if planted else ()):
        block = slice(head_index * D_HEAD, (head_index + 1) * D_HEAD)
        for name, value in heads.items():
            if name == "W_O":
                weights[f"layers.{layer}.o"][:, block] = value.T
            else:
                weights[f"layers.{layer}.{name[-1].lower()}"][block] = value.T
    return weights


def planted_circuit_bridge(*, planted: bool = True, seed: int = 0) -> nn.Module:
    """The planted model as a native bridge (``planted=False``: the two planted heads random like the others)."""
    assert N - 1 >= 2 * SEQ_LEN + 1 and D_HEAD >= V
    model = build_standard_model(StandardModelConfig(n_layers=2, d_model=D_MODEL, n_heads=HEADS, d_vocab=V, n_ctx=N,
                                                     normalization="none", seed=seed))
    params = {name.replace("_original_component.", ""): p for name, p in model.original_model.named_parameters()}
    with torch.no_grad():
        for name, value in circuit_weights(planted=planted, seed=seed).items():
            if name.startswith("layers."):
                layer, kind = name.split(".")[1:]
                params[f"layers.{layer}.attn.{kind}.weight"].copy_(value)
                params[f"layers.{layer}.attn.{kind}.bias"].zero_()
            else:
                params[f"{name}.weight"].copy_(value)
    return model.eval()


def planted_circuit_hooked_transformer(*, planted: bool = True, seed: int = 0) -> nn.Module:
    """The same weights in a TransformerLens 3.9 ``HookedTransformer`` (4.x has none)."""
    import warnings

    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=2, d_model=D_MODEL, n_ctx=N, d_head=D_HEAD, n_heads=HEADS, d_vocab=V,
                                  attn_only=True, normalization_type=None, act_fn="relu", seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(cfg)
    weights = circuit_weights(planted=planted, seed=seed)
    with torch.no_grad():
        model.embed.W_E.copy_(weights["tok_embed"])
        model.pos_embed.W_pos.copy_(weights["pos"])
        model.unembed.W_U.copy_(weights["head"].T)
        model.unembed.b_U.zero_()
        for layer in range(2):
            attn = model.blocks[layer].attn
            for kind in "qkv":  # rows of head h -> W_X[h] [d_model d_head]
                getattr(attn, f"W_{kind.upper()}").copy_(weights[f"layers.{layer}.{kind}"].view(HEADS, D_HEAD, D_MODEL)
                                                         .transpose(1, 2))
                getattr(attn, f"b_{kind.upper()}").zero_()
            attn.W_O.copy_(weights[f"layers.{layer}.o"].view(D_MODEL, HEADS, D_HEAD).permute(1, 2, 0))
            attn.b_O.zero_()
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
