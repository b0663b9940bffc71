"""The random-weight control: the same architecture as a model, with freshly initialised weights.

A statistic on a pretrained model means something only beside the same statistic on the same
architecture with random weights (docs/ARCHITECTURE.md, "Principles"). :func:`random_weight_control` builds
that control from the model itself, offline, without touching the original:

- a ``TransformerBridge`` over a Hugging Face model (``boot_transformers``): the wrapped model's
  own config (``bridge.original_model.config``) goes through ``type(hf_model)._from_config``, so
  the architecture's ``_init_weights`` draws the weights, then the same bridge call wraps it with
  the same tokenizer object. Weights are drawn on the CPU in float32 under ``torch.manual_seed(seed)``
  and then cast to the original's dtype and moved to its device, so a seed gives the same weights
  (up to rounding) on every device and dtype.
- a ``TransformerBridge`` over a TL-native model (``boot_native``): a copy re-initialised with
  TransformerLens's own ``initialize_native_model`` and the seed.
- a ``HookedTransformer`` (TransformerLens 3.9): a deep copy holding the weights of the same architecture freshly
  built from the model's config and initialised by TransformerLens's own ``init_weights`` under the seed (the
  config's ``init_mode`` and ``initializer_range``; biases 0 and norm weights 1 as constructed); its ``cfg.seed``
  is the seed, so ``control.init_weights()`` reproduces the weights. A ``HookedEncoder`` has no ``init_weights``
  (its constructor leaves the matrices empty): its weight matrices (``W_*`` and the heads' ``W``) are drawn as
  BERT draws them, ``normal(0, cfg.initializer_range)``.
- a ``HookedRootModule`` (custom toy models): a deep copy in which every submodule with
  ``reset_parameters()`` (``nn.Linear``, ``nn.Embedding``, ``nn.LayerNorm``, ...) is reset under
  the seed. A trainable parameter that no such module owns (a bare ``nn.Parameter``) is an error
  unless ``redraw_unresettable=True``, which re-draws it from ``normal(mean, std)`` of its own
  values (a scalar or a constant parameter keeps its value: it has no spread to draw from).

Frozen parameters (``requires_grad=False``) of toy models (native bridges, HookedTransformers and
hooked modules) are part of the architecture (one-hot embeddings, a zeroed positional table) and
keep their values. The control's ``ModelInfo`` (layers, heads, context, vocabulary, direction, special
tokens) and hook names are checked to equal the original's; only its name differs.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
import warnings
from typing import Any, cast

import torch
from torch import nn

from mechprobe.validation import is_integer
from probes.core.errors import ConfigError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import (
    HookedModel,
    ModelKind,
    accepted_models,
    legacy_class,
    model_kind,
    transformer_bridge_class,
    wrapped_model,
)

log = logging.getLogger(__name__)


def control_name(name: str, seed: int) -> str:
    """The name a control model carries: ``"smollm2-135m (random weights, seed 0)"``."""
    return f"{name} (random weights, seed {seed})"


def random_weight_control(model: HookedModel, *, seed: int = 0, redraw_unresettable: bool = False) -> Any:
    """A new hooked model: ``model``'s architecture, config and tokenizer with random weights.

    The original is never modified. The same ``seed`` gives the same weights; the result is in
    the original's train/eval mode, dtype and device, named ``"<name> (random weights, seed <seed>)"``.
    ``redraw_unresettable`` only matters for hooked modules with bare parameters (module docstring).

    Example::

        model = probes.load_model("smollm2-135m")
        control = probes.random_weight_control(model, seed=0)
        probes.head_scores(control).top_heads("induction", k=1)   # near chance, unlike the model's
    """
    if not is_integer(seed) or not 0 <= seed < 2**63:
        raise ConfigError(f"seed must be an integer in [0, 2**63); got {seed!r}. Pass e.g. seed=0.")
    if not isinstance(redraw_unresettable, bool):
        raise ConfigError(f"redraw_unresettable must be True or False; got {redraw_unresettable!r}.")
    info = ModelInfo.of(model)  # a ModelError that says what is missing when it is not a hooked model
    if not isinstance(model, nn.Module):
        raise ModelError(
            f"random_weight_control needs a torch module ({accepted_models()}); got {type(model).__name__}, "
            f"which has hooks but no parameters to re-initialise."
        )
    name = control_name(info.name, seed)
    start = time.perf_counter()
    kind = model_kind(model)
    if kind is ModelKind.NATIVE_BRIDGE:
        control = _native_bridge_control(model, seed, name)
    elif kind is ModelKind.HF_BRIDGE:
        control = _hf_bridge_control(model, _wrapped_module(model), seed, name)
    elif kind in (ModelKind.HOOKED_TRANSFORMER, ModelKind.HOOKED_ENCODER):
        control = _hooked_transformer_control(model, kind, seed, name)
    else:
        control = _module_control(model, seed, name, redraw_unresettable)
    _check_same_architecture(model, control, info)
    log.info("Built the random-weight control %r in %.1f s", name, time.perf_counter() - start)
    return control


# --- TransformerBridge over a Hugging Face model -------------------------------------------------


def _wrapped_module(bridge: Any) -> nn.Module:
    """The module a bridge wraps (``bridge.original_model``, kept by its driver)."""
    module = wrapped_model(bridge)
    if not isinstance(module, nn.Module):
        raise ModelError(
            f"This TransformerBridge ({type(getattr(bridge, '_driver', None)).__name__} driver) does not "
            f"expose a local torch model, so no random-weight control can be built from it. Load the "
            f"model with probes.load_model(...) (TransformerBridge.boot_transformers) instead."
        )
    return module


def _hf_bridge_control(bridge: Any, hf_model: nn.Module, seed: int, name: str) -> Any:
    from transformers import PreTrainedModel

    if not isinstance(hf_model, PreTrainedModel):
        raise ModelError(
            f"The bridge wraps a {type(hf_model).__name__}, not a Hugging Face PreTrainedModel, so its "
            f"architecture cannot be rebuilt from a config. Build the control yourself: construct the "
            f"same module with fresh weights and wrap it the way the original was wrapped."
        )
    if getattr(bridge, "compatibility_mode", False):
        raise ModelError(
            "The bridge is in compatibility mode (its weights may be folded and centred), and the "
            "options used are not recorded. Build the control from the bridge before calling "
            "enable_compatibility_mode(), then call it with the same options on both."
        )
    devices = {p.device for p in hf_model.parameters()} | {b.device for b in hf_model.buffers()}
    if len(devices) > 1:
        raise ModelError(
            f"The original model is spread over {len(devices)} devices "
            f"({', '.join(sorted(str(d) for d in devices))}); random_weight_control builds the control on "
            f"one device. Load the original on a single device (probes.load_model(..., device=...))."
        )
    device = next(iter(devices)) if devices else torch.device("cpu")
    floating = [p.dtype for p in hf_model.parameters() if p.is_floating_point()]
    dtype = floating[0] if floating else bridge.cfg.dtype

    config = copy.deepcopy(hf_model.config)
    if getattr(config, "quantization_config", None) is not None:
        log.warning("%s is quantized; its random-weight control is not (plain %s weights).", name, dtype)
        config.__dict__.pop("quantization_config", None)
    original_config_dtype = getattr(hf_model.config, "dtype", None)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            control_hf = cast(Any, type(hf_model))._from_config(config, dtype=torch.float32)
        except Exception as error:  # transformers raises many types for configs it cannot build
            raise ModelError(
                f"Cannot rebuild {type(hf_model).__name__} from its own config ({type(error).__name__}: "
                f"{str(error).splitlines()[0] if str(error) else ''}). The model's config does not "
                f"describe its architecture fully; build the control from the checkpoint's config.json."
            ) from error
    if dtype != torch.float32:
        from transformer_lens.utilities.multi_gpu import maybe_cast_floating_params

        maybe_cast_floating_params(control_hf, dtype)  # parameters only; float32 buffers (RoPE) stay
    if original_config_dtype is not None:
        control_hf.config.dtype = original_config_dtype
    control_hf = control_hf.to(device)
    generation_config = getattr(hf_model, "generation_config", None)
    if generation_config is not None:
        control_hf.generation_config = copy.deepcopy(generation_config)

    source = getattr(hf_model.config, "name_or_path", None) or name
    try:
        control = transformer_bridge_class().boot_transformers(
            source,
            hf_model=control_hf,
            tokenizer=bridge.tokenizer,
            device=device,
            dtype=bridge.cfg.dtype,
            trust_remote_code=bool(getattr(bridge.cfg, "trust_remote_code", False)),
        )
    except Exception as error:
        raise ModelError(
            f"TransformerLens could not wrap the random-weight {type(hf_model).__name__} "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})."
        ) from error
    control.cfg.model_name = name
    control.train(bridge.training)
    return control


# --- TransformerBridge over a TL-native model (boot_native) --------------------------------------


def _native_bridge_control(bridge: Any, seed: int, name: str) -> Any:
    from transformer_lens.model_bridge.sources.native.init import initialize_native_model

    control = copy.deepcopy(bridge)
    native = control.original_model
    frozen = _frozen_values(native)
    initialize_native_model(native, control.cfg, seed=seed)
    _restore(native, frozen)
    _clear_state(control)
    control.cfg.model_name = name
    control.cfg.seed = seed  # so that control.init_weights() reproduces these weights
    return control


# --- HookedTransformer and HookedEncoder (TransformerLens 3.x) -----------------------------------


def _hooked_transformer_control(model: nn.Module, kind: ModelKind, seed: int, name: str) -> nn.Module:
    """A deep copy of ``model`` (same class, cfg and tokenizer) holding the weights of a fresh model built from its
    config and initialised under the seed (module docstring)."""
    base: Any = legacy_class("HookedTransformer" if kind is ModelKind.HOOKED_TRANSFORMER else "HookedEncoder")
    control: Any = _deep_copy(model)
    cfg: Any = copy.deepcopy(model.cfg)
    # The fresh model only supplies weights: no tokenizer (a tokenizer name would load one from the hub). Setting
    # cfg.seed here (not through the config's constructor, which seeds torch, random and numpy) makes the
    # HookedTransformer's init_weights() seed torch itself; the encoder's draw is seeded below.
    cfg.tokenizer_name, cfg.seed, cfg.init_weights = None, seed, kind is ModelKind.HOOKED_TRANSFORMER
    frozen = _frozen_values(control)
    with torch.random.fork_rng(devices=[]), torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.9 warns that these classes leave in 4.0
        fresh = base(cfg, move_to_device=False)
        if kind is ModelKind.HOOKED_ENCODER:
            torch.manual_seed(seed)
            for parameter_name, parameter in fresh.named_parameters():
                if parameter_name.rsplit(".", 1)[-1].startswith("W"):  # W_E ... W_U, and the heads' W
                    nn.init.normal_(parameter, std=cfg.initializer_range)
    control.load_state_dict(fresh.state_dict())
    _restore(control, frozen)
    _clear_state(control)
    control.cfg.seed = seed  # so that control.init_weights() reproduces these weights
    _rename(control, name)
    return cast(nn.Module, control)


# --- HookedRootModule (and any other hooked torch module) -----------------------------------------


def _deep_copy(model: nn.Module) -> nn.Module:
    try:
        return copy.deepcopy(model)
    except Exception as error:
        raise ModelError(
            f"Cannot copy {type(model).__name__} to build its random-weight control "
            f"({type(error).__name__}: {error}). Make the model deep-copyable (no open files, "
            f"generators or locks as attributes)."
        ) from error


def _module_control(model: nn.Module, seed: int, name: str, redraw_unresettable: bool) -> nn.Module:
    control = _deep_copy(model)
    resets = ((m, getattr(m, "reset_parameters", None)) for m in control.modules())
    resettable = [(m, reset) for m, reset in resets if callable(reset)]
    covered = {id(p) for m, _ in resettable for p in m.parameters(recurse=False)}
    trainable = [(n, p) for n, p in control.named_parameters() if p.requires_grad]
    bare = [(n, p) for n, p in trainable if id(p) not in covered]
    if bare and not redraw_unresettable:
        names = ", ".join(n for n, _ in bare[:5]) + (f" and {len(bare) - 5} more" if len(bare) > 5 else "")
        raise ModelError(
            f"{type(model).__name__} has trainable parameters that no submodule's reset_parameters() "
            f"re-initialises: {names}. Either hold them in modules that have reset_parameters() "
            f"(nn.Linear, nn.Embedding, ...), freeze them with requires_grad_(False) if they are a "
            f"fixed part of the architecture, or pass redraw_unresettable=True to re-draw each from "
            f"normal(mean, std) of its own values."
        )
    if not trainable:
        raise ModelError(
            f"{type(model).__name__} has no trainable parameters, so its random-weight control would be "
            f"the model itself. Frozen parameters (requires_grad=False) are kept as architecture."
        )
    frozen = _frozen_values(control)
    cuda = sorted({p.device.index or 0 for p in control.parameters() if p.device.type == "cuda"})
    with torch.random.fork_rng(devices=cuda), torch.no_grad():
        torch.manual_seed(seed)
        for module, reset in resettable:
            if any(p.requires_grad for p in module.parameters(recurse=False)):
                reset()
        generator = torch.Generator().manual_seed(seed)
        redrawn = sum(_redraw(parameter_name, parameter, generator) for parameter_name, parameter in bare)
    _restore(control, frozen)
    _clear_state(control)
    _rename(control, name)
    log.info(
        "%s: reset %d modules, re-drew %d of %d bare parameters, kept %d frozen parameters",
        name, sum(1 for m, _ in resettable if any(p.requires_grad for p in m.parameters(recurse=False))),
        redrawn, len(bare), len(frozen),
    )
    return control


def _redraw(parameter_name: str, parameter: nn.Parameter, generator: torch.Generator) -> bool:
    """Re-draw ``parameter`` from normal(mean, std) of its values (drawn on the CPU in float32).

    Returns False, leaving it as it is, for a scalar or a constant (no spread to draw from).
    """
    values = parameter.detach().to("cpu", torch.float32)
    if values.numel() < 2 or float(values.std()) == 0.0:
        log.info("Kept %s: %s has no spread to re-draw from", parameter_name,
                 "a scalar" if values.numel() < 2 else f"constant {float(values.flatten()[0]):g}")
        return False
    mean, std = float(values.mean()), float(values.std())
    drawn = torch.randn(values.shape, generator=generator) * std + mean
    parameter.copy_(drawn.to(parameter.device, parameter.dtype))
    return True


def _frozen_values(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.named_parameters() if not p.requires_grad}


def _restore(module: nn.Module, frozen: dict[str, torch.Tensor]) -> None:
    parameters = dict(module.named_parameters())
    with torch.no_grad():
        for parameter_name, value in frozen.items():
            parameters[parameter_name].copy_(value)


def _clear_state(control: nn.Module) -> None:
    """Drop what a deep copy carried over from the original's use: gradients and temporary hooks."""
    for parameter in control.parameters():
        parameter.grad = None
    reset_hooks = getattr(control, "reset_hooks", None)
    if callable(reset_hooks):
        reset_hooks()


def _rename(control: nn.Module, name: str) -> None:
    cfg = getattr(control, "cfg", None)
    if cfg is None or not hasattr(cfg, "model_name"):
        return
    try:
        cfg.model_name = name
    except (AttributeError, dataclasses.FrozenInstanceError):
        if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
            # nn.Module.__setattr__ stores any value; torch types its value as Tensor | Module
            control.cfg = dataclasses.replace(cfg, model_name=name)  # type: ignore[assignment]
        else:
            log.info("Could not rename the control's cfg (%s is read-only); it keeps the original name",
                     type(cfg).__name__)


def _check_same_architecture(model: HookedModel, control: Any, info: ModelInfo) -> None:
    control_info = ModelInfo.of(control)
    if dataclasses.replace(control_info, name=info.name) != info:
        raise ModelError(
            f"The random-weight control does not describe the same model: {control_info} vs {info}. "
            f"This is a bug in random_weight_control for {type(model).__name__}; please report it."
        )
    if set(control.hook_dict) != set(model.hook_dict):
        missing = sorted(set(model.hook_dict) ^ set(control.hook_dict))
        raise ModelError(
            f"The random-weight control has different hook names from the original (first difference: "
            f"{missing[0]}). This is a bug in random_weight_control for {type(model).__name__}; please report it."
        )
