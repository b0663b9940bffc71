"""Head ablation as a streaming measurement: the per-token loss change on slices of positions when a set of
heads (and, for the null, many random sets matched layer by layer) is knocked out at ``blocks.{l}.attn.hook_z``.

Per batch, one clean forward pass gives the clean loss (and, for ``resample``, the clean head outputs); then the
head sets are ablated in groups, each group one forward pass over the batch repeated along the batch axis, copy
``g`` ablating set ``g`` through one hook per layer that indexes per row. A group holds as many copies as fit a
byte budget of activations (:class:`probes.causal.pass_size.PassSize`; halved after an out-of-memory error), so
the peak memory is the budget's whatever the number of draws. Everything a batch leaves behind is a
row of sums (:class:`AblationSums`), so halves merge into the whole and the bootstrap resamples batches. A null
measured in groups (:func:`probes.causal.null.ablation_with_null`) runs each batch's clean pass once, before its
first group, and every group reads it (:func:`ablation_clean_passes`, within the pass budget).

The loss is next-token for causal models and masked-token for encoders (:mod:`probes.causal.token_loss`; the plan's
``loss``). The grouped passes skip the blocks below the lowest ablated layer, apply the unembedding at the slice
positions only, compute attention with a fused kernel (TransformerBridges) and, under next-token loss, leave out
the positions after the last measured one, where :func:`probes.causal.routes.choose_route` finds that this
reproduces the whole forward on the model at hand (checked once per :func:`ablation_sums`); otherwise the whole
forward runs, full logits included (counted in each copy's bytes).

Methods (on the head's output ``z`` [batch pos head d_head], before ``W_O``):
``zero``: set to 0; ``mean``: the head's mean output at that position over the probed batches
(:func:`probes.causal.means.head_output_means`, a first pass); ``resample``: the head's clean output on another
sequence of the batch (row ``i`` takes row ``derangement(batch, seed)[i]``, the same for every batch); where that
row is padding there is no output to take and the head's output is 0 (a padded query's output depends on the
attention kernel: the eager pattern and the fused kernel differ there).

Where ``hook_z`` is missing: TransformerLens 4.x bridges alias it to the attention's output projection input
(``attn.o.hook_in``), reshaped to [batch pos head d_head], on every attention component that has one (standard,
joint-QKV, rotary, ALiBi, Bloom, CodeGen, MLA). A model without it (an attention that fuses the output
projection, a HookedRootModule that never put the HookPoint there) gets a :class:`ModelError` naming the hook;
nothing is ablated on another hook in its place.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechprobe.forward import model_device
from probes.causal.head_sets import Heads, check_heads, derangement, head_layers, head_mask, layer_matched_head_sets
from probes.causal.means import HeadMeans, check_z_hooks, z_hook
from probes.causal.pass_size import PASS_BYTES, PassSize
from probes.causal.routes import (
    PLAIN,
    ForwardRoute,
    choose_route,
    cut_after_last_measured,
    resid_hook,
    residual_at,
    token_losses,
)
from probes.causal.slices import SliceFn
from probes.causal.token_loss import LossInputs, check_loss, counted_positions, default_loss, slice_sums
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import FwdHook, HookedModel, HookFn, mask_kwargs

ABLATION_METHODS = ("zero", "mean", "resample")
"""How an ablated head's output is replaced (``method`` of :func:`probes.causal.result.head_ablation`; module
docstring)."""

def check_method(method: str) -> str:
    if method not in ABLATION_METHODS:
        raise ConfigError(f"Unknown ablation method {method!r}; use one of {', '.join(ABLATION_METHODS)}.")
    return method


@dataclass(frozen=True)
class AblationPlan:
    """What one measurement ablates: ``sets[0]`` is ``heads``, ``sets[1:]`` the null's random sets matched layer by
    layer; ``sets[s, i, h]`` is True when set ``s`` ablates head ``h`` of layer ``layers[i]``. ``loss``: ``"next"``
    (next-token) or ``"masked"`` (masked-token, encoders)."""

    heads: Heads
    method: str
    layers: tuple[int, ...]
    sets: Bool[Tensor, "set layer head"]
    seed: int
    loss: str = "next"

    def __post_init__(self) -> None:
        check_loss(self.loss)

    @classmethod
    def build(cls, info: ModelInfo, heads: Iterable[tuple[int, int]], *, method: str, n_draws: int = 0,
              seed: int = 0, loss: str | None = None) -> AblationPlan:
        """Validate ``heads`` and ``method`` and draw the null's ``n_draws`` sets from ``seed``; ``loss`` defaults
        to the model's direction (:func:`probes.causal.token_loss.default_loss`)."""
        checked = check_heads(heads, info)
        check_method(method)
        layers = head_layers(checked)
        real = head_mask(checked, layers, info.n_heads)
        draws = layer_matched_head_sets(checked, info.n_heads, n_draws, seed=seed)
        return cls(checked, method, layers, torch.cat([real[None], draws]), seed,
                   default_loss(info) if loss is None else check_loss(loss))

    @property
    def n_draws(self) -> int:
        return int(self.sets.shape[0]) - 1

    def subset(self, start: int, stop: int) -> AblationPlan:
        """The plan measuring sets ``start..stop-1`` only (a null measured in groups: the sums of each group
        :meth:`AblationSums.extend` the earlier ones)."""
        return replace(self, sets=self.sets[start:stop])


@dataclass(frozen=True)
class AblationSums:
    """Additive state of an ablation measurement, one row per batch (the bootstrap's unit).

    ``rows[u]``: sequences in batch ``u``; ``count[u, s]``: tokens of slice ``s`` in batch ``u``; ``clean[u, s]``:
    their summed clean loss (nats); ``ablated[u, j, s]``: their summed loss with head set ``j`` ablated (``j = 0``
    the measured heads, ``j >= 1`` the null's draws). ``merge`` concatenates batches: the sums over the merged rows
    are the sums of the parts."""

    slices: tuple[str, ...]
    rows: Float[Tensor, " unit"]
    count: Float[Tensor, "unit slice"]
    clean: Float[Tensor, "unit slice"]
    ablated: Float[Tensor, "unit set slice"]

    def merge(self, other: AblationSums) -> AblationSums:
        if other.slices != self.slices or other.ablated.shape[1] != self.ablated.shape[1]:
            raise InputError(f"Cannot merge ablation sums of slices {self.slices} x {self.ablated.shape[1]} sets with "
                             f"{other.slices} x {other.ablated.shape[1]}; measure both with the same plan and slices.")
        return AblationSums(self.slices, torch.cat([self.rows, other.rows]), torch.cat([self.count, other.count]),
                            torch.cat([self.clean, other.clean]), torch.cat([self.ablated, other.ablated]))

    @property
    def n_sets(self) -> int:
        return int(self.ablated.shape[1])

    def extend(self, other: AblationSums) -> AblationSums:
        """These sums and ``other``'s head sets, measured on the same batches (the clean sums must agree)."""
        same = (other.slices == self.slices and torch.equal(other.rows, self.rows)
                and torch.equal(other.count, self.count)
                and torch.allclose(other.clean, self.clean, rtol=1e-6, atol=1e-9))
        if not same:
            raise InputError("Cannot extend ablation sums with head sets measured on other batches or slices; "
                             "measure every group of sets on the same batches.")
        return AblationSums(self.slices, self.rows, self.count, self.clean, torch.cat([self.ablated, other.ablated], 1))

    def loss_change(self) -> Float[Tensor, "set slice"]:
        """Mean per-token loss change (ablated - clean) on each slice for every head set, over all batches."""
        return (self.ablated.sum(0) - self.clean.sum(0)) / self.count.sum(0)


def slice_masks(batch: TokenBatch, slices: Mapping[str, SliceFn], loss: str) -> Bool[Tensor, "slice batch pos"]:
    """Each slice's mask of ``batch``, checked: a bool tensor of the batch's shape marking only positions whose
    loss ``loss`` can count (:func:`probes.causal.token_loss.counted_positions`)."""
    counted = counted_positions(batch, loss)
    masks = []
    for name, fn in slices.items():
        mask = fn(batch)
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != batch.shape:
            got = tuple(mask.shape) if isinstance(mask, Tensor) else type(mask).__name__
            raise InputError(f"The slice {name!r} must return a bool tensor of the batch's shape {batch.shape}; "
                             f"got {got}.")
        if bool((mask & ~counted).any()):
            if loss == "next":
                raise InputError(f"The slice {name!r} marks positions with no valid next token (the last position, "
                                 f"padding or special tokens); intersect it with "
                                 f"probes.causal.predicted_positions(batch).")
            raise InputError(f"The slice {name!r} marks positions that cannot be masked (padding or special tokens); "
                             f"intersect it with probes.causal.maskable_positions(batch).")
        masks.append(mask)
    return torch.stack(masks)


def _replacement(plan: AblationPlan, layer: int, batch: TokenBatch, means: HeadMeans | None,
                 clean_z: Mapping[int, Tensor]) -> Tensor | float:
    if plan.method == "zero":
        return 0.0
    if plan.method == "mean":
        if means is None:
            raise ConfigError("Mean ablation needs the heads' mean outputs: pass means=head_output_means(...).")
        return means.mean(layer, batch.shape[1])
    perm = derangement(batch.shape[0], seed=plan.seed).to(batch.tokens.device)
    donor = clean_z[layer][perm]
    return donor.masked_fill(~batch.valid[perm][:, :, None, None].to(donor.device), 0.0)


def _ablating_hook(set_mask: Bool[Tensor, "copy head"], replacement: Tensor | float, n_rows: int) -> HookFn:
    converted: dict[tuple[torch.dtype, torch.device], Tensor] = {}

    def hook(z: Tensor, hook: Any) -> Tensor:
        if z.ndim != 4 or z.shape[0] != set_mask.shape[0] * n_rows or z.shape[2] != set_mask.shape[1]:
            raise ModelError(f"{hook.name} fired with shape {tuple(z.shape)}; head ablation needs [batch pos head "
                             f"d_head] with {set_mask.shape[1]} heads.")
        copies = z.reshape(set_mask.shape[0], n_rows, *z.shape[1:])
        key = (z.dtype, z.device)
        if key not in converted:
            converted[key] = torch.as_tensor(replacement, dtype=z.dtype, device=z.device)
        return torch.where(set_mask[:, None, None, :, None], converted[key], copies).reshape(z.shape)

    return hook


def _replacements_as(replacements: dict[int, Tensor | float], dtype: torch.dtype) -> dict[int, Tensor | float]:
    """The replacements in the model's dtype once per batch (not once per pass and layer)."""
    return {layer: value.to(dtype) if isinstance(value, Tensor) and value.is_floating_point() else value
            for layer, value in replacements.items()}


def shared_prefix(sets: Bool[Tensor, "set layer head"], layers: tuple[int, ...]
                  ) -> tuple[int, Tensor, Tensor] | None:
    """Where the head sets share most work: ``(j, prefixes, index)`` with ``prefixes[p]`` (``[j, head]``) the
    distinct choices of the sets in ``layers[:j]`` and ``index[s]`` set ``s``'s among them, for the ``j`` that
    saves the most blocks run per copy, ``(sets - prefixes) * (layers[j] - layers[0])``, among those with at most
    half as many prefixes as sets; None when no split saves any. (Random sets matched by layer with one head in the
    lowest ablated layer take at most ``n_heads`` values there, so the blocks up to the next ablated layer run once
    per value, not once per set.)"""
    best: tuple[int, int, Tensor, Tensor] | None = None
    n_sets = int(sets.shape[0])
    for j in range(1, len(layers)):
        prefixes, index = torch.unique(sets[:, :j].flatten(1), dim=0, return_inverse=True)
        saved = (n_sets - int(prefixes.shape[0])) * (layers[j] - layers[0])
        if 2 * int(prefixes.shape[0]) <= n_sets and saved > 0 and (best is None or saved > best[0]):
            best = (saved, j, prefixes.view(-1, j, sets.shape[2]), index)
    return None if best is None else best[1:]


@dataclass(frozen=True)
class AblationCleanPass:
    """One batch's clean forward pass as its ablated passes read it: the batch (cut where the route cuts), its
    slice ``masks``, loss ``inputs`` and forward ``kwargs``, the clean slice sums, the residual entering the route's
    start layer (``kept["resid"]``) and, for ``resample``, the clean head outputs per layer."""

    batch: TokenBatch
    masks: Tensor
    inputs: LossInputs
    kwargs: dict[str, Any]
    sums: Tensor
    kept: dict[str, Tensor]
    clean_z: dict[int, Tensor]

    @classmethod
    def run(cls, model: HookedModel, batch: TokenBatch, plan: AblationPlan, slices: Mapping[str, SliceFn],
            route: ForwardRoute) -> AblationCleanPass:
        masks = slice_masks(batch, slices, plan.loss)
        if route.cut_tail:
            batch, masks = cut_after_last_measured(batch, masks)
        inputs = LossInputs.of(model, batch, masks, plan.loss)
        kwargs = mask_kwargs(model, batch.attention_mask)
        clean_z: dict[int, Tensor] = {}
        kept: dict[str, Tensor] = {}

        def keep(store: dict[Any, Tensor], key: Any) -> HookFn:
            def hook(x: Tensor, hook: Any) -> None:
                store[key] = x.clone()
            return hook

        keepers = ([(z_hook(layer), keep(clean_z, layer)) for layer in plan.layers] if plan.method == "resample"
                   else [])
        if route.start_layer:
            keepers.append((resid_hook(route.start_layer), keep(kept, "resid")))
        clean_route = ForwardRoute(unembed=route.unembed, cut_tail=route.cut_tail, fused=route.fused)
        sums = slice_sums(token_losses(model, clean_route, inputs, kwargs, keepers, 1), inputs)[0]
        return cls(batch, masks, inputs, kwargs, sums, kept, clean_z)

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in (*self.kept.values(), *self.clean_z.values()))


def ablation_clean_passes(model: HookedModel, plan: AblationPlan, batches: Sequence[Any],
                          slices: Mapping[str, SliceFn], route: ForwardRoute, *, max_bytes: int
                          ) -> list[AblationCleanPass] | None:
    """Each batch's clean pass along ``route`` for ``plan``'s layers and method, to be shared by the groups of a
    null measured in groups (:func:`ablation_sums` with ``clean=``); None once what they keep exceeds ``max_bytes``
    (then each group runs its own clean passes, holding one batch's at a time)."""
    info = ModelInfo.of(model)
    device = model_device(model)
    out: list[AblationCleanPass] = []
    was_training = getattr(model, "training", False)
    model.eval()  # as ablation_sums measures
    try:
        with torch.inference_mode():
            for raw in batches:
                out.append(AblationCleanPass.run(model, as_token_batch(raw, info).to(device), plan, slices, route))
                if sum(state.nbytes for state in out) > max_bytes:
                    return None
    finally:
        if was_training:
            model.train()
    return out


def batch_ablation_sums(model: HookedModel, batch: TokenBatch, plan: AblationPlan, slices: Mapping[str, SliceFn], *,
                        means: HeadMeans | None = None, size: PassSize | None = None,
                        route: ForwardRoute = PLAIN, clean_pass: AblationCleanPass | None = None) -> AblationSums:
    """The :class:`AblationSums` of one batch: one clean forward pass (or ``clean_pass``, run already on this
    batch with this plan's layers, method and ``route``), then the plan's head sets ``size.copies`` at a time
    (:class:`probes.causal.pass_size.PassSize`: a byte budget, default :data:`PASS_BYTES`), each group one forward
    pass over the repeated batch along ``route`` (:func:`probes.causal.routes.choose_route`; the default computes
    full logits). A group that runs out of memory is retried in halves."""
    ran = AblationCleanPass.run(model, batch, plan, slices, route) if clean_pass is None else clean_pass
    batch, masks, inputs, kwargs = ran.batch, ran.masks, ran.inputs, ran.kwargs
    clean, kept, clean_z = ran.sums, ran.kept, ran.clean_z
    n_rows = batch.shape[0]
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    replacements = _replacements_as({layer: _replacement(plan, layer, batch, means, clean_z)
                                     for layer in plan.layers}, dtype)
    sets = plan.sets.to(batch.tokens.device)
    size = PassSize() if size is None else size
    n_pos = inputs.tokens.shape[1]
    group = size.copies(model, route, n_rows, n_pos, batch.tokens.device)
    too_big = (f"Out of memory ablating heads on one copy of a batch of {n_rows} x {n_pos} tokens. Use fewer rows per "
               f"batch, shorter sequences, weights in bfloat16 (dtype=...), or another device.")

    def hooks_of(chunk: Tensor, first: int) -> list[FwdHook]:
        return [(z_hook(layer), _ablating_hook(chunk[:, i], replacements[layer], n_rows))
                for i, layer in enumerate(plan.layers[first:]) if i < chunk.shape[1]]

    def in_passes(n: int, run: Any) -> list[Tensor]:
        """``run(start, stop)`` over ``0..n`` in groups of ``group`` copies, halved after running out of memory."""
        return size.halving.chunks(n, run, first=group, too_big=too_big)

    split = shared_prefix(sets, plan.layers) if route.start_layer and route.start_layer == plan.layers[0] else None
    if split is not None and resid_hook(plan.layers[split[0]]) not in model.hook_dict:
        split = None
    if split is None:
        ablated = in_passes(sets.shape[0], lambda a, b: slice_sums(token_losses(
            model, route, inputs, kwargs, hooks_of(sets[a:b], 0), b - a, kept.get("resid")), inputs))
    else:
        # the blocks from the lowest ablated layer up to layers[j] run once per distinct choice in layers[:j]
        # (``prefixes``), a few prefixes at a time; each set then starts at layers[j] from its prefix's residual
        j, prefixes, index = split
        order = index.argsort(stable=True)
        by_prefix = torch.bincount(index, minlength=prefixes.shape[0]).tolist()
        stop_layer, parts, done, first = plan.layers[j], [], 0, 0
        while first < prefixes.shape[0]:  # two passes' worth of prefixes at a time, as many as fit now
            chunk = prefixes[first : first + 2 * size.halving.bound(group)]
            resid = torch.cat(in_passes(chunk.shape[0], lambda a, b, chunk=chunk: residual_at(
                model, route, inputs, kwargs, hooks_of(chunk[a:b], 0), b - a, kept["resid"], stop_layer)))
            resid = resid.view(chunk.shape[0], n_rows, *resid.shape[1:])
            n_sets = sum(by_prefix[first : first + chunk.shape[0]])
            mine = order[done : done + n_sets]

            def rest(a: int, b: int, mine: Tensor = mine, resid: Tensor = resid, first: int = first) -> Tensor:
                picked = resid[index[mine[a:b]] - first].flatten(0, 1)
                return slice_sums(token_losses(model, route, inputs, kwargs, hooks_of(sets[mine[a:b], j:], j),
                                               b - a, picked, start_layer=stop_layer), inputs)

            parts.extend(in_passes(n_sets, rest))
            done += n_sets
            first += chunk.shape[0]
        ablated = [torch.cat(parts)[order.argsort()]]
    return AblationSums(tuple(slices), torch.tensor([float(n_rows)], dtype=torch.float64),
                        masks.sum((1, 2)).double()[None].cpu(), clean[None].cpu(), torch.cat(ablated)[None].cpu())


def ablation_route(model: HookedModel, plan: AblationPlan, batch: Any, slices: Mapping[str, SliceFn], *,
                   shortcuts: bool = True) -> ForwardRoute:
    """The route of the plan's grouped passes, checked on ``batch`` (:func:`probes.causal.routes.choose_route`;
    :data:`~probes.causal.routes.PLAIN` without ``shortcuts``)."""
    if not shortcuts:
        return PLAIN
    batch = as_token_batch(batch, ModelInfo.of(model)).to(model_device(model))
    inputs = LossInputs.of(model, batch, slice_masks(batch, slices, plan.loss), plan.loss)
    return choose_route(model, batch, inputs, mask_kwargs(model, batch.attention_mask), min(plan.layers))


def ablation_sums(model: HookedModel, plan: AblationPlan, batches: Iterable[Any], slices: Mapping[str, SliceFn], *,
                  means: HeadMeans | None = None, max_rows: int = 256, pass_bytes: int = PASS_BYTES,
                  shortcuts: bool = True, route: ForwardRoute | None = None,
                  clean: Sequence[AblationCleanPass] | None = None) -> AblationSums:
    """:func:`batch_ablation_sums` over ``batches``, merged (one row per batch); each grouped pass holds at most
    ``max_rows`` rows and about ``pass_bytes`` of activations (:class:`probes.causal.pass_size.PassSize`).
    ``method="mean"`` needs ``means``
    (:func:`probes.causal.means.head_output_means` on the same batches, or others of at least the same length).
    ``shortcuts``: skip the blocks below the ablated layers and unembed at the slice positions only where the first
    batch shows this reproduces the whole forward (:func:`probes.causal.routes.choose_route`); ``False`` runs every
    pass through the whole model with full logits (the reference, slower). ``route``: one already chosen
    (:func:`ablation_route`), for a null measured in groups; ``clean``: each batch's clean pass along ``route``,
    kept from an earlier group of sets (:func:`ablation_clean_passes`)."""
    if not slices:
        raise InputError("Name at least one slice of positions to measure, e.g. {'repeated_half': repeated_half(50)}.")
    if plan.method == "mean" and means is None:
        raise InputError("method 'mean' replaces each head by its mean output: pass means=head_output_means(model, "
                         "plan.layers, batches).")
    info = ModelInfo.of(model)
    check_z_hooks(model, plan.layers)
    size = PassSize(max_rows, pass_bytes)
    device = model_device(model)
    total: AblationSums | None = None
    route = route if route is not None or shortcuts else PLAIN
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        with torch.inference_mode():
            for index, raw in enumerate(batches):
                batch = as_token_batch(raw, info).to(device)
                if route is None:
                    route = ablation_route(model, plan, batch, slices)
                part = batch_ablation_sums(model, batch, plan, slices, means=means, size=size, route=route,
                                           clean_pass=None if clean is None else clean[index])
                total = part if total is None else total.merge(part)
    finally:
        if was_training:
            model.train()
    if total is None:
        raise InputError("No batches were given: the batch iterable was empty.")
    return total


def batches_as_read(model: HookedModel, batches: Iterable[Any], slices: Mapping[str, SliceFn], loss: str
                    ) -> list[TokenBatch]:
    """``batches`` as the model reads them under ``loss``: unchanged for ``next``; for ``masked`` every position of
    the slices replaced by the mask token (what the mean-ablation means are read on)."""
    info = ModelInfo.of(model)
    read = []
    for raw in batches:
        batch = as_token_batch(raw, info)
        if loss == "masked":
            tokens = LossInputs.of(model, batch, slice_masks(batch, slices, loss), loss).tokens
            batch = TokenBatch(tokens, batch.valid, batch.attention_mask)
        read.append(batch)
    return read


def reusable_batches(batches: Iterable[Any], method: str) -> Iterable[Any]:
    """``batches`` unchanged, after checking it can be read twice when ``method`` needs a first pass."""
    if method == "mean" and isinstance(batches, Iterator):
        raise InputError("method 'mean' reads the batches twice (the heads' means first, then the ablation); pass a "
                         "list of batches instead of an iterator, or pass means=head_output_means(...).")
    return batches

