"""The legacy TransformerLens repos on the Hugging Face hub (``NeelNanda/...``, ``ArthurConmy/...``,
``Baidicoot/...``: the attention-only, GELU and SoLU models of the induction-head work and the ARENA exercises) by
name, with their training checkpoints.

These repos predate the Hugging Face format: a TransformerLens ``config.json`` without ``model_type`` and the weights
as ``*final.pth`` state dicts, training checkpoints as ``checkpoints/*_<label>.pth`` files. TransformerLens 4.x
loads them with ``transformer_lens.model_bridge.sources.tl_legacy.boot`` (the config from the repo, the weights
through ``convert_tl_checkpoint`` into a ``boot_native`` bridge; it refuses shortformer positions); 3.x with
``HookedTransformer.from_pretrained``, here its ``_no_processing`` form so that the weights are the saved ones on
both generations. Short aliases (``attn-only-2l``) resolve through TransformerLens's alias table, offline.

A checkpoint is picked by a suffix on the name, with TransformerLens's own argument names:
``attn-only-2l@checkpoint_index=3`` (the fourth saved checkpoint; negative counts from the end) or
``attn-only-2l@checkpoint_value=<label>`` (the step or token count in the file name).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import warnings
from dataclasses import dataclass
from typing import Any

import torch

from probes.core.errors import ModelError
from probes.core.model_kind import has_hooked_transformer, legacy_class

log = logging.getLogger(__name__)

# The repo families TransformerLens 4.x's tl_legacy source and its checkpoint-label lookup treat as legacy.
LEGACY_PREFIXES = ("NeelNanda/", "ArthurConmy/", "Baidicoot/")
CHECKPOINT_KEYS = ("checkpoint_index", "checkpoint_value")


@dataclass(frozen=True)
class LegacySpec:
    """A legacy repo's official name and the training checkpoint asked for (neither: the final weights)."""

    name: str
    checkpoint_index: int | None = None
    checkpoint_value: int | None = None

    @property
    def label(self) -> str:
        """The model's name in provenance: the repo, and the checkpoint when one was asked for."""
        for key in CHECKPOINT_KEYS:
            if getattr(self, key) is not None:
                return f"{self.name}@{key}={getattr(self, key)}"
        return self.name


def _official_name(name: str) -> str | None:
    """TransformerLens's official hub name for ``name`` (an alias or an official name, any case), None if unknown."""
    # 4.x keeps the resolver beside the model list (supported_models); 3.x in loading_from_pretrained
    module = "supported_models" if hasattr(importlib.import_module("transformer_lens.supported_models"),
                                           "get_official_model_name") else "loading_from_pretrained"
    resolve = importlib.import_module(f"transformer_lens.{module}").get_official_model_name
    try:
        return str(resolve(name))
    except ValueError:
        return None


def split_checkpoint(spec: str) -> tuple[str, dict[str, int]]:
    """``spec`` without its ``@checkpoint_index=N`` / ``@checkpoint_value=N`` suffix, and that suffix as a dict.

    Example: ``split_checkpoint("attn-only-2l@checkpoint_index=3") == ("attn-only-2l", {"checkpoint_index": 3})``.
    """
    name, at, suffix = spec.partition("@")
    if not at:
        return spec, {}
    key, equals, value = suffix.partition("=")
    if key not in CHECKPOINT_KEYS or not equals or not value.strip().lstrip("-").isdigit():
        raise ModelError(f"{spec!r}: a training checkpoint is chosen with @checkpoint_index=N or "
                         f"@checkpoint_value=N after the name (TransformerLens's arguments); got @{suffix!r}.")
    return name, {key: int(value)}


def legacy_spec(spec: str) -> LegacySpec | None:
    """The legacy repo ``spec`` names (after its alias and checkpoint suffix), or None for any other name; a
    checkpoint suffix on a name that is not a legacy repo is a :class:`ModelError`.

    Example: ``legacy_spec("attn-only-2l").name == "NeelNanda/Attn_Only_2L512W_C4_Code"``.
    """
    name, checkpoint = split_checkpoint(spec)
    official = _official_name(name)
    if official is None or not official.startswith(LEGACY_PREFIXES):
        if checkpoint:
            raise ModelError(f"{spec!r}: training checkpoints by name are for the legacy TransformerLens repos "
                             f"({', '.join(p + '...' for p in LEGACY_PREFIXES)}); {name!r} is not one of them.")
        return None
    return LegacySpec(official, **checkpoint)


def boot_legacy(spec: LegacySpec, *, device: str | torch.device, dtype: torch.dtype) -> Any:
    """The legacy repo of ``spec`` as TransformerLens loads it: a native bridge (4.x) or a HookedTransformer (3.x),
    in eval mode. Needs the hub; the hub's and TransformerLens's own errors pass through (the caller says them in
    one line)."""
    checkpoint = {key: getattr(spec, key) for key in CHECKPOINT_KEYS if getattr(spec, key) is not None}
    if has_hooked_transformer():
        hooked_transformer = legacy_class("HookedTransformer")
        assert hooked_transformer is not None
        printed = io.StringIO()  # from_pretrained prints what it loaded; library code logs instead
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed):
            warnings.simplefilter("ignore", DeprecationWarning)
            model = hooked_transformer.from_pretrained_no_processing(  # type: ignore[attr-defined]
                spec.name, device=device, dtype=dtype, **checkpoint)
        log.info("%s", printed.getvalue().strip())
    else:
        from transformer_lens.model_bridge.sources.tl_legacy import boot

        model = boot(spec.name, device=device, dtype=dtype, **checkpoint)
    model.cfg.model_name = spec.label
    return model.eval()
