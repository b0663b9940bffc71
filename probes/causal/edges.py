"""Edge effects by path patching: a sender head's output replaced in one input (keys, queries or values) of one
receiver head only, everything else clean, measured on the receiver's own attention score and on the loss.

For an edge ``(l_s, h_s) -> (l_r, h_r)`` through input ``X`` of the receiver, per batch:

1. the clean pass keeps the residual entering the layers involved (``blocks.{l}.hook_resid_pre``), the sender layer's
   attention output (``blocks.{l_s}.hook_attn_out``), the receiver layer's clean ``hook_q``, ``hook_k``, ``hook_v``
   and every receiver head's attention mass on its score's targets, and the clean per-token loss;
2. the sender pass runs block ``l_s`` alone from its clean input with the sender's ``hook_z`` replaced (zero, mean or
   resample, as :func:`probes.head_ablation`) and ends at ``hook_attn_out``: its difference from the clean one is the
   sender's direct change to the residual stream, ``delta``;
3. the receiver pass runs block ``l_r`` alone from ``clean + delta`` with ``hook_q``, ``hook_k`` and ``hook_v`` put
   back to their clean values except the receiver's ``X`` (its own LayerNorm has read ``clean + delta``; under
   grouped-query attention the receiver's key/value group), and ends once ``hook_z`` and ``hook_pattern`` fired (a
   bridge may fire the pattern after ``hook_z``): the receiver's patched output and its patched attention pattern,
   from which its score is read. The hooks ``hook_q``/``hook_k``/``hook_v`` must feed the attention that follows
   (they do on TransformerLens's models and bridges); a model that only reports them gives zero effects;
4. the final pass runs from the clean residual entering ``l_r`` with only the receiver's ``hook_z`` replaced by the
   patched output, to the loss. A plan with ``null_loss=False`` (:class:`probes.causal.edge_plan.EdgePlan`) runs it
   for the measured edge only: the null's edges get their score drop from passes 2 and 3 (two blocks each) and a
   NaN loss change.

So the sender's change reaches the receiver's ``X`` through the residual stream directly and nothing else: no other
head or MLP, no other input of the receiver, and no later layer sees it except through the receiver's output. Every
hook is TransformerLens's (3.9 ``HookedTransformer``, 4.x bridges, hand-made ``HookedRootModule`` s alike);
``use_split_qkv_input`` is not needed (4.x bridges refuse it on some attentions) and no weight is read.

The null's edges are measured in the same passes, grouped by receiver layer (all of a plan's edges span the same
layer distance, so a receiver layer fixes the sender layer), as many per pass as fit the byte budget
(:class:`probes.causal.pass_size.PassSize`), halved after an out-of-memory error
(:class:`probes.core.out_of_memory.Halving`). Passes 2 and 3 run one block each;
pass 4 skips the blocks below ``l_r`` and runs the route :func:`probes.causal.routes.choose_route` checked (fused
attention, unembedding at the slice positions, the tail cut) where the model allows it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from mechprobe.forward import model_device
from probes.attention.head_patterns import head_pattern
from probes.causal.ablation import slice_masks
from probes.causal.edge_plan import EdgePlan
from probes.causal.head_sets import derangement
from probes.causal.means import HeadMeans, z_hook
from probes.causal.pass_size import PASS_BYTES, PassSize
from probes.causal.routes import (
    PLAIN,
    ForwardRoute,
    choose_route,
    cut_after_last_measured,
    resid_hook,
    token_losses,
    values_at,
)
from probes.causal.slices import SliceFn
from probes.causal.token_loss import LossInputs
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import InputError, ModelError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel, HookFn, mask_kwargs

EFFECTS = ("loss_change", "score_drop")
"""The two effects of an edge: the slice's loss change (patched minus clean, nats per token) and the receiver's
score drop (clean minus patched attention mass on its targets, per query that has one)."""


def attn_out_hook(layer: int) -> str:
    return f"blocks.{layer}.hook_attn_out"


def input_hook(layer: int, kind: str) -> str:
    """The receiver layer's queries, keys or values per head: ``blocks.{layer}.attn.hook_{kind}``."""
    return f"blocks.{layer}.attn.hook_{kind}"


def check_edge_hooks(model: HookedModel, plan: EdgePlan) -> None:
    """Raise :class:`ModelError` naming the first hook the plan's passes need that the model lacks."""
    needed = []
    for layer in sorted({int(v) for v in plan.edges[:, 2]}):
        needed += [resid_hook(layer), z_hook(layer), pattern_hook(layer), *(input_hook(layer, k) for k in "qkv")]
    for layer in plan.sender_layers:
        needed += [resid_hook(layer), z_hook(layer), attn_out_hook(layer)]
    missing = [name for name in dict.fromkeys(needed) if name not in model.hook_dict]
    if missing:
        raise ModelError(f"Path patching an edge reads and replaces {missing[0]}, which this model lacks"
                         f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}. On a HookedRootModule put "
                         f"a HookPoint there with TransformerLens's name and shape (hook_resid_pre and hook_attn_out "
                         f"[batch pos d_model], hook_q/k/v and hook_z [batch pos head d_head], hook_pattern [batch "
                         f"head q_pos k_pos]).")


@dataclass(frozen=True)
class EdgeSums:
    """Additive state of an edge measurement, one row per sequence (the bootstrap's unit).

    ``tokens[u]``: tokens of the slice in sequence ``u``; ``queries[u]``: the slice's positions with at least one
    target of the score's pattern; ``clean_loss[u]``: their summed clean loss; ``patched_loss[u, e]``: the same with
    edge ``e`` patched (``e = 0`` the measured edge, ``e >= 1`` the null's; NaN where the plan skips the null's
    loss, :attr:`probes.causal.edge_plan.EdgePlan.measures_loss`); ``clean_mass[u, e]`` and
    ``patched_mass[u, e]``: edge ``e``'s receiver's attention mass on the targets, summed over those queries."""

    tokens: Float[Tensor, " unit"]
    queries: Float[Tensor, " unit"]
    clean_loss: Float[Tensor, " unit"]
    patched_loss: Float[Tensor, "unit edge"]
    clean_mass: Float[Tensor, "unit edge"]
    patched_mass: Float[Tensor, "unit edge"]

    @property
    def n_edges(self) -> int:
        return int(self.patched_loss.shape[1])

    def merge(self, other: EdgeSums) -> EdgeSums:
        """These sums and ``other``'s sequences (the same edges)."""
        if other.n_edges != self.n_edges:
            raise InputError(f"Cannot merge edge sums of {self.n_edges} and {other.n_edges} edges; measure both with "
                             f"the same plan.")
        return EdgeSums(*(torch.cat([a, b]) for a, b in zip(self._fields(), other._fields())))

    def extend(self, other: EdgeSums) -> EdgeSums:
        """These sums and ``other``'s edges, measured on the same sequences (the clean sums must agree)."""
        same = (torch.equal(other.tokens, self.tokens) and torch.equal(other.queries, self.queries)
                and torch.allclose(other.clean_loss, self.clean_loss, rtol=1e-6, atol=1e-9))
        if not same:
            raise InputError("Cannot extend edge sums with edges measured on other sequences; measure every group of "
                             "edges on the same batches.")
        return EdgeSums(self.tokens, self.queries, self.clean_loss,
                        *(torch.cat([a, b], 1) for a, b in zip(self._fields()[3:], other._fields()[3:])))

    def _fields(self) -> tuple[Tensor, ...]:
        return (self.tokens, self.queries, self.clean_loss, self.patched_loss, self.clean_mass, self.patched_mass)

    def effects(self) -> Float[Tensor, "edge effect"]:
        """Per edge, over all sequences: ``[loss change, score drop]`` (:data:`EFFECTS`)."""
        return edge_effects({key: value.double().sum(0) for key, value in self.state().items()})

    def state(self) -> dict[str, Tensor]:
        """The per-sequence sums by name (what :func:`edge_effects` reads once summed)."""
        names = ("tokens", "queries", "clean_loss", "patched_loss", "clean_mass", "patched_mass")
        return dict(zip(names, self._fields()))


def edge_effects(total: Mapping[str, Tensor]) -> Float[Tensor, "... edge effect"]:
    """:data:`EFFECTS` from sums over sequences (:meth:`EdgeSums.state` summed; any leading axes, e.g. bootstrap
    resamples)."""
    loss = (total["patched_loss"] - total["clean_loss"][..., None]) / total["tokens"][..., None]
    score = (total["clean_mass"] - total["patched_mass"]) / total["queries"][..., None]
    return torch.stack([loss, score], -1)


def _per_row(nll: Float[Tensor, "copy token"], union: Bool[Tensor, "row pos"]) -> Float[Tensor, "copy row"]:
    rows = union.nonzero()[:, 0].to(nll.device)
    return nll.new_zeros(nll.shape[0], union.shape[0]).index_add_(1, rows, nll)


def _replacement(plan: EdgePlan, layer: int, n_pos: int, means: HeadMeans | None, clean_z: Tensor | None,
                 n_rows: int) -> Tensor | float:
    if plan.method == "zero":
        return 0.0
    if plan.method == "mean":
        if means is None:
            raise InputError("method 'mean' replaces the sender by its mean output: pass means=head_output_means("
                             "model, plan.sender_layers, batches).")
        return means.mean(layer, n_pos)
    if clean_z is None:
        raise ModelError(f"Resampling the sender needs the clean {z_hook(layer)}, which never fired.")
    return clean_z[derangement(n_rows, seed=plan.seed).to(clean_z.device)]


def _head_replacing_hook(heads: Tensor, value: Tensor | float, n_rows: int, *, per_copy: bool = False) -> HookFn:
    """Replaces head ``heads[c]`` of copy ``c`` of ``[copies * rows pos head d_head]`` by ``value``: every head's
    replacement (``[rows pos head d_head]``, ``[pos head d_head]`` or a number), or with ``per_copy`` copy ``c``'s
    replacement of its one head (``[copies rows pos d_head]``)."""

    def hook(z: Tensor, hook: Any) -> Tensor:
        if z.ndim != 4 or z.shape[0] != heads.shape[0] * n_rows:
            raise ModelError(f"{hook.name} fired with shape {tuple(z.shape)}; path patching needs [batch pos head "
                             f"d_head] over {heads.shape[0]} x {n_rows} rows.")
        copies = z.view(heads.shape[0], n_rows, *z.shape[1:])
        chosen = torch.nn.functional.one_hot(heads.to(z.device), z.shape[2]).bool()[:, None, None, :, None]
        new = torch.as_tensor(value, dtype=z.dtype, device=z.device)
        if per_copy:
            new = new[:, :, :, None]
        return torch.where(chosen, new, copies).reshape(z.shape)

    return hook


def _clean_but_hook(clean: Tensor, heads: Tensor | None, n_heads: int) -> HookFn:
    """Puts ``clean`` (``[rows pos head d_head]``) back in every copy, except, when ``heads`` is given, copy ``c``'s
    head ``heads[c]`` (a query head; under grouped-query keys and values the group holding it), left as computed."""

    def hook(x: Tensor, hook: Any) -> Tensor:
        n_copies = x.shape[0] // clean.shape[0]
        if x.shape[1:] != clean.shape[1:] or x.shape[0] != n_copies * clean.shape[0]:
            raise ModelError(f"{hook.name} fired with shape {tuple(x.shape)}; the clean pass gave "
                             f"{tuple(clean.shape)} per copy. Path patching needs [batch pos head d_head] there.")
        copies = clean.to(x.dtype)[None].expand(n_copies, *clean.shape)
        if heads is None:
            return copies.reshape(x.shape)
        group = n_heads // x.shape[2]
        kept = torch.nn.functional.one_hot(heads.to(x.device) // group, x.shape[2]).bool()[:, None, None, :, None]
        return torch.where(kept, x.view(n_copies, *clean.shape), copies).reshape(x.shape)

    return hook


@dataclass(frozen=True)
class CleanPass:
    """What the clean pass over one batch leaves for the patched passes: the batch as measured (cut after its last
    measured position where the route cuts), its loss inputs and forward arguments, the score's targets among the
    slice's queries ``[row q_pos k_pos]``, the activations kept by hook name (``mass{l}``: layer ``l``'s heads'
    attention mass on their targets ``[row head]``) and the clean loss per row."""

    batch: TokenBatch
    inputs: LossInputs
    kwargs: dict[str, Any]
    targets: Bool[Tensor, "row q_pos k_pos"]
    kept: dict[str, Tensor]
    clean_loss: Float[Tensor, " row"]

    def target_mass(self, pattern: Float[Tensor, "batch head q_pos k_pos"]) -> Float[Tensor, "batch head"]:
        """Each head's attention mass on its targets, summed over the queries (``batch``: copies of the rows)."""
        n_rows = self.targets.shape[0]
        weights = self.targets.to(pattern.device, torch.float32).repeat(pattern.shape[0] // n_rows, 1, 1)
        return torch.einsum("bhqk,bqk->bh", pattern.float(), weights).double()

    @property
    def nbytes(self) -> int:
        return sum(value.nbytes for value in self.kept.values())


def clean_pass(model: HookedModel, batch: TokenBatch, plan: EdgePlan, slice_fn: SliceFn, route: ForwardRoute,
               receivers: Iterable[int]) -> CleanPass:
    """The clean pass over ``batch`` keeping what the edges into ``receivers`` (layers) need: the residual entering
    each receiver layer and its sender layer (``plan``'s layer distance below), the sender layer's attention output
    (and head outputs, for ``resample``), the receiver layer's queries, keys and values and its heads' target mass."""
    masks = slice_masks(batch, {"slice": slice_fn}, plan.loss)
    if route.cut_tail:
        batch, masks = cut_after_last_measured(batch, masks)
    inputs = LossInputs.of(model, batch, masks, plan.loss)
    kwargs = mask_kwargs(model, batch.attention_mask)
    distance = int(plan.edges[0, 2] - plan.edges[0, 0])
    targets = head_pattern(plan.score).mask(inputs.tokens, batch.valid) & masks[0][:, :, None]
    kept: dict[str, Tensor] = {}
    state = CleanPass(batch, inputs, kwargs, targets, kept, torch.zeros(0))

    def keep(name: str) -> HookFn:
        def hook(x: Tensor, hook: Any) -> None:
            kept[name] = x.clone()
        return hook

    def keep_mass(name: str) -> HookFn:
        def hook(pattern: Tensor, hook: Any) -> None:
            kept[name] = state.target_mass(pattern)
        return hook

    names = set()
    receivers = sorted(set(receivers))
    for layer in receivers:
        names |= {resid_hook(layer), *(input_hook(layer, kind) for kind in "qkv")}
        names |= {resid_hook(layer - distance), attn_out_hook(layer - distance)}
        if plan.method == "resample":
            names.add(z_hook(layer - distance))
    keepers = [(name, keep(name)) for name in sorted(names)]
    keepers += [(pattern_hook(layer), keep_mass(f"mass{layer}")) for layer in receivers]
    clean_route = ForwardRoute(unembed=route.unembed, cut_tail=route.cut_tail)
    clean_loss = _per_row(token_losses(model, clean_route, inputs, kwargs, keepers, 1), masks[0])[0]
    return CleanPass(batch, inputs, kwargs, targets, kept, clean_loss)


def batch_edge_sums(model: HookedModel, batch: TokenBatch, plan: EdgePlan, slice_fn: SliceFn, *,
                    means: HeadMeans | None = None, size: PassSize | None = None,
                    route: ForwardRoute = PLAIN, clean: CleanPass | None = None) -> EdgeSums:
    """The :class:`EdgeSums` of one batch (module docstring: a clean pass, then per group of edges with one
    receiver layer a sender pass, a receiver pass and, for the edges whose loss the plan measures, a final pass).
    ``clean``: this batch's :func:`clean_pass`
    along ``route`` for (at least) the plan's receiver layers, kept from an earlier group of edges."""
    edges = plan.edges.cpu()
    receivers = sorted({int(v) for v in edges[:, 2]})
    if clean is None:
        clean = clean_pass(model, batch, plan, slice_fn, route, receivers)
    elif any(f"mass{layer}" not in clean.kept for layer in receivers):
        raise InputError(f"The clean pass given did not keep every receiver layer of the plan ({receivers}); make it "
                         f"with clean_pass(..., receivers) for all of them.")
    batch, inputs, kwargs, kept, clean_loss = clean.batch, clean.inputs, clean.kwargs, clean.kept, clean.clean_loss
    target_mass = clean.target_mass
    n_rows, n_pos = inputs.tokens.shape
    union = inputs.masks[0]
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    size = PassSize() if size is None else size
    group = size.copies(model, route, n_rows, n_pos, batch.tokens.device)
    one_block = ForwardRoute(start_layer=route.start_layer)
    skips = route.start_layer > 0
    measures_loss = plan.measures_loss
    patched_loss = torch.full((n_rows, edges.shape[0]), float("nan"), dtype=torch.float64)
    clean_mass = torch.zeros_like(patched_loss)
    patched_mass = torch.zeros_like(patched_loss)

    def measure(rows: Tensor) -> None:
        """Passes 2-4 for the edges ``rows`` (one receiver layer), filling their columns (pass 4 for the edges
        whose loss the plan measures)."""
        sender_layer, receiver_layer = int(edges[rows[0], 0]), int(edges[rows[0], 2])
        senders, receivers_ = edges[rows, 1], edges[rows, 3]
        copies = rows.shape[0]
        clean_z = kept.get(z_hook(sender_layer))
        value = _replacement(plan, sender_layer, n_pos, means, clean_z, n_rows)
        if isinstance(value, Tensor) and value.is_floating_point():
            value = value.to(dtype)
        out = values_at(model, one_block, inputs, kwargs, [(z_hook(sender_layer),
                        _head_replacing_hook(senders, value, n_rows))], copies, [attn_out_hook(sender_layer)],
                        resid=kept[resid_hook(sender_layer)] if sender_layer > 0 else None,
                        layer=sender_layer)[attn_out_hook(sender_layer)]
        clean_out = kept[attn_out_hook(sender_layer)]
        delta = out.view(copies, *clean_out.shape) - clean_out[None]
        resid = (kept[resid_hook(receiver_layer)][None] + delta).flatten(0, 1)
        n_heads = int(model.cfg.n_heads)
        hooks = [(input_hook(receiver_layer, kind), _clean_but_hook(
            kept[input_hook(receiver_layer, kind)], receivers_ if kind == plan.input else None, n_heads))
            for kind in "qkv"]
        read = values_at(model, one_block, inputs, kwargs, hooks, copies,
                         [z_hook(receiver_layer), pattern_hook(receiver_layer)], resid=resid, layer=receiver_layer)
        z = read[z_hook(receiver_layer)]
        z = z.view(copies, n_rows, *z.shape[1:])
        patched_z = z[torch.arange(copies), :, :, receivers_.to(z.device)]  # [copy, row, pos, d_head]
        mass = target_mass(read[pattern_hook(receiver_layer)]).view(copies, n_rows, -1).cpu()
        patched_mass[:, rows] = mass[torch.arange(copies), :, receivers_].T
        clean_mass[:, rows] = kept[f"mass{receiver_layer}"].cpu()[:, receivers_]
        lossy = measures_loss[rows].nonzero()[:, 0]  # the copies whose loss is measured (plan.null_loss)
        if lossy.shape[0] == 0:
            return
        replaced = _head_replacing_hook(receivers_[lossy], patched_z[lossy.to(patched_z.device)], n_rows,
                                        per_copy=True)
        nll = token_losses(model, route, inputs, kwargs, [(z_hook(receiver_layer), replaced)], lossy.shape[0],
                           kept[resid_hook(receiver_layer)] if skips else None,
                           start_layer=receiver_layer if skips else 0)
        patched_loss[:, rows[lossy]] = _per_row(nll, union).T.cpu()

    too_big = (f"Out of memory path-patching one edge on a batch of {n_rows} x {n_pos} tokens. Use fewer rows per "
               f"batch, shorter sequences, weights in bfloat16 (dtype=...), or another device.")
    for layer in receivers:
        todo = (edges[:, 2] == layer).nonzero()[:, 0]

        def run(start: int, stop: int, todo: Tensor = todo) -> None:
            measure(todo[start:stop])

        size.halving.chunks(todo.shape[0], run, first=group, too_big=too_big)
    queries = clean.targets.any(-1)
    return EdgeSums(union.sum(1).double().cpu(), queries.sum(1).double().cpu(), clean_loss.cpu(), patched_loss,
                    clean_mass, patched_mass)


def edge_route(model: HookedModel, plan: EdgePlan, batch: Any, slice_fn: SliceFn, *, shortcuts: bool = True
               ) -> ForwardRoute:
    """The route of the final passes, checked on ``batch`` (:func:`probes.causal.routes.choose_route` with the
    blocks below layer 1 skipped; :data:`~probes.causal.routes.PLAIN` without ``shortcuts``)."""
    if not shortcuts:
        return PLAIN
    batch = as_token_batch(batch, ModelInfo.of(model)).to(model_device(model))
    inputs = LossInputs.of(model, batch, slice_masks(batch, {"slice": slice_fn}, plan.loss), plan.loss)
    return choose_route(model, batch, inputs, mask_kwargs(model, batch.attention_mask), 1)


def edge_sums(model: HookedModel, plan: EdgePlan, batches: Iterable[Any], slice_fn: SliceFn, *,
              means: HeadMeans | None = None, max_rows: int = 256, pass_bytes: int = PASS_BYTES,
              shortcuts: bool = True, route: ForwardRoute | None = None,
              clean: Sequence[CleanPass] | None = None) -> EdgeSums:
    """:func:`batch_edge_sums` over ``batches``, merged (one row per sequence). ``method="mean"`` needs ``means``
    of ``plan.sender_layers`` (:func:`probes.causal.means.head_output_means`). ``max_rows`` and ``pass_bytes``
    bound one pass (:class:`probes.causal.pass_size.PassSize`); ``shortcuts``/``route`` as
    :func:`probes.causal.ablation.ablation_sums`; ``clean``: each batch's clean pass along ``route``, kept from an
    earlier group of edges (:func:`clean_passes`).

    Example::

        plan = EdgePlan.build(ModelInfo.of(model), (0, 0), (1, 0), input="k", method="zero")
        edge_sums(model, plan, batches, repeated_half(8)).effects()   # [[loss change, score drop]]
    """
    info = ModelInfo.of(model)
    check_edge_hooks(model, plan)
    if plan.method == "mean" and means is None:
        raise InputError("method 'mean' replaces the sender by its mean output: pass means=head_output_means(model, "
                         "plan.sender_layers, batches).")
    size = PassSize(max_rows, pass_bytes)
    device = model_device(model)
    total: EdgeSums | None = None
    route = route if route is not None or shortcuts else PLAIN
    with torch.inference_mode():
        for i, raw in enumerate(batches):
            batch = as_token_batch(raw, info).to(device)
            if route is None:
                route = edge_route(model, plan, batch, slice_fn)
            part = batch_edge_sums(model, batch, plan, slice_fn, means=means, size=size, route=route,
                                   clean=None if clean is None else clean[i])
            total = part if total is None else total.merge(part)
    if total is None:
        raise InputError("No batches were given: the batch iterable was empty.")
    return total


def clean_passes(model: HookedModel, plan: EdgePlan, batches: Sequence[Any], slice_fn: SliceFn,
                 route: ForwardRoute, *, max_bytes: int) -> list[CleanPass] | None:
    """Each batch's :func:`clean_pass` for every receiver layer of ``plan``, to be shared by the groups of a null
    measured in groups (:func:`edge_sums` with ``clean=``); None once what they keep exceeds ``max_bytes`` (then
    each group runs its own clean passes, holding one batch's at a time)."""
    info = ModelInfo.of(model)
    device = model_device(model)
    receivers = sorted({int(v) for v in plan.edges[:, 2]})
    out: list[CleanPass] = []
    with torch.inference_mode():
        for raw in batches:
            out.append(clean_pass(model, as_token_batch(raw, info).to(device), plan, slice_fn, route, receivers))
            if sum(state.nbytes for state in out) > max_bytes:
                return None
    return out
