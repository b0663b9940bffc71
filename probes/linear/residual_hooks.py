"""Which hooks hold a model's residual stream: the token embeddings first, then each layer's output.

TransformerBridges (and TransformerLens-style models) have ``hook_embed`` and
``blocks.{l}.hook_resid_post``. The paper-faithful toy models have no residual stream; what each
layer writes is read instead: ``blocks.{l}.hook_attn_out`` (the topic and Scan and Snap models), else
``blocks.{l}.attn.hook_z`` (the induction models' layer 1, whose output at position ``t`` holds the
parents of token ``t``). A layer with none of them is skipped.
"""

from __future__ import annotations

from probes.core.errors import ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel

EMBEDDING_HOOK = "hook_embed"
LAYER_HOOKS = ("blocks.{layer}.hook_resid_post", "blocks.{layer}.hook_attn_out", "blocks.{layer}.attn.hook_z")


def default_residual_hooks(info: ModelInfo) -> tuple[str, ...]:
    """``hook_embed`` and every ``blocks.{l}.hook_resid_post`` (the names TransformerBridges carry)."""
    return (EMBEDDING_HOOK, *(LAYER_HOOKS[0].format(layer=layer) for layer in range(info.n_layers)))


def residual_hooks(model: HookedModel) -> tuple[str, ...]:
    """The hooks of ``model`` a linear probe reads, embeddings first (see the module docstring).

    Example: ``residual_hooks(probes.load_model("minilm-l6"))[:2] == ("hook_embed", "blocks.0.hook_resid_post")``.
    """
    info = ModelInfo.of(model)
    names = set(model.hook_dict)
    hooks = [EMBEDDING_HOOK] if EMBEDDING_HOOK in names else []
    for layer in range(info.n_layers):
        found = next((h.format(layer=layer) for h in LAYER_HOOKS if h.format(layer=layer) in names), None)
        if found is not None:
            hooks.append(found)
    if len(hooks) < 1:
        raise ModelError(
            f"{info.name} has none of the hooks a linear probe reads ({EMBEDDING_HOOK}, "
            f"{', '.join(h.format(layer='L') for h in LAYER_HOOKS)}). Pass hooks=[...] to LinearProbe."
        )
    return tuple(hooks)
