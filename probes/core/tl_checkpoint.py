"""A researcher's saved ``HookedTransformer`` (its ``state_dict`` and its config) as a hooked model on either
TransformerLens generation.

The forms accepted (``load_model(path)`` / ``--model path``; :data:`CHECKPOINT_FORMS` says it in one line):

1. one file (``.pt``, ``.pth``, ``.bin``, ``.ckpt``) holding a dict with the config and the weights:
   ``torch.save({"config": model.cfg.to_dict(), "state_dict": model.state_dict()}, "model.pt")``
   (the config also as ``"cfg"``, the weights also as ``"model_state_dict"`` or ``"model"``);
2. a state-dict file (those suffixes or ``.safetensors``), ``torch.save(model.state_dict(), "model.pt")``, with the
   config as JSON beside it: ``model.json`` (the file's own name) or ``config.json`` in the same folder, written by
   ``json.dump(model.cfg.to_dict(), f, default=str)`` (the dtype becomes a string; it is ignored);
3. a folder with a TransformerLens ``config.json`` (``d_model``, ``n_layers``, ... and no Hugging Face
   ``model_type``) and one state-dict file: the layout of the legacy TransformerLens repos on the hub
   (``NeelNanda/...``), whose final weights are a file ending in ``final.pth`` beside ``checkpoints/``.

Files are read with ``torch.load(weights_only=True)`` (numpy scalars allowed: ``cfg.to_dict()`` holds some), so a
config pickled as a ``HookedTransformerConfig`` object is refused with the fix. On TransformerLens 3.x the
checkpoint becomes a ``HookedTransformer``; on 4.x (which removed it) TransformerLens's own
``convert_tl_checkpoint`` maps the weights into a ``TransformerBridge.boot_native`` bridge. The native model has
standard positions only and none of HookedTransformer's rarer options; a config that uses one is refused by name.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from probes.core.errors import ModelError
from probes.core.model_kind import has_hooked_transformer, legacy_class, transformer_bridge_class

log = logging.getLogger(__name__)

STATE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt")
WEIGHT_SUFFIXES = (*STATE_SUFFIXES, ".safetensors")
CONFIG_KEYS = ("config", "cfg")
STATE_KEYS = ("state_dict", "model_state_dict", "model")
REQUIRED = ("d_model", "d_head", "n_layers", "n_ctx", "n_heads", "d_vocab")
CHECKPOINT_FORMS = (
    "a HookedTransformer checkpoint: a .pt/.pth file holding {'config': cfg.to_dict(), 'state_dict': "
    "model.state_dict()}, a state-dict file with its config as JSON beside it (<name>.json or config.json), or a "
    "folder with a TransformerLens config.json and one state-dict file"
)
# HookedTransformer's own buffers (causal mask, the masking constant, rotary tables) and an unembedding bias that
# legacy checkpoints omit: not weights a state dict must carry.
OPTIONAL_KEYS = (".mask", ".IGNORE", ".rotary_sin", ".rotary_cos", "unembed.b_U")
# HookedTransformerConfig options the 4.x native model cannot compute, with the value that means "not used".
UNSUPPORTED_ON_NATIVE: dict[str, Any] = {
    "parallel_attn_mlp": False, "use_local_attn": False, "attn_types": None, "scale_attn_by_inverse_layer_idx": False,
    "post_embedding_ln": False, "use_qk_norm": False, "num_experts": None, "use_normalization_before_and_after": False,
    "relative_attention_num_buckets": None, "use_attention_sinks": False, "use_logn_attn": False, "clip_qkv": None,
}
# The activations and normalisations TransformerLens 4.x's native model implements (model_bridge/sources/native).
NATIVE_ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu", "swish", "solu", "solu_ln")
NATIVE_NORMALIZATIONS = (None, "LN", "LNPRE", "RMS", "RMSPRE")
# Copied as they are from a HookedTransformerConfig dict into the native bridge's config when present.
NATIVE_FIELDS = ("d_mlp", "d_vocab_out", "act_fn", "eps", "attn_only", "gated_mlp", "final_rms",
                 "n_key_value_heads", "attention_dir", "attn_scores_soft_cap", "output_logits_soft_cap",
                 "default_prepend_bos", "original_architecture", "seed", "init_mode", "initializer_range")


@dataclass(frozen=True)
class SavedHookedTransformer:
    """A HookedTransformer's config (as ``cfg.to_dict()`` gives it) and its state dict, read from ``source``."""

    config: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    source: Path


def is_tl_config(config: Any) -> bool:
    """Whether ``config`` is a TransformerLens (HookedTransformerConfig) dict, not a Hugging Face config."""
    return isinstance(config, Mapping) and "model_type" not in config and all(k in config for k in REQUIRED)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"{path} is not a readable JSON config ({error}); expected {CHECKPOINT_FORMS}.") from None


def is_tl_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a TransformerLens ``config.json`` (form 3) rather than a Hugging Face checkpoint."""
    config = folder / "config.json"
    if not config.is_file():
        return False
    try:
        return is_tl_config(json.loads(config.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # the Hugging Face path reports the broken file


def _safe_globals() -> list[Any]:
    import numpy as np

    core: Any = getattr(np, "_core", None) or np.core  # numpy 2 renamed np.core
    scalar = core.multiarray
    dtypes = [getattr(np.dtypes, name) for name in ("Float64DType", "Float32DType", "Int64DType", "Int32DType",
                                                    "BoolDType") if hasattr(np.dtypes, name)]
    return [scalar.scalar, np.dtype, *dtypes]


def _load_file(path: Path) -> Any:
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        try:
            return load_file(str(path))
        except Exception as error:  # safetensors raises its own error types
            raise ModelError(f"{path} is not a readable safetensors file ({error}); expected {CHECKPOINT_FORMS}.") \
                from None
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle and zipfile errors of many types
        text = " ".join(str(error).split())
        if "GLOBAL" in text or "Unsupported global" in text or "weights_only" in text.lower():
            raise ModelError(
                f"{path} holds pickled Python objects, which mechprobe does not unpickle (torch.load weights_only). "
                f"Save the config as a dict: torch.save({{'config': model.cfg.to_dict(), 'state_dict': "
                f"model.state_dict()}}, path) (for a file you trust: read it once with torch.load and weights_only "
                f"off, then save it so)."
            ) from None
        raise ModelError(f"{path} is not a checkpoint torch.load can read ({text[:200]}); expected "
                         f"{CHECKPOINT_FORMS}.") from None


def _as_state_dict(value: Any) -> dict[str, torch.Tensor] | None:
    if isinstance(value, Mapping) and value and all(isinstance(t, torch.Tensor) for t in value.values()):
        return {str(k): t for k, t in value.items()}
    return None


def _config_beside(path: Path) -> Path | None:
    for candidate in (path.with_suffix(".json"), path.parent / "config.json"):
        if candidate.is_file():
            return candidate
    return None


def _weights_in(folder: Path) -> Path:
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in WEIGHT_SUFFIXES)
    final = [p for p in files if p.name.endswith("final.pth")]  # the legacy repos' final weights
    if len(final) == 1 or len(files) == 1:
        return (final or files)[0]
    if not files:
        raise ModelError(f"{folder} has a TransformerLens config.json but no state-dict file "
                         f"({', '.join(WEIGHT_SUFFIXES)}) beside it; save model.state_dict() there.")
    raise ModelError(f"{folder} holds several state-dict files ({', '.join(p.name for p in files[:5])}); give the "
                     f"file itself as the model (its config.json is read from beside it).")


def read_checkpoint(path: Path) -> SavedHookedTransformer:
    """The config and state dict of a saved HookedTransformer at ``path`` (a file or a folder; see the module
    docstring for the forms), or a :class:`ModelError` in one line saying what was expected.

    Example: ``read_checkpoint(Path("runs/model.pt")).config["n_layers"]``.
    """
    if path.is_dir():
        if not is_tl_folder(path):
            raise ModelError(f"{path} has no TransformerLens config.json; expected {CHECKPOINT_FORMS}.")
        config: Any = _read_json(path / "config.json")
        weights = _weights_in(path)
        loaded = _load_file(weights)
    else:
        weights = path
        loaded = _load_file(path)
        config = None
    state = _as_state_dict(loaded)
    if state is None and isinstance(loaded, Mapping):
        config_key = next((k for k in CONFIG_KEYS if k in loaded), None)
        state_key = next((k for k in STATE_KEYS if k in loaded), None)
        if state_key is not None:
            state = _as_state_dict(loaded[state_key])
        if config is None and config_key is not None:
            config = loaded[config_key]
    if state is None:
        got = ", ".join(map(str, list(loaded)[:6])) if isinstance(loaded, Mapping) else type(loaded).__name__
        raise ModelError(f"{weights} holds no HookedTransformer state dict (got {got}); expected {CHECKPOINT_FORMS}.")
    if config is None:
        beside = _config_beside(weights)
        if beside is None:
            raise ModelError(
                f"{weights} holds a state dict but no config, and there is no {weights.with_suffix('.json').name} or "
                f"config.json beside it. Write the config there: json.dump(model.cfg.to_dict(), f, default=str)."
            )
        config = _read_json(beside)
    if isinstance(config, Mapping) and config.get("architecture") not in (None, "neel"):
        raise ModelError(f"{weights} is in the {config['architecture']!r} weight layout, which predates "
                         f"HookedTransformer's; load it by its hub name, which converts the layout.")
    if not is_tl_config(config):
        got = ", ".join(map(str, list(config)[:6])) if isinstance(config, Mapping) else type(config).__name__
        raise ModelError(f"The config of {weights} is not a HookedTransformerConfig dict (it needs "
                         f"{', '.join(REQUIRED)}; got {got}); save model.cfg.to_dict().")
    if not any(key.endswith(".W_Q") or key.endswith("._W_K") for key in state) or "embed.W_E" not in state:
        raise ModelError(f"{weights}'s state dict has no HookedTransformer weights (embed.W_E, blocks.0.attn.W_Q, "
                         f"...); got {', '.join(list(state)[:4])}. Expected {CHECKPOINT_FORMS}.")
    return SavedHookedTransformer(dict(config), state, weights)


def _config_value(config: Mapping[str, Any], key: str) -> Any:
    value: Any = config.get(key)
    if key == "normalization_type" and "normalization_type" not in config:
        value = config.get("normalization")  # the legacy repos' config.json spells it so
    return value.item() if type(value).__module__ == "numpy" else value  # np.float64 from cfg.to_dict()


def bridge_config(config: Mapping[str, Any], name: str, dtype: torch.dtype) -> Any:
    """The ``TransformerBridgeConfig`` of a native model computing what the HookedTransformer of ``config`` computes,
    or a :class:`ModelError` naming the option it cannot express (TransformerLens 4.x)."""
    from transformer_lens.config import TransformerBridgeConfig

    positions = "shortformer" if config.get("shortformer_pos") else config.get("positional_embedding_type", "standard")
    if positions != "standard":
        # convert_tl_checkpoint refuses the rotary tables; shortformer and alibi have no native counterpart
        raise ModelError(f"{name} uses {positions!r} positional embeddings; TransformerLens 4.x's native bridge loads "
                         f"HookedTransformers with standard ones only. Load it on TransformerLens 3.9 instead.")
    used = [key for key, off in UNSUPPORTED_ON_NATIVE.items() if config.get(key, off) not in (off, 0)]
    if config.get("use_attn_scale", True) is False:
        used.append("use_attn_scale=False")
    norm = _config_value(config, "normalization_type")
    if (norm.upper() if isinstance(norm, str) else norm) not in NATIVE_NORMALIZATIONS:
        used.append(f"normalization_type={norm!r}")
    act = config.get("act_fn")
    if not config.get("attn_only", False) and str(act).lower() not in NATIVE_ACTIVATIONS:
        used.append(f"act_fn={act!r}")
    if used:
        raise ModelError(f"{name} uses {', '.join(used)}, which TransformerLens 4.x's native bridge does not "
                         f"compute; load it on TransformerLens 3.9 (pip install 'transformer-lens==3.9.0').")
    fields = {key: _config_value(config, key) for key in NATIVE_FIELDS if config.get(key) is not None}
    scale = _config_value(config, "attn_scale")
    if isinstance(scale, (int, float)) and scale > 0 and not math.isclose(scale, math.sqrt(config["d_head"])):
        fields["attn_scale"] = float(scale)  # else the native default, sqrt(d_head), as in HookedTransformer
    fields.update({key: int(config[key]) for key in REQUIRED})
    fields.update(normalization_type=norm, positional_embedding_type="standard",
                  tokenizer_name=config.get("tokenizer_name"), architecture="TransformerLensNative", model_name=name,
                  dtype=dtype)
    return TransformerBridgeConfig(**fields)


def _tokenizer(name: Any) -> Any:
    if not isinstance(name, str) or not name:
        return None
    try:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(name)
    except Exception as error:  # offline, unknown name: the weights still load
        log.warning("The checkpoint names the tokenizer %r, which could not be loaded (%s); the model loads without "
                    "one (probes on token ids work; text needs a tokenizer).", name, type(error).__name__)
        return None


def _checked_load(model: torch.nn.Module, state: Mapping[str, torch.Tensor], source: Path) -> None:
    try:
        missing, unexpected = model.load_state_dict(dict(state), strict=False)
    except RuntimeError as error:  # torch lists every tensor whose shape differs, over many lines
        mismatch = next((line.strip() for line in str(error).splitlines() if "size mismatch" in line), str(error))
        raise ModelError(f"{source}'s state dict does not fit its config ({mismatch[:250]}); save the config the "
                         f"model was built with.") from None
    missing = [key for key in missing if not key.endswith(OPTIONAL_KEYS)]
    if missing or unexpected:
        raise ModelError(f"{source}'s state dict does not fit its config (missing {', '.join(missing[:4]) or 'none'};"
                         f" unexpected {', '.join(unexpected[:4]) or 'none'}); save the config the model was built "
                         f"with.")


def _as_hooked_transformer(saved: SavedHookedTransformer, name: str, device: str | torch.device,
                           dtype: torch.dtype) -> Any:
    hooked_transformer, config_class = legacy_class("HookedTransformer"), legacy_class("HookedTransformerConfig")
    assert hooked_transformer is not None and config_class is not None  # has_hooked_transformer() was checked
    known = {f.name for f in dataclasses.fields(config_class)}
    kwargs = {key: _config_value(saved.config, key) for key in known if key in saved.config}
    if "normalization" in saved.config and "normalization_type" not in saved.config:
        kwargs["normalization_type"] = saved.config["normalization"]
    tokenizer = _tokenizer(kwargs.get("tokenizer_name"))
    if saved.config.get("shortformer_pos"):  # the legacy repos' config.json spells shortformer positions so
        kwargs["positional_embedding_type"] = "shortformer"
    kwargs.update(dtype=dtype, device=str(device), model_name=name,
                  tokenizer_name=kwargs.get("tokenizer_name") if tokenizer is not None else None)
    kwargs.pop("n_params", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.9: "HookedTransformer ... removed in 4.0"
            model = hooked_transformer(config_class(**kwargs), tokenizer=tokenizer, move_to_device=False)
    except (TypeError, ValueError, AssertionError) as error:
        raise ModelError(f"The config of {saved.source} does not build a HookedTransformer ({error}).") from None
    _checked_load(model, {k: t.to(dtype) for k, t in saved.state_dict.items()}, saved.source)
    return model.to(device).eval()


def _as_native_bridge(saved: SavedHookedTransformer, name: str, device: str | torch.device,
                      dtype: torch.dtype) -> Any:
    from transformer_lens.conversion_utils import convert_tl_checkpoint

    config = bridge_config(saved.config, name, dtype)
    state = {key: t.to(dtype) for key, t in saved.state_dict.items()
             if not key.endswith((".rotary_sin", ".rotary_cos"))}
    try:
        converted = convert_tl_checkpoint(state, config)
    except ValueError as error:  # a key it does not know, or a shape that does not fit the config
        raise ModelError(f"{saved.source}: {' '.join(str(error).split())}") from None
    # HookedTransformer always has an unembedding bias and starts it at zero; legacy files may omit it
    converted.setdefault("unembed.bias", torch.zeros(config.d_vocab_out if config.d_vocab_out > 0 else config.d_vocab,
                                                     dtype=dtype))
    try:
        bridge = transformer_bridge_class().boot_native(config, tokenizer=_tokenizer(config.tokenizer_name),
                                                        device=device, dtype=dtype, model_name=name)
    except ValueError as error:
        raise ModelError(f"{saved.source}: the native bridge refuses its config ({error}).") from None
    # the native gated MLP has no biases, HookedTransformer's has (zero unless trained): a zero bias computes nothing
    extra = [key for key in converted if key not in bridge.state_dict() and key.endswith(".bias")]
    nonzero = [key for key in extra if bool(converted[key].any())]
    if nonzero:
        raise ModelError(f"{saved.source} has non-zero biases ({', '.join(nonzero[:3])}) where TransformerLens 4.x's "
                         f"native model has none; load it on TransformerLens 3.9 (transformer-lens==3.9.0).")
    _checked_load(bridge, {key: t for key, t in converted.items() if key not in extra}, saved.source)
    return bridge.eval()


def load_hooked_checkpoint(path: Path, *, device: str | torch.device = "cpu",
                           dtype: torch.dtype = torch.float32) -> Any:
    """The saved HookedTransformer at ``path`` as a ``HookedTransformer`` (TransformerLens 3.x) or as a native
    ``TransformerBridge`` through ``convert_tl_checkpoint`` (4.x), in eval mode, named after the file or folder.

    Example: ``load_hooked_checkpoint(Path("model.pt"))`` after
    ``torch.save({"config": model.cfg.to_dict(), "state_dict": model.state_dict()}, "model.pt")``.
    """
    saved = read_checkpoint(path)
    name = path.stem if path.is_file() else path.name
    if has_hooked_transformer():
        return _as_hooked_transformer(saved, name, device, dtype)
    return _as_native_bridge(saved, name, device, dtype)
