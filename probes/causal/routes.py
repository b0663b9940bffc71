"""How the forward passes of a head ablation run: through the whole model, or with two shortcuts that are checked
on the model at hand before they are used.

``unembed``: the loss is read from the unembedding's input (the argument of ``model.unembed``, caught by a forward
pre-hook that ends the pass there) and ``model.unembed`` is applied at the slice positions only, in chunks, instead
of the model computing ``[rows pos d_vocab]`` logits everywhere.

``cut_tail`` (next-token loss): the positions after the last measured position's target are not run. In a causal
model the loss at a position reads no later token, so a row whose slices end early (the report's topic rows: a few
topic words in 64 tokens) is cut there, in the clean pass and every ablated copy.

``fused`` (TransformerBridges over Hugging Face models): every layer's attention is computed by the fused kernel of
:func:`probes.core.attention_rows.reduced_attention` instead of the bridge's eager softmax, so no ``[T, T]`` pattern
is made (``hook_pattern`` does not fire; ``hook_z`` does, which is all an ablation reads).

``start_layer`` L > 0 (prefix sharing): every head set ablates layers >= L only, so the residual entering block L
(``blocks.{L}.hook_resid_pre``) is the clean pass's in every ablated copy. The grouped passes put the clean residual
there (repeated per copy), and the blocks below L return their input without computing: for the pass, their
module's ``forward`` is swapped for a pass-through (on a TransformerBridge the Hugging Face layer inside
``blocks.{l}``, so the embedding, position ids and attention masks are still made from the real tokens; on a
HookedTransformer or a HookedRootModule ``blocks.{l}`` itself). TransformerBridge's ``start_at_layer`` is not used:
it still runs blocks 0..L-1 and feeds the residual as ``inputs_embeds``, which loses padding-derived position ids.

:func:`choose_route` checks each shortcut once per measurement on the first rows of the first batch: the clean
per-token loss through the shortcut must equal the whole forward's (relative and absolute tolerance 1e-4, or the
parameters' dtype resolution if coarser), and under ``fused`` the lowest ablated layer's ``hook_z`` must still
fire; else, or when a hook or module is missing, a warning is logged and the plain path is used. Logit soft-capping
after the unembedding (Gemma 2) or an unembedding the model does not call as ``model.unembed`` fail that check.
The verdicts that do not depend on the ablated layers (``unembed``, ``fused`` and the hooks it fires, ``cut_tail``)
are kept per model, check rows and weights (:class:`LayerFreeChecks`): several head sets ablated on the same rows
check them once, and the prefix sharing per lowest ablated layer.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor, nn

from mechprobe import forward
from probes.causal.means import z_hook
from probes.causal.token_loss import (
    LossInputs,
    counted_positions,
    token_losses_from_logits,
    token_losses_from_unembed_input,
)
from probes.core.attention_rows import reduced_attention, supports_reductions
from probes.core.batch import TokenBatch
from probes.core.errors import ModelError
from probes.core.model_kind import FwdHook, HookedModel, HookFn, model_kind

log = logging.getLogger(__name__)

CHECK_LOGIT_BYTES = 64 * 2**20
"""Full logits of the whole forward that :func:`choose_route` compares against: the first batch's first
``CHECK_LOGIT_BYTES / (4 pos d_vocab)`` rows (at least one)."""
CHECK_POSITIONS = 512
"""Positions of the window :func:`choose_route` checks on (around the first measured position): a shortcut is right
or wrong whatever the length, and the whole forward it is compared with makes ``[T, T]`` patterns (at 32,768 tokens
93 GiB on SmolLM2's shape)."""

CHECK_TOLERANCE = 1e-4


@dataclass(frozen=True)
class ForwardRoute:
    """``unembed``: loss from the unembedding's input at the slice positions; ``start_layer``: blocks below it
    skipped and the clean residual put in at ``blocks.{start_layer}.hook_resid_pre`` (0: nothing skipped);
    ``cut_tail``: each batch cut after its last measured position's target (:func:`cut_after_last_measured`);
    ``fused``: attention through the fused kernel, no pattern made."""

    unembed: bool = False
    start_layer: int = 0
    cut_tail: bool = False
    fused: bool = False

    def describe(self) -> str:
        parts = ["unembedding at the slice positions" if self.unembed else "full logits"]
        if self.fused:
            parts.append("fused attention")
        if self.start_layer:
            parts.append(f"blocks 0..{self.start_layer - 1} shared with the clean pass")
        if self.cut_tail:
            parts.append("positions after the last measured one not run")
        return ", ".join(parts)


PLAIN = ForwardRoute()


def cut_after_last_measured(batch: TokenBatch, masks: Bool[Tensor, "slice batch pos"]
                            ) -> tuple[TokenBatch, Bool[Tensor, "slice batch pos"]]:
    """``batch`` and its slice ``masks`` without the positions after the last marked one's next token (at least two
    positions kept): under next-token loss on a causal model the losses at the marked positions are unchanged."""
    marked = masks.any(0).any(0).nonzero()
    keep = min(batch.shape[1], int(marked.max()) + 2 if marked.numel() else 2)
    if keep == batch.shape[1]:
        return batch, masks
    mask = None if batch.attention_mask is None else batch.attention_mask[:, :keep]
    return TokenBatch(batch.tokens[:, :keep], batch.valid[:, :keep], mask), masks[..., :keep]


def resid_hook(layer: int) -> str:
    """The residual stream entering block ``layer`` [batch pos d_model]."""
    return f"blocks.{layer}.hook_resid_pre"


class _UnembedReached(Exception):
    """Raised from the unembedding's pre-hook: carries its input and ends the forward pass."""

    def __init__(self, hidden: Any) -> None:
        super().__init__()
        self.hidden = hidden


def _hidden_states(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return args[0] if args else kwargs.get("hidden_states")


def _pass_through(*args: Any, **kwargs: Any) -> Any:
    return _hidden_states(args, kwargs)


def block_compute(model: HookedModel, layer: int) -> nn.Module | None:
    """The module whose call computes block ``layer`` (the HF layer on a bridge), or None."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList) or not 0 <= layer < len(blocks):
        return None
    module = (getattr(blocks[layer], "original_component", None) if model_kind(model).is_bridge
              else blocks[layer])
    return module if isinstance(module, nn.Module) else None


def _block_computes(model: HookedModel, stop: int) -> list[nn.Module] | None:
    """The modules computing blocks ``0..stop-1`` (:func:`block_compute`), or None when one is missing."""
    modules = []
    for layer in range(stop):
        module = block_compute(model, layer)
        if module is None:
            return None
        modules.append(module)
    return modules


@contextlib.contextmanager
def _blocks_skipped(model: HookedModel, stop: int) -> Iterator[None]:
    """Blocks ``0..stop-1`` return their input unchanged inside the block (an instance ``forward`` of a module,
    e.g. accelerate's, is put back afterwards)."""
    modules = _block_computes(model, stop)
    if modules is None:
        raise ModelError(f"Skipping blocks below {stop} needs a module computing each of them (blocks.{{layer}}).")
    saved = [module.__dict__.get("forward") for module in modules]
    for module in modules:
        module.forward = _pass_through
    try:
        yield
    finally:
        for module, forward in zip(modules, saved):
            if forward is None:
                del module.forward
            else:
                module.forward = forward


def residual_injector(resid: Tensor, copies: int) -> HookFn:
    """A hook putting ``resid`` in: ``[rows ...]`` repeated per copy, or ``[copies * rows ...]`` (one per copy, e.g.
    each copy's residual after a prefix of ablated layers it shares with others) as it is."""

    def inject(x: Tensor, hook: Any) -> Tensor:
        if copies > 1 and tuple(x.shape) == tuple(resid.shape):
            return resid  # one per copy, gathered for this pass
        if tuple(x.shape) != (copies * resid.shape[0], *resid.shape[1:]):
            raise ModelError(f"{hook.name} fired with shape {tuple(x.shape)}; the clean residual put in there is "
                             f"{tuple(resid.shape)} per copy.")
        return resid.repeat(copies, *[1] * (resid.ndim - 1))

    return inject


class _HookReached(Exception):
    """Raised once the hooks a pass ends at have fired: carries their values and ends the forward pass."""

    def __init__(self, values: dict[str, Tensor]) -> None:
        super().__init__()
        self.values = values


def _collector(names: Sequence[str]) -> list[FwdHook]:
    """Hooks keeping the value at each of ``names`` that end the pass once all of them fired (in any order)."""
    values: dict[str, Tensor] = {}

    def keeper(name: str) -> HookFn:
        def keep(x: Tensor, hook: Any) -> None:  # keyed by the name asked for: a bridge's alias has another hook.name
            values[name] = x
            if len(values) == len(names):
                raise _HookReached(values)
        return keep

    return [(name, keeper(name)) for name in names]


def unembedding(model: HookedModel) -> nn.Module | None:
    """``model.unembed`` where it is a module (TransformerLens's unembedding: the ``unembed`` route reads the loss from
    its input), else None."""
    unembed = getattr(model, "unembed", None)
    return unembed if isinstance(unembed, nn.Module) else None


def _unembedding(model: HookedModel) -> nn.Module:
    unembed = unembedding(model)
    if unembed is None:
        raise ModelError("The unembed route needs a model.unembed module; this model has none.")
    return unembed


def _run_to_unembed(model: HookedModel, tokens: Tensor, kwargs: dict[str, Any], hooks: list[FwdHook]) -> Any:
    def stop(module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        raise _UnembedReached(_hidden_states(args, kw))

    handle = _unembedding(model).register_forward_pre_hook(stop, with_kwargs=True)
    try:
        forward.run(model, tokens, fwd_hooks=hooks, **kwargs)
    except _UnembedReached as reached:
        return reached.hidden
    finally:
        handle.remove()
    raise ModelError("The forward pass never called model.unembed, so the loss cannot be read from its input.")


@contextlib.contextmanager
def _pass_route(model: HookedModel, route: ForwardRoute, hooks: list[FwdHook], copies: int, resid: Tensor | None,
                start_layer: int) -> Iterator[None]:
    """The hooks and module swaps of a pass along ``route`` whose blocks below ``start_layer`` are skipped and get
    ``resid`` put in (appended to ``hooks``)."""
    with contextlib.ExitStack() as stack:
        if start_layer:
            if resid is None:
                raise ModelError(f"Skipping blocks below {start_layer} needs the clean residual there.")
            hooks.append((resid_hook(start_layer), residual_injector(resid, copies)))
            stack.enter_context(_blocks_skipped(model, start_layer))
        if route.fused:
            stack.enter_context(reduced_attention(model, _no_reductions))
        yield


def token_losses(model: HookedModel, route: ForwardRoute, inputs: LossInputs, kwargs: dict[str, Any],
                 hooks: Sequence[FwdHook], copies: int, resid: Tensor | None = None, *, start_layer: int | None = None
                 ) -> Float[Tensor, "copy token"]:
    """One forward pass over ``copies`` repeats of the batch with ``hooks``: the loss at each position of the union
    of the slices per copy. A route with ``start_layer`` needs ``resid``, the clean pass's residual there (``[rows
    ...]``, or ``[copies * rows ...]``: one per copy); ``start_layer`` (at least the route's) overrides where the
    residual goes in, e.g. after layers whose ablations several copies share (:func:`residual_at`)."""
    tokens = inputs.tokens.repeat(copies, 1)
    kwargs = {key: value.repeat(copies, 1) if isinstance(value, Tensor) else value for key, value in kwargs.items()}
    hooks = list(hooks)
    with _pass_route(model, route, hooks, copies, resid, route.start_layer if start_layer is None else start_layer):
        if route.unembed:
            hidden = _run_to_unembed(model, tokens, kwargs, hooks)
        else:
            logits = forward.run(model, tokens, fwd_hooks=hooks, **kwargs)
    if route.unembed:
        return token_losses_from_unembed_input(_unembedding(model), hidden, inputs, copies, int(model.cfg.d_vocab))
    return token_losses_from_logits(logits, inputs, copies)


def residual_at(model: HookedModel, route: ForwardRoute, inputs: LossInputs, kwargs: dict[str, Any],
                hooks: Sequence[FwdHook], copies: int, resid: Tensor, stop_layer: int
                ) -> Float[Tensor, "row pos d_model"]:
    """A pass like :func:`token_losses` (``route.start_layer`` > 0: blocks below it skipped, ``resid`` put in) that
    ends where block ``stop_layer`` starts: the residual entering it for each of the ``copies``, ``[copies * rows
    pos d_model]``."""
    name = resid_hook(stop_layer)
    return values_at(model, route, inputs, kwargs, hooks, copies, [name], resid=resid, layer=route.start_layer)[name]


def values_at(model: HookedModel, route: ForwardRoute, inputs: LossInputs, kwargs: dict[str, Any],
              hooks: Sequence[FwdHook], copies: int, names: Sequence[str], *, resid: Tensor | None = None,
              layer: int = 0) -> dict[str, Tensor]:
    """A pass over ``copies`` repeats of the batch with ``hooks`` that ends once every hook of ``names`` has fired:
    the value at each, ``[copies * rows ...]`` (a bridge may fire ``hook_pattern`` after ``hook_z``, so the pass
    waits for all). ``resid`` (``[rows ...]``, or ``[copies * rows ...]``: one per copy) is put in at
    ``blocks.{layer}.hook_resid_pre``; the blocks below ``layer`` are skipped where the route allows it
    (``route.start_layer`` > 0: :func:`choose_route` checked it), else they run and their output is replaced."""
    tokens = inputs.tokens.repeat(copies, 1)
    kwargs = {key: value.repeat(copies, 1) if isinstance(value, Tensor) else value for key, value in kwargs.items()}
    skip = layer if resid is not None and route.start_layer > 0 else 0
    hooks = [*hooks, *_collector(names)]
    if resid is not None and not skip:
        hooks.append((resid_hook(layer), residual_injector(resid, copies)))
    try:
        with _pass_route(model, route, hooks, copies, resid, skip):
            forward.run(model, tokens, fwd_hooks=hooks, **kwargs)
    except _HookReached as reached:
        return reached.values
    raise ModelError(f"The forward pass ended before {', '.join(names)} all fired.")


def _no_reductions(layer: Any) -> None:
    """The sink of a fused pass: the layers' reductions are not needed, only the model's output."""


def _tolerance(model: HookedModel) -> float:
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return max(CHECK_TOLERANCE, float(torch.finfo(dtype).resolution))


def _matches(model: HookedModel, name: str, instead: str, route: ForwardRoute, inputs: LossInputs,
             kwargs: dict[str, Any], reference: Tensor, resid: Tensor | None, fires: Sequence[str] = (),
             fired: set[str] | None = None) -> bool:
    """Whether ``route`` gives the clean per-token ``reference`` loss (and fires at least one of the hooks
    ``fires``, each one that fires added to ``fired``); logs a warning saying ``instead`` if not."""
    tolerance = _tolerance(model)
    fired = set() if fired is None else fired

    def record(name: str) -> HookFn:
        return lambda x, hook: fired.add(name)

    hooks = [(hook, record(hook)) for hook in fires]
    try:
        losses = token_losses(model, route, inputs, kwargs, hooks, 1, resid)[0]
    except (ModelError, RuntimeError, TypeError, ValueError, AttributeError) as error:
        log.warning("%s: %s fails on this model (%s: %s); %s.", _name(model), name, type(error).__name__, error,
                    instead)
        return False
    if fires and not fired:
        log.warning("%s: %s never fires %s; %s.", _name(model), name, ", ".join(fires), instead)
        return False
    if not torch.allclose(losses, reference, rtol=tolerance, atol=tolerance):
        worst = float((losses - reference).abs().max())
        log.warning("%s: %s changes the clean per-token loss by up to %.3g nats (tolerance %.0e); %s.",
                    _name(model), name, worst, tolerance, instead)
        return False
    return True


def _name(model: HookedModel) -> str:
    return str(getattr(getattr(model, "cfg", None), "model_name", None) or type(model).__name__)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Tensor) and isinstance(b, Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device and bool(torch.equal(a, b))
    return not isinstance(a, Tensor) and not isinstance(b, Tensor) and bool(a == b)


def _weight_versions(model: HookedModel) -> tuple[tuple[int, int, int], ...]:
    """Each parameter's and buffer's identity, storage and in-place version: a change to the weights changes it."""
    tensors = itertools.chain(model.parameters(), getattr(model, "buffers", lambda: iter(()))())
    return tuple((id(t), t.data_ptr(), t._version) for t in tensors)


@dataclass(frozen=True)
class LayerFreeChecks:
    """The verdicts of :func:`choose_route` that do not depend on the lowest ablated layer, on one model for one
    check (its rows, targets, masks and forward arguments) at one weight version: ``unembed``, ``fused`` (the
    clean loss through the fused kernel) with the ``hook_z`` names it ``fired``, and ``cut_tail``."""

    loss: str
    check: LossInputs
    kwargs: dict[str, Any]
    weights: tuple[tuple[int, int, int], ...]
    unembed: bool
    fused: bool
    fired: frozenset[str]
    cut_tail: bool

    KEPT_PER_MODEL = 4  # checks remembered per model (the newest); they go when the model does

    @classmethod
    def recall(cls, model: HookedModel, loss: str, check: LossInputs, kwargs: dict[str, Any]
               ) -> LayerFreeChecks | None:
        """The checks already run on ``model`` with exactly these inputs and weights, or None."""
        weights = _weight_versions(model)
        for kept in _LAYER_FREE.get(model, ()):
            if (kept.loss == loss and kept.weights == weights and kept.kwargs.keys() == kwargs.keys()
                    and all(_same(kept.kwargs[k], v) for k, v in kwargs.items())
                    and all(_same(a, b) for a, b in zip(
                        (kept.check.tokens, kept.check.targets, kept.check.masks),
                        (check.tokens, check.targets, check.masks)))):
                return kept
        return None

    @classmethod
    def run(cls, model: HookedModel, check: LossInputs, kwargs: dict[str, Any], reference: Tensor
            ) -> LayerFreeChecks:
        """Run the checks (a warning names each shortcut that fails) and remember them for ``model``."""
        full_logits = "head ablation computes full logits, a few copies of the batch per forward pass"
        unembed = unembedding(model) is not None
        if not unembed:
            log.info("%s has no model.unembed module; %s.", _name(model), full_logits)
        unembed = unembed and _matches(model, "reading the loss from model.unembed's input", full_logits,
                                       ForwardRoute(unembed=True), check, kwargs, reference, None)
        fired: set[str] = set()
        z_hooks = [z_hook(layer) for layer in range(int(model.cfg.n_layers)) if z_hook(layer) in model.hook_dict]
        fused = supports_reductions(model) and bool(z_hooks) and _matches(
            model, "fused attention", "head ablation computes each layer's attention pattern",
            ForwardRoute(unembed=unembed, fused=True), check, kwargs, reference, None, fires=z_hooks, fired=fired)
        cut_tail = check.loss == "next" and _tail_cut_matches(model, check, kwargs, reference)
        checks = cls(check.loss, check, kwargs, _weight_versions(model), unembed, fused, frozenset(fired), cut_tail)
        kept = _LAYER_FREE.setdefault(model, [])
        kept.insert(0, checks)
        del kept[cls.KEPT_PER_MODEL :]
        return checks


_LAYER_FREE: weakref.WeakKeyDictionary[Any, list[LayerFreeChecks]] = weakref.WeakKeyDictionary()


@torch.inference_mode()
def choose_route(model: HookedModel, batch: TokenBatch, inputs: LossInputs, kwargs: dict[str, Any], start_layer: int
                 ) -> ForwardRoute:
    """The shortcuts that reproduce the whole forward's clean per-token loss on the first rows of ``batch``
    (``inputs`` and ``kwargs`` its loss inputs and forward arguments) when the ablated layers start at
    ``start_layer``; a warning names each one that cannot be used."""
    n_rows, n_pos = batch.shape
    width = min(n_pos, CHECK_POSITIONS)
    rows = max(1, min(n_rows, CHECK_LOGIT_BYTES // (4 * width * int(model.cfg.d_vocab))))
    counted = counted_positions(batch, inputs.loss)[:rows]
    if not bool(counted.any()):
        log.warning("%s: the first batch has no position to check the shortcuts on; head ablation uses the whole "
                    "forward pass.", _name(model))
        return PLAIN
    first = int(counted.any(0).nonzero()[0])
    start = max(0, min(first - width // 2, n_pos - width))
    window = slice(start, start + width)  # the check's sequence: a window holding the first measured positions
    check = LossInputs(inputs.loss, inputs.tokens[:rows, window], inputs.targets[:rows, window],
                       counted[None, :, window])
    kwargs = {key: value[:rows, window] if isinstance(value, Tensor) and value.ndim == 2 and value.shape[1] == n_pos
              else value[:rows] for key, value in kwargs.items()}
    kept: dict[str, Any] = {}
    hooks = []
    skipped = (_block_computes(model, start_layer)
               if start_layer > 0 and resid_hook(start_layer) in model.hook_dict else None)
    skippable = skipped is not None
    handle = None
    if skipped is not None:
        hooks.append((resid_hook(start_layer), lambda x, hook: kept.__setitem__("resid", x.clone())))

        def shapes(module: nn.Module, args: tuple[Any, ...], kw: dict[str, Any], output: Any) -> None:
            hidden = _hidden_states(args, kw)
            kept["passes"] = (isinstance(output, Tensor) and isinstance(hidden, Tensor)
                              and output.shape == hidden.shape)

        handle = skipped[-1].register_forward_hook(shapes, with_kwargs=True)
    try:
        reference = token_losses(model, PLAIN, check, kwargs, hooks, 1)[0]
    finally:
        if handle is not None:
            handle.remove()
    free = LayerFreeChecks.recall(model, inputs.loss, check, kwargs)
    if free is None:
        free = LayerFreeChecks.run(model, check, kwargs, reference)
    unembed = free.unembed
    fused = free.fused and z_hook(start_layer) in free.fired
    if free.fused and not fused:
        log.warning("%s: fused attention never fires %s; head ablation computes each layer's attention pattern.",
                    _name(model), z_hook(start_layer))
    start = 0
    unshared = f"blocks 0..{start_layer - 1}, below the ablated layers, run in every ablated copy"
    if start_layer > 0:
        if not skippable:
            log.info("%s: no %s hook or no blocks.{layer} modules to skip; %s.", _name(model),
                        resid_hook(start_layer), unshared)
        elif not kept.get("passes", False) or "resid" not in kept:
            log.info("%s: block %d does not return a tensor of its input's shape; %s.", _name(model),
                        start_layer - 1, unshared)
        elif _matches(model, f"sharing blocks 0..{start_layer - 1} with the clean pass", unshared,
                      ForwardRoute(unembed=unembed, start_layer=start_layer, fused=fused), check, kwargs, reference,
                      kept["resid"]):
            start = start_layer
    route = ForwardRoute(unembed=unembed, start_layer=start, cut_tail=free.cut_tail, fused=fused)
    log.info("%s: head ablation route: %s", _name(model), route.describe())
    return route


def _tail_cut_matches(model: HookedModel, check: LossInputs, kwargs: dict[str, Any], reference: Tensor) -> bool:
    """Whether the check rows cut to their first half (plus one position) give the whole forward's clean loss at
    the counted positions before the cut (:func:`_matches`: a warning when they do not, e.g. a model that is not
    causal)."""
    n_pos = check.tokens.shape[1]
    keep = n_pos // 2 + 1
    counted = check.masks[0]
    before = counted.clone()
    before[:, keep - 1 :] = False
    if keep >= n_pos or not bool(before.any()):
        return False
    cut = LossInputs(check.loss, check.tokens[:, :keep], check.targets[:, :keep], before[None, :, :keep])
    cut_kwargs = {key: value[:, :keep] if isinstance(value, Tensor) and value.ndim == 2 else value
                  for key, value in kwargs.items()}
    return _matches(model, "cutting the rows after the last measured position", "every ablated pass runs the whole "
                    "rows", PLAIN, cut, cut_kwargs, reference[before[counted]], None)
