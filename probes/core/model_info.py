"""What the probes need to know about a hooked model, read once and validated.

"Any hooked model" means an object with ``run_with_hooks`` and a ``hook_dict`` that contains
``blocks.{l}.attn.hook_pattern`` for every layer, and a ``cfg`` that carries ``n_layers``,
``n_heads``, ``n_ctx`` and ``d_vocab``. A ``TransformerBridge``, TransformerLens 3.9's
``HookedTransformer`` and ``HookedEncoder``, and any ``HookedRootModule`` that follows TransformerLens's
hook names qualify (:mod:`probes.core.model_kind` tells them apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mechprobe.validation import is_integer
from probes.core.errors import ModelError
from probes.core.model_kind import HookedModel, ModelKind, hf_attention_is_causal, model_kind

REQUIRED_CFG_FIELDS = ("n_layers", "n_heads", "n_ctx", "d_vocab")


def pattern_hook(layer: int) -> str:
    """TransformerLens's name of layer ``layer``'s attention pattern [batch head q_pos k_pos]."""
    return f"blocks.{layer}.attn.hook_pattern"


@dataclass(frozen=True)
class ModelInfo:
    """Shape facts and special tokens of a hooked model.

    ``causal`` is None when the model does not say (custom modules without ``attention_dir``).
    ``special_token_ids`` are the tokenizer's special ids (BOS, EOS, PAD, CLS, SEP, ...): positions
    holding them are never counted as queries or targets by the head-score probes.
    """

    name: str
    n_layers: int
    n_heads: int
    n_ctx: int
    d_vocab: int
    causal: bool | None
    bos_token_id: int | None
    special_token_ids: tuple[int, ...]

    @classmethod
    def of(cls, model: HookedModel) -> ModelInfo:
        """Read and validate ``model``; raise :class:`ModelError` saying what is missing.

        Example: ``ModelInfo.of(probes.load_model("minilm-l6")).n_layers == 6``.
        """
        kind = model_kind(model)  # a ModelError naming what is accepted when it is not a hooked model
        cfg = getattr(model, "cfg", None)
        missing = [f for f in REQUIRED_CFG_FIELDS
                   if not is_integer(getattr(cfg, f, None))]
        if missing or cfg is None:
            raise ModelError(
                f"The model's cfg must carry integer fields {', '.join(REQUIRED_CFG_FIELDS)}; "
                f"missing or not an int: {', '.join(missing)}. Give the model a `cfg` object with them."
            )
        not_positive = [f"{f}={getattr(cfg, f)}" for f in REQUIRED_CFG_FIELDS if getattr(cfg, f) < 1]
        if not_positive:
            raise ModelError(
                f"The model's cfg fields {', '.join(REQUIRED_CFG_FIELDS)} must be >= 1; got "
                f"{', '.join(not_positive)}. Fix the model's cfg."
            )
        absent = [pattern_hook(layer) for layer in range(cfg.n_layers) if pattern_hook(layer) not in model.hook_dict]
        if absent:
            raise ModelError(
                f"The model has no attention-pattern hooks the probes can read: missing "
                f"{absent[0]}{f' and {len(absent) - 1} more' if len(absent) > 1 else ''}. "
                f"Put a HookPoint named like blocks.{{layer}}.attn.hook_pattern on each layer's "
                f"softmax output [batch head q_pos k_pos]."
            )
        attention_dir = getattr(cfg, "attention_dir", None)
        causal = None if attention_dir is None else attention_dir == "causal"
        if kind is ModelKind.HF_BRIDGE:  # the Hugging Face modules' own flag first (3.9's BERT bridge says "causal")
            declared = hf_attention_is_causal(model)
            causal = causal if declared is None else declared
        tokenizer = getattr(model, "tokenizer", None)
        # Encoders open with CLS (a bridge may also give BERT tokenizers a stand-in BOS); LMs with BOS.
        bos = getattr(tokenizer, "cls_token_id", None) if tokenizer is not None else None
        if bos is None and tokenizer is not None:
            bos = getattr(tokenizer, "bos_token_id", None)
        specials = tuple(sorted(set(getattr(tokenizer, "all_special_ids", []) or []))) if tokenizer else ()
        name = str(getattr(cfg, "model_name", None) or type(model).__name__)
        return cls(
            name=name,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            n_ctx=cfg.n_ctx,
            d_vocab=cfg.d_vocab,
            causal=causal,
            bos_token_id=bos,
            special_token_ids=specials,
        )

    def is_causal(self, pattern: Any) -> bool:
        """Whether attention is causal: the model's own ``attention_dir`` when it says, else read off one
        layer's pattern ``[... q k]`` (causal when no query attends to a later key). The one place
        every probe decides it."""
        if self.causal is not None:
            return self.causal
        return bool(pattern.triu(1).abs().sum() == 0)
