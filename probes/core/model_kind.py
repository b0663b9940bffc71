"""What kind of hooked model mechprobe holds: the one place that tells TransformerLens's model families apart.

mechprobe runs on TransformerLens 3.9 (``HookedTransformer``, ``HookedEncoder`` and the bridges) and on 4.x (the
bridges only). Everything that depends on the family of a model (whether its forward takes an attention mask and
under which keyword, which module computes a block, how its random-weight control is initialised, where its
attention direction is read) asks :func:`model_kind` instead of checking class or module names itself. The
TransformerLens classes are looked up through paths that exist in both generations
(``transformer_lens.model_bridge.TransformerBridge``; 3.9's top-level ``transformer_lens`` does not export it).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, cast

from torch import Tensor, nn

from probes.core.errors import InputError, ModelError

if TYPE_CHECKING:
    from transformer_lens.hook_points import HookPoint


class HookedConfig(Protocol):
    """The sizes every probe reads from a model's ``cfg`` (``ModelInfo.of`` checks them at run time as well, for a
    model that was never type-checked, with an error that names what is missing)."""

    @property
    def n_layers(self) -> int: ...

    @property
    def n_heads(self) -> int: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def d_vocab(self) -> int: ...


HookFn = Callable[[Tensor, Any], "Tensor | None"]
"""A forward hook as TransformerLens calls it: ``hook(value, hook=point)``, returning a replacement or None."""
FwdHook = tuple[str, HookFn]
"""A ``(hook name, hook)`` pair of ``run_with_hooks(fwd_hooks=...)``."""


class HookedModel(Protocol):
    """A hooked model as the probes use it: a ``HookedTransformer`` / ``HookedEncoder`` (TransformerLens 3.x), a
    ``TransformerBridge``, or a ``HookedRootModule`` subclass with a ``HookPoint`` at each activation a probe
    reads. The probes read its sizes from ``cfg``, hook it by TransformerLens's hook names (``hook_dict``,
    ``run_with_hooks``, ``hooks``), call it, and read its parameters' device and dtype (``eval`` / ``train``
    around a run, then back). What one family has and another lacks (a bridge's ``original_model``, the
    unembedding, a tokenizer) is not part of the type: the code that needs it reads it with ``getattr`` and a
    default (:func:`wrapped_model`, ``probes.causal.routes.unembedding``) and decides there what its absence means."""

    @property
    def cfg(self) -> HookedConfig: ...

    @property
    def hook_dict(self) -> Mapping[str, HookPoint]: ...

    def __call__(self, *args: Any, **kwargs: Any) -> Any: ...

    def run_with_hooks(self, *args: Any, **kwargs: Any) -> Any: ...

    def hooks(self, *args: Any, **kwargs: Any) -> Any: ...

    def parameters(self, recurse: bool = True) -> Iterator[nn.Parameter]: ...

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]: ...

    def train(self, mode: bool = True) -> Any: ...

    def eval(self) -> Any: ...


class ModelKind(enum.Enum):
    """The families of hooked models mechprobe tells apart (the value says what each is)."""

    HF_BRIDGE = "a TransformerBridge over a Hugging Face model"
    NATIVE_BRIDGE = "a TransformerBridge over a TransformerLens-native model (boot_native)"
    HOOKED_TRANSFORMER = "a HookedTransformer (TransformerLens 3.x)"
    HOOKED_ENCODER = "a HookedEncoder (TransformerLens 3.x)"
    HOOKED_MODULE = "a hooked module (a HookedRootModule, or any object with run_with_hooks and hook_dict)"

    @property
    def is_bridge(self) -> bool:
        """Whether the model is a TransformerBridge (its blocks wrap the computing module as ``original_component``)."""
        return self in (ModelKind.HF_BRIDGE, ModelKind.NATIVE_BRIDGE)

    @property
    def mask_keyword(self) -> str | None:
        """The forward argument that takes a ``[batch pos]`` attention mask (1 = attend), or None when it takes none."""
        if self is ModelKind.HOOKED_ENCODER:
            return "one_zero_attention_mask"
        return None if self is ModelKind.HOOKED_MODULE else "attention_mask"


def transformer_bridge_class() -> Any:
    """TransformerLens's ``TransformerBridge`` class (``transformer_lens.model_bridge`` in 3.9 and 4.x; 3.9's
    top-level ``transformer_lens`` does not export it). Typed ``Any``: ``boot_native`` is attached to it when
    TransformerLens imports its native source, which type checkers do not see."""
    from transformer_lens.model_bridge import TransformerBridge

    return TransformerBridge


@functools.cache
def _bridge_types() -> tuple[type, ...]:
    import transformer_lens.model_bridge as bridges

    # 4.x: BridgeCore is the parent of TransformerBridge and of the torch-free RemoteBridge; 3.9 has neither.
    return tuple(getattr(bridges, name) for name in ("BridgeCore", "TransformerBridge") if hasattr(bridges, name))


@functools.cache
def legacy_class(name: str) -> type | None:
    """``transformer_lens.<name>`` (``HookedTransformer``, ``HookedEncoder``, ...) where this TransformerLens has it
    (3.x), else None (4.x removed them; its module ``__getattr__`` raises ImportError for their names)."""
    import transformer_lens

    try:
        found = getattr(transformer_lens, name)
    except (ImportError, AttributeError):
        return None
    return found if isinstance(found, type) else None


def has_hooked_transformer() -> bool:
    """Whether this TransformerLens still has ``HookedTransformer`` (3.x)."""
    return legacy_class("HookedTransformer") is not None


@functools.cache
def _native_model_class() -> type | None:
    try:
        from transformer_lens.model_bridge.sources.native.model import NativeModel
    except ImportError:  # a TransformerLens without the native source
        return None
    return NativeModel


def _listed(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _transformer_lens_models() -> list[str]:
    legacy = [f"a {name}" for name in ("HookedTransformer", "HookedEncoder") if legacy_class(name) is not None]
    return ["a TransformerBridge", *legacy]


def accepted_models() -> str:
    """The models this TransformerLens offers that mechprobe accepts, for error messages: ``"a TransformerBridge,
    a HookedTransformer, a HookedEncoder or a HookedRootModule"`` on 3.9, ``"a TransformerBridge or a
    HookedRootModule"`` on 4.x."""
    return _listed([*_transformer_lens_models(), "a HookedRootModule"])


def wrapped_model(model: HookedModel) -> Any:
    """The module a bridge wraps (``original_model``), or None where there is none (4.x's RemoteBridge keeps no local
    model, and its driver raises for the attribute)."""
    try:
        return getattr(model, "original_model", None)
    except Exception:
        return None


def model_kind(model: HookedModel) -> ModelKind:
    """Which family ``model`` belongs to; a :class:`ModelError` naming what is accepted when it is not a hooked model.

    Example: ``model_kind(probes.load_model("minilm-l6")) is ModelKind.HF_BRIDGE``.
    """
    if isinstance(model, _bridge_types()):
        native = _native_model_class()
        native_bridge = native is not None and isinstance(wrapped_model(model), native)
        return ModelKind.NATIVE_BRIDGE if native_bridge else ModelKind.HF_BRIDGE
    for kind, name in ((ModelKind.HOOKED_TRANSFORMER, "HookedTransformer"),
                       (ModelKind.HOOKED_ENCODER, "HookedEncoder")):
        cls = legacy_class(name)
        if cls is not None and isinstance(model, cls):
            return kind
    if callable(getattr(model, "run_with_hooks", None)) and isinstance(getattr(model, "hook_dict", None), dict):
        return ModelKind.HOOKED_MODULE
    hint = " (a name or folder: load it with probes.load_model first)" if isinstance(model, str) else ""
    raise ModelError(
        f"Expected a hooked model: {accepted_models()} (with run_with_hooks and hook_dict); got "
        f"{type(model).__name__}{hint}. Load one with probes.load_model(...), or subclass "
        f"transformer_lens.HookedRootModule, put HookPoints at the activations and call self.setup()."
    )


def as_hooked_model(module: object) -> HookedModel:
    """``module`` as the :class:`HookedModel` it is: for a model typed as the ``torch.nn.Module`` it also is (a toy
    built by ``toymodels``, which cannot name this type), checked as :func:`model_kind` checks it, with a
    :class:`ModelError` naming what is accepted when it is not a hooked model.

    Example: ``run_probes(as_hooked_model(toy), [HeadScoreProbe()], batches)``.
    """
    model = cast(HookedModel, module)
    model_kind(model)
    return model


def mask_kwargs(model: HookedModel, attention_mask: Tensor | None) -> dict[str, Tensor]:
    """The forward keyword arguments that pass ``attention_mask`` [batch pos] to ``model`` (none when it is None);
    an :class:`InputError` for a hooked module, whose forward takes no mask."""
    if attention_mask is None:
        return {}
    keyword = model_kind(model).mask_keyword
    if keyword is None:
        raise InputError(
            f"This batch has an attention_mask, but the model ({type(model).__name__}) is a custom hooked module "
            f"whose forward() takes no mask. Pass unpadded batches of equal length instead, or a model whose "
            f"forward takes one ({_listed(_transformer_lens_models())})."
        )
    return {keyword: attention_mask}


def hf_attention_is_causal(model: HookedModel) -> bool | None:
    """For a bridge over a Hugging Face model: whether its attention is causal, read from the ``is_causal`` flag the
    Hugging Face attention modules carry (TransformerLens 3.9's BERT bridge reports ``attention_dir="causal"``, and
    its attention bridges ``is_causal=True``, so TransformerLens's own components are not asked); None when no module
    says or they disagree (an encoder-decoder)."""
    from transformer_lens.model_bridge.generalized_components.base import GeneralizedComponent

    wrapped = wrapped_model(model)
    modules = wrapped.modules() if callable(getattr(wrapped, "modules", None)) else ()
    flags = {module.is_causal for module in modules
             if isinstance(getattr(module, "is_causal", None), bool) and not isinstance(module, GeneralizedComponent)}
    return flags.pop() if len(flags) == 1 else None
