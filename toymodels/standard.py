"""Standard TransformerLens toy models built with ``TransformerBridge.boot_native``.

``positional="none"`` gives a model without positional information (Scan and Snap's setting):
the learned positional embedding is zeroed and frozen, since boot_native only builds "standard"
or "rotary" positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from mechprobe.validation import integers
from toymodels.errors import ToyConfigError


@dataclass(frozen=True)
class StandardModelConfig:
    """Settings of a standard TL toy transformer (validated on construction)."""

    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    d_vocab: int = 10
    n_ctx: int = 128
    attn_only: bool = True
    positional: Literal["standard", "rotary", "none"] = "standard"
    attention_dir: Literal["causal", "bidirectional"] = "causal"
    normalization: Literal["LN", "none"] = "LN"
    seed: int = 0

    def __post_init__(self) -> None:
        integers(self, ("n_layers", "d_model", "n_heads", "d_vocab", "n_ctx"), error=ToyConfigError)
        if self.d_model % self.n_heads:
            raise ToyConfigError(
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})."
            )
        if self.positional not in ("standard", "rotary", "none"):
            raise ToyConfigError(f"positional must be standard, rotary or none; got {self.positional!r}.")
        if self.attention_dir not in ("causal", "bidirectional"):
            raise ToyConfigError(f"attention_dir must be causal or bidirectional; got {self.attention_dir!r}.")
        if self.normalization not in ("LN", "none"):
            raise ToyConfigError(f"normalization must be LN or none; got {self.normalization!r}.")


def build_standard_model(config: StandardModelConfig, *, device: str | torch.device = "cpu"):
    """A randomly initialised TransformerBridge (seeded by ``config.seed``) on ``device``, in training mode.

    Example: ``build_standard_model(StandardModelConfig(n_layers=2, d_vocab=3))``.
    """
    # the paths that hold both classes in TransformerLens 3.9 and 4.x (3.9's top level has no TransformerBridge)
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    bridge_class: Any = TransformerBridge  # boot_native is attached at import time (sources.native), unseen by mypy

    bridge_config = TransformerBridgeConfig(
        d_model=config.d_model,
        d_head=config.d_model // config.n_heads,
        n_layers=config.n_layers,
        n_ctx=config.n_ctx,
        n_heads=config.n_heads,
        d_vocab=config.d_vocab,
        d_mlp=4 * config.d_model if not config.attn_only else None,
        attn_only=config.attn_only,
        positional_embedding_type="rotary" if config.positional == "rotary" else "standard",
        attention_dir=config.attention_dir,
        normalization_type="LN" if config.normalization == "LN" else None,
        act_fn="gelu",
        seed=config.seed,
    )
    name = f"standard-{config.n_layers}L-{config.positional}"
    model = bridge_class.boot_native(bridge_config, device=device, model_name=name)
    if config.positional == "none":
        for name, parameter in model.named_parameters():
            if name.startswith("pos."):
                with torch.no_grad():
                    parameter.zero_()
                parameter.requires_grad_(False)
    model.train()
    return model
