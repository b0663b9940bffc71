"""Head ablation as a streaming measurement: the per-token loss change on slices of positions when a set of
heads (and, for the null, many random sets matched layer by layer) is knocked out at ``blocks.{l}.attn.hook_z``.

Per batch, one clean forward pass gives the clean loss (and, for ``resample``, the clean head outputs); then the
head sets are ablated in groups, each group one forward pass over the batch repeated along the batch axis, copy
``g`` ablating set ``g`` through one hook per layer that indexes per row. Everything a batch leaves behind is a
row of sums (:class:`AblationSums`), so halves merge into the whole and the bootstrap resamples batches.

Methods (on the head's output ``z`` [batch pos head d_head], before ``W_O``):
``zero``: set to 0; ``mean``: the head's mean output at that position over the probed batches
(:func:`probes.causal.means.head_output_means`, a first pass); ``resample``: the head's clean output on another
sequence of the batch (row ``i`` takes row ``derangement(batch, seed)[i]``, the same for every batch).

Where ``hook_z`` is missing: TransformerLens 4.x bridges alias it to the attention's output projection input
(``attn.o.hook_in``), reshaped to [batch pos head d_head], on every attention component that has one (standard,
joint-QKV, rotary, ALiBi, Bloom, CodeGen, MLA). A model without it (an attention that fuses the output
projection, a HookedRootModule that never put the HookPoint there) gets a :class:`ModelError` naming the hook;
nothing is ablated on another hook in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from probes.causal.head_sets import Heads, check_heads, derangement, head_layers, head_mask, layer_matched_head_sets
from probes.causal.means import HeadMeans, head_output_means, z_hook
from probes.causal.slices import SliceFn, predicted_positions
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.runner import _forward_kwargs, model_device

ABLATION_METHODS = ("zero", "mean", "resample")


def check_method(method: str) -> str:
    if method not in ABLATION_METHODS:
        raise ConfigError(f"Unknown ablation method {method!r}; use one of {', '.join(ABLATION_METHODS)}.")
    return method


def check_z_hooks(model: Any, layers: Iterable[int]) -> None:
    """Raise :class:`ModelError` naming the first ``blocks.{l}.attn.hook_z`` the model lacks."""
    missing = [z_hook(layer) for layer in layers if z_hook(layer) not in model.hook_dict]
    if missing:
        raise ModelError(
            f"Head ablation needs each head's output before W_O at {missing[0]} [batch pos head d_head]; this model "
            f"has no such hook{' (and %d more)' % (len(missing) - 1) if len(missing) > 1 else ''}. On a "
            f"HookedRootModule put a HookPoint named {missing[0]} on the per-head output; on a bridge, the "
            f"architecture's attention has no separate output projection to hook."
        )


@dataclass(frozen=True)
class AblationPlan:
    """What one measurement ablates: ``sets[0]`` is ``heads``, ``sets[1:]`` the null's random sets matched layer by
    layer; ``sets[s, i, h]`` is True when set ``s`` ablates head ``h`` of layer ``layers[i]``."""

    heads: Heads
    method: str
    layers: tuple[int, ...]
    sets: Bool[Tensor, "set layer head"]
    seed: int

    @classmethod
    def build(cls, info: ModelInfo, heads: Iterable[tuple[int, int]], *, method: str, n_draws: int = 0,
              seed: int = 0) -> "AblationPlan":
        """Validate ``heads`` and ``method`` and draw the null's ``n_draws`` sets from ``seed``."""
        checked = check_heads(heads, info)
        check_method(method)
        layers = head_layers(checked)
        real = head_mask(checked, layers, info.n_heads)
        draws = layer_matched_head_sets(checked, info.n_heads, n_draws, seed=seed)
        return cls(checked, method, layers, torch.cat([real[None], draws]), seed)

    @property
    def n_draws(self) -> int:
        return int(self.sets.shape[0]) - 1


@dataclass(frozen=True)
class AblationSums:
    """Additive state of an ablation measurement, one row per batch (the bootstrap's unit).

    ``rows[u]``: sequences in batch ``u``; ``count[u, s]``: tokens of slice ``s`` in batch ``u``; ``clean[u, s]``: their summed clean loss (nats);
    ``ablated[u, j, s]``: their summed loss with head set ``j`` ablated (``j = 0`` the measured heads,
    ``j >= 1`` the null's draws). ``merge`` concatenates batches: the sums over the merged rows are the sums of
    the parts."""

    slices: tuple[str, ...]
    rows: Float[Tensor, " unit"]
    count: Float[Tensor, "unit slice"]
    clean: Float[Tensor, "unit slice"]
    ablated: Float[Tensor, "unit set slice"]

    def merge(self, other: "AblationSums") -> "AblationSums":
        if other.slices != self.slices or other.ablated.shape[1] != self.ablated.shape[1]:
            raise InputError(f"Cannot merge ablation sums of slices {self.slices} x {self.ablated.shape[1]} sets with "
                             f"{other.slices} x {other.ablated.shape[1]}; measure both with the same plan and slices.")
        return AblationSums(self.slices, torch.cat([self.rows, other.rows]), torch.cat([self.count, other.count]), torch.cat([self.clean, other.clean]),
                            torch.cat([self.ablated, other.ablated]))

    def loss_change(self) -> Float[Tensor, "set slice"]:
        """Mean per-token loss change (ablated - clean) on each slice for every head set, over all batches."""
        return (self.ablated.sum(0) - self.clean.sum(0)) / self.count.sum(0)


def _slice_masks(batch: TokenBatch, slices: Mapping[str, SliceFn]) -> Bool[Tensor, "slice batch pos"]:
    counted = predicted_positions(batch)
    masks = []
    for name, fn in slices.items():
        mask = fn(batch)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != batch.shape:
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise InputError(f"The slice {name!r} must return a bool tensor of the batch's shape {batch.shape}; "
                             f"got {got}.")
        if bool((mask & ~counted).any()):
            raise InputError(f"The slice {name!r} marks positions with no valid next token (the last position, "
                             f"padding or special tokens); intersect it with probes.causal.predicted_positions(batch).")
        masks.append(mask)
    return torch.stack(masks)


def _slice_loss_sums(logits: Tensor, batch: TokenBatch, masks: Tensor, copies: int) -> Float[Tensor, "copy slice"]:
    """Summed next-token loss on each slice for each of the ``copies`` repeats of the batch in ``logits``."""
    union = masks.any(0)
    n_rows, n_pos = batch.shape
    picked = logits.view(copies, n_rows, n_pos, -1)[:, union].float().log_softmax(-1)  # [copy, token, vocab]
    targets = batch.tokens.roll(-1, 1)[union]
    loss = -picked.gather(-1, targets.expand(copies, -1)[..., None])[..., 0]  # [copy, token]
    return torch.einsum("ct,st->cs", loss.double(), masks[:, union].double())


def _replacement(plan: AblationPlan, layer: int, batch: TokenBatch, means: HeadMeans | None,
                 clean_z: Mapping[int, Tensor]) -> Tensor | float:
    if plan.method == "zero":
        return 0.0
    if plan.method == "mean":
        return means.mean(layer, batch.shape[1])  # type: ignore[union-attr]
    perm = derangement(batch.shape[0], seed=plan.seed).to(batch.tokens.device)
    return clean_z[layer][perm]


def _ablating_hook(set_mask: Bool[Tensor, "copy head"], replacement: Tensor | float, n_rows: int):
    def hook(z: Tensor, hook: Any) -> Tensor:
        if z.ndim != 4 or z.shape[0] != set_mask.shape[0] * n_rows or z.shape[2] != set_mask.shape[1]:
            raise ModelError(f"{hook.name} fired with shape {tuple(z.shape)}; head ablation needs [batch pos head "
                             f"d_head] with {set_mask.shape[1]} heads.")
        copies = z.reshape(set_mask.shape[0], n_rows, *z.shape[1:])
        new = torch.as_tensor(replacement, dtype=z.dtype, device=z.device)
        return torch.where(set_mask[:, None, None, :, None], new, copies).reshape(z.shape)

    return hook


def _forward(model: Any, batch: TokenBatch, copies: int, hooks: list) -> Tensor:
    tokens = batch.tokens.repeat(copies, 1)
    kwargs = _forward_kwargs(model, batch)
    if "attention_mask" in kwargs:
        kwargs["attention_mask"] = kwargs["attention_mask"].repeat(copies, 1)
    logits = model.run_with_hooks(tokens, fwd_hooks=hooks, **kwargs)
    if not isinstance(logits, Tensor) or logits.ndim != 3 or logits.shape[:2] != tokens.shape:
        raise ModelError(f"Head ablation reads next-token logits [batch pos d_vocab] from the model's output; got "
                         f"{tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__}.")
    return logits


def batch_ablation_sums(model: Any, batch: TokenBatch, plan: AblationPlan, slices: Mapping[str, SliceFn], *,
                        means: HeadMeans | None = None, max_rows: int = 256) -> AblationSums:
    """The :class:`AblationSums` of one batch: one clean forward pass, then the plan's head sets
    ``max(1, max_rows // batch_rows)`` at a time, each group one forward pass over the repeated batch."""
    masks = _slice_masks(batch, slices)
    n_rows = batch.shape[0]
    clean_z: dict[int, Tensor] = {}

    def keep(layer: int):
        def hook(z: Tensor, hook: Any) -> None:
            clean_z[layer] = z.clone()
        return hook

    keepers = [(z_hook(layer), keep(layer)) for layer in plan.layers] if plan.method == "resample" else []
    clean = _slice_loss_sums(_forward(model, batch, 1, keepers), batch, masks, 1)[0]
    replacements = {layer: _replacement(plan, layer, batch, means, clean_z) for layer in plan.layers}
    sets = plan.sets.to(batch.tokens.device)
    group = max(1, max_rows // n_rows)
    ablated = []
    for start in range(0, sets.shape[0], group):
        chunk = sets[start : start + group]
        hooks = [(z_hook(layer), _ablating_hook(chunk[:, i], replacements[layer], n_rows))
                 for i, layer in enumerate(plan.layers)]
        ablated.append(_slice_loss_sums(_forward(model, batch, chunk.shape[0], hooks), batch, masks, chunk.shape[0]))
    return AblationSums(tuple(slices), torch.tensor([float(n_rows)], dtype=torch.float64), masks.sum((1, 2)).double()[None].cpu(), clean[None].cpu(),
                        torch.cat(ablated)[None].cpu())


def ablation_sums(model: Any, plan: AblationPlan, batches: Iterable[Any], slices: Mapping[str, SliceFn], *,
                  means: HeadMeans | None = None, max_rows: int = 256) -> AblationSums:
    """:func:`batch_ablation_sums` over ``batches``, merged (one row per batch). ``method="mean"`` needs ``means``
    (:func:`probes.causal.means.head_output_means` on the same batches, or others of at least the same length)."""
    if not slices:
        raise InputError("Name at least one slice of positions to measure, e.g. {'repeated_half': repeated_half(50)}.")
    if plan.method == "mean" and means is None:
        raise InputError("method 'mean' replaces each head by its mean output: pass means=head_output_means(model, "
                         "plan.layers, batches).")
    info = ModelInfo.of(model)
    check_z_hooks(model, plan.layers)
    device = model_device(model)
    total: AblationSums | None = None
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.inference_mode():
            for raw in batches:
                part = batch_ablation_sums(model, as_token_batch(raw, info).to(device), plan, slices, means=means,
                                           max_rows=max_rows)
                total = part if total is None else total.merge(part)
    finally:
        if was_training:
            model.train()
    if total is None:
        raise InputError("No batches were given: the batch iterable was empty.")
    return total


def reusable_batches(batches: Iterable[Any], method: str) -> Iterable[Any]:
    """``batches`` unchanged, after checking it can be read twice when ``method`` needs a first pass."""
    if method == "mean" and isinstance(batches, Iterator):
        raise InputError("method 'mean' reads the batches twice (the heads' means first, then the ablation); pass a "
                         "list of batches instead of an iterator, or pass means=head_output_means(...).")
    return batches

