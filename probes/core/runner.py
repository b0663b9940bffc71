"""Where probes meet models: cache just the declared hooks, stop early, stream batches (every forward pass through
:mod:`mechprobe.forward`, which moves the batch to the model's device)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from typing import Any

import torch
from torch import Tensor
from tqdm.auto import tqdm

from mechprobe import forward
from mechprobe.forward import model_device
from probes.core.batch import TokenBatch, as_token_batch
from probes.core.errors import InputError, ModelError
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel, mask_kwargs
from probes.core.out_of_memory import Halving
from probes.core.probe import LayerwiseProbe, Probe, ResultT

log = logging.getLogger(__name__)


class _AllHooksCaptured(Exception):
    """Raised from inside the forward pass once every needed hook has fired."""


MAX_PATTERN_BYTES = 64 * 2**20
"""Default size of one layer's ``[batch head q_pos k_pos]`` pattern above which attention reaches the probes as
reductions of a fused kernel instead of ``hook_pattern``, where the model and the probes allow it
(:mod:`probes.core.attention_rows`)."""

_REDUCTIONS_CHECKED: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def capture(model: HookedModel, batch: TokenBatch, hook_names: Sequence[str]) -> dict[str, Tensor]:
    """Run ``model`` on ``batch`` until every hook in ``hook_names`` has fired; return their values.

    The forward pass is cut short by an exception raised from the last needed hook, so the
    layers after it (and the unembedding) never run. ``batch`` may sit on any device: it is moved to the model's.
    """
    needed = set(hook_names)
    captured: dict[str, Tensor] = {}

    def keeper(name: str) -> Callable[[Tensor, Any], None]:
        def keep(tensor: Tensor, hook: Any) -> None:
            captured[name] = tensor
            if len(captured) == len(needed):
                raise _AllHooksCaptured

        return keep

    kwargs = mask_kwargs(model, batch.attention_mask)
    with contextlib.suppress(_AllHooksCaptured):
        forward.run(model, batch.tokens, fwd_hooks=[(name, keeper(name)) for name in needed], **kwargs)
    if len(captured) != len(needed):
        raise ModelError(
            f"The forward pass never fired {sorted(needed - set(captured))}. The model has these "
            f"hook points but does not call them; check its forward()."
        )
    return captured


def _rows(batch: TokenBatch, start: int, stop: int) -> TokenBatch:
    mask = None if batch.attention_mask is None else batch.attention_mask[start:stop]
    return TokenBatch(batch.tokens[start:stop], batch.valid[start:stop], mask)


@contextlib.contextmanager
def _batch_in_all(probes: Sequence[Probe[Any]], batch: TokenBatch, info: ModelInfo) -> Iterator[None]:
    """Open ``batch`` in every probe and fold the groups that read no hook; close it in all of them after the
    block, or abort it in all of them (nothing counted) when the block raises."""
    for probe in probes:
        probe.begin_batch(batch)
    try:
        for probe in probes:
            for group in probe.hook_groups(info):
                if not group:
                    probe.fold({}, batch)
        yield
        for probe in probes:
            probe.end_batch(batch)
    except BaseException:
        for probe in probes:
            probe.abort_batch()
        raise


def fold_forward(model: HookedModel, probes: Sequence[Probe[Any]], batch: TokenBatch, info: ModelInfo) -> None:
    """One forward pass of ``batch`` that folds every probe's hook groups as their last hook fires.

    A group's activations are handed to its probe inside the hook and not kept, so the model frees
    them with the rest of the layer; a hook needed by a group that is still incomplete (a probe
    reading several layers at once) is kept only until that group is folded. The pass stops after
    the last needed hook. On any error every probe's batch is aborted (nothing is counted).
    """
    groups = [(probe, group) for probe in probes for group in probe.hook_groups(info)]
    unfired = [set(group) for _, group in groups]  # per group: members whose hook has not fired yet
    needed = set().union(*unfired)
    groups_of = {name: [i for i, (_, group) in enumerate(groups) if name in group] for name in needed}
    held: dict[str, Tensor] = {}

    def keeper(name: str) -> Callable[[Tensor, Any], None]:
        def keep(tensor: Tensor, hook: Any) -> None:
            if name in held or not any(name in unfired[i] for i in groups_of[name]):
                raise ModelError(f"The hook {name} fired twice in one forward pass; mechprobe reads each hook once.")
            held[name] = tensor
            for i in groups_of[name]:
                unfired[i].discard(name)
                if not unfired[i]:
                    probe, group = groups[i]
                    probe.fold({member: held[member] for member in group}, batch)
            for member in [m for m in held if not any(unfired[i] for i in groups_of[m])]:
                del held[member]  # every group reading it is folded: let the model free it
            if not any(unfired):
                raise _AllHooksCaptured

        return keep

    try:
        with _batch_in_all(probes, batch, info):
            if needed:
                with contextlib.suppress(_AllHooksCaptured):
                    forward.run(model, batch.tokens, fwd_hooks=[(name, keeper(name)) for name in sorted(needed)],
                                **mask_kwargs(model, batch.attention_mask))
                silent = sorted(set().union(*unfired))
                if silent:
                    raise ModelError(
                        f"The forward pass never fired {silent}. The model has these "
                        f"hook points but does not call them; check its forward()."
                    )
    finally:
        held.clear()


def assume_reductions_match(model: HookedModel) -> None:
    """Take the reductions as exact on ``model`` without the once-per-model comparison with ``hook_pattern``: for a
    model on ``meta`` weights (the cost ledger), where there are no values to compare. The route taken is then the
    one a real model of the same architecture takes once its check has passed."""
    _REDUCTIONS_CHECKED[model] = True


def reductions_apply(model: HookedModel, probes: Sequence[Probe[Any]], batch: TokenBatch, info: ModelInfo,
                     max_pattern_bytes: int | None) -> bool:
    """Whether ``batch``'s attention should reach ``probes`` as reductions (:mod:`probes.core.attention_rows`)
    rather than as ``hook_pattern``.

    Reductions are used when one layer's pattern would exceed ``max_pattern_bytes``, every hook the probes read is
    an attention pattern read by a probe that folds query rows, and the reductions reproduce ``hook_pattern`` on
    this model (checked once per model on a short input)."""
    from probes.core import attention_rows, reductions_check

    n_batch, n_pos = batch.tokens.shape
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    layer_bytes = n_batch * info.n_heads * n_pos * n_pos * torch.finfo(dtype).bits // 8
    if max_pattern_bytes is None or layer_bytes <= max_pattern_bytes:
        return False
    patterns = {pattern_hook(layer) for layer in range(info.n_layers)}
    readers = [probe for probe in probes if set(probe.hook_names(info))]
    if not all(isinstance(probe, LayerwiseProbe) and probe.folds_query_rows()
               and set(probe.hook_names(info)) <= patterns for probe in readers):
        log.info("patterns of %d MiB per layer, but a probe here needs whole layers: using hook_pattern",
                 layer_bytes >> 20)
        return False
    if model not in _REDUCTIONS_CHECKED:
        short = batch.tokens[:1, : min(n_pos, 48)]
        ok = attention_rows.supports_reductions(model) and reductions_check.reductions_match_hook_pattern(model, short)
        _REDUCTIONS_CHECKED[model] = ok
        if not ok:
            log.warning("%s: attention reductions do not reproduce hook_pattern; whole patterns are used (%d MiB a "
                        "layer at this length)", info.name, layer_bytes >> 20)
    return _REDUCTIONS_CHECKED[model]


ENTRY_CHUNK_MIN_BYTES = 64 * 2**20


def _entry_chunk_bytes(model: HookedModel, batch: TokenBatch) -> int:
    """What the probes' gathered attention entries may hold at once: two MLP activations of the batch (a gated MLP
    holds its gate and up projections together at every layer, so the probes add nothing to the model's peak), at
    least :data:`ENTRY_CHUNK_MIN_BYTES`."""
    cfg = model.cfg
    d_mlp = getattr(cfg, "d_mlp", None)
    width = d_mlp if isinstance(d_mlp, int) and d_mlp > 0 else 4 * int(cfg.d_model)
    dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return max(ENTRY_CHUNK_MIN_BYTES, 2 * batch.shape[0] * batch.shape[1] * width * torch.finfo(dtype).bits // 8)


def fold_forward_reduced(model: HookedModel, probes: Sequence[Probe[Any]], batch: TokenBatch, info: ModelInfo,
                         host: TokenBatch | None = None) -> None:
    """Like :func:`fold_forward`, but each layer reaches the probes as reductions of a fused attention call
    (:func:`probes.core.attention_rows.reduced_attention`): no ``[batch head q_pos k_pos]`` tensor is made unless a
    probe asks for rows, and then a block at a time. Every probe must fold query rows.

    Probes that state their work as attention terms (:mod:`probes.core.attention_terms`) are planned together from
    ``host`` (``batch`` on the CPU; default ``batch`` moved there) before the pass and folded per layer in one batched
    reduction for all of them; the others fold each layer themselves."""
    from probes.core.attention_rows import LayerAttention, reduced_attention
    from probes.core.attention_terms import TermsPlan

    readers: dict[str, list[LayerwiseProbe[Any]]] = {}
    for probe in probes:
        if isinstance(probe, LayerwiseProbe):  # reductions_apply admits no other probe that reads a hook
            for name in probe.hook_names(info):
                readers.setdefault(name, []).append(probe)
    remaining = set(readers)
    host = batch.to("cpu") if host is None else host
    every_layer = [pattern_hook(layer) for layer in range(info.n_layers)]

    with _batch_in_all(probes, batch, info):
        if not remaining:
            return
        unique = list({id(p): p for group in readers.values() for p in group}.values())
        planned, terms = [], []
        for probe in unique:
            stated = probe.attention_terms(host) if list(probe.hook_names(info)) == every_layer else None
            if stated is not None:
                planned.append(probe)
                terms.append(stated)
        plan = (TermsPlan(terms, n_layers=info.n_layers, n_heads=info.n_heads, n_pos=batch.shape[1],
                          device=forward.model_device(model), chunk_bytes=_entry_chunk_bytes(model, batch))
                if terms else None)
        columns: dict[int, slice] = {}  # id(probe) -> its label columns in the concatenation
        parts: list[Tensor] = []
        width = 0
        for probe in [p for p in unique if p not in planned]:
            part = probe.key_columns(batch)
            if part is not None:
                columns[id(probe)] = slice(width, width + part.shape[-1])
                parts.append(forward.on_model(model, part.to(torch.float32)))
                width += part.shape[-1]
        planned_columns = None
        if plan is not None and plan.columns is not None:
            planned_columns = slice(width, width + plan.columns.shape[-1])
            parts.append(plan.columns)
        activations: list[tuple[str, str]] = []

        def sink(attention: LayerAttention) -> None:
            name = pattern_hook(attention.layer)
            if not activations:
                activations.append((str(attention.query.device), str(attention.query.dtype).removeprefix("torch.")))
            if plan is not None:
                mass, layer = attention.column_mass, attention
                if mass is not None and planned_columns is not None and planned_columns != slice(0, mass.shape[-1]):
                    layer = dataclasses.replace(attention, column_mass=mass[..., planned_columns])
                plan.fold(layer)
            for probe in readers.get(name, ()):
                if probe in planned:
                    continue
                where = columns.get(id(probe))
                mass = None if where is None or attention.column_mass is None else attention.column_mass[..., where]
                probe.fold_attention(name, dataclasses.replace(attention, column_mass=mass), batch)
            remaining.discard(name)
            if not remaining:
                raise _AllHooksCaptured

        kwargs: dict[str, Any] = mask_kwargs(model, batch.attention_mask)
        with contextlib.suppress(_AllHooksCaptured), reduced_attention(
                model, sink, columns=torch.cat(parts, -1) if parts else None):
            forward.run(model, batch.tokens, **kwargs)
        if remaining:
            raise ModelError(f"The forward pass never computed the attention of {sorted(remaining)}.")
        if plan is not None:
            for probe, sums in zip(planned, plan.sums()):
                probe.fold_terms(sums, activations[0])


class _AdaptiveFolding:
    """Folds batches in row chunks that fit in memory (:class:`probes.core.out_of_memory.Halving`).

    A failed forward pass aborts the batch in every probe (what its early layers staged is dropped),
    and since probe state is additive, feeding a batch in chunks gives the same result as feeding it
    whole. The chunk size found is kept for the following batches.
    """

    def __init__(self, model: HookedModel, probes: Sequence[Probe[Any]], info: ModelInfo,
                 max_pattern_bytes: int | None) -> None:
        self.model, self.probes, self.info = model, probes, info
        self.max_pattern_bytes = max_pattern_bytes
        self.rows = Halving("rows")

    def fold(self, batch: TokenBatch) -> None:
        """Fold ``batch`` (on any device; moved to the model's, and to the CPU for the probes' plans)."""
        device = model_device(self.model)
        n_rows = batch.shape[0]

        def fold_rows(start: int, stop: int) -> None:
            part = batch if (start, stop) == (0, n_rows) else _rows(batch, start, stop)
            if reductions_apply(self.model, self.probes, part, self.info, self.max_pattern_bytes):
                fold_forward_reduced(self.model, self.probes, part.to(device), self.info, part.to("cpu"))
            else:
                fold_forward(self.model, self.probes, part.to(device), self.info)

        self.rows.chunks(n_rows, fold_rows, too_big=f"Out of memory on a single sequence of {batch.shape[1]} tokens. "
                         f"Use shorter sequences, weights in bfloat16/float16 (dtype=...), or another device.")


def feed_probes(
    model: HookedModel,
    probes: Sequence[Probe[Any]],
    batches: Iterable[Tensor | TokenBatch],
    *,
    data: str = "unspecified",
    seed: int | None = None,
    progress: bool = True,
    total: int | None = None,
    on_batch: Callable[[int, Sequence[Probe[Any]]], None] | None = None,
    max_pattern_bytes: int | None = MAX_PATTERN_BYTES,
) -> ModelInfo:
    """Bind ``probes`` to ``model`` and fold every batch into them (in place); no result.

    This is the streaming core of :func:`run_probes`; call it directly to accumulate several
    corpora into the same probes or to all-reduce their state before ``compute()``.
    ``on_batch(i, probes)`` runs after batch ``i`` is folded in (e.g. to snapshot per-batch
    state for a bootstrap). A batch that does not fit in memory is run in smaller row chunks
    (halved until it fits; the same result, since probe state is additive). Where one layer's pattern
    would exceed ``max_pattern_bytes`` (None: never), attention reaches the probes as reductions of a fused
    kernel, no ``[T, T]`` pattern made (see :func:`reductions_apply` for when this applies).
    """
    info = ModelInfo.of(model)
    if not probes:
        raise InputError("run_probes needs at least one probe; got an empty list.")
    for probe in probes:
        if not isinstance(probe, Probe):
            raise InputError(f"Expected probes.Probe instances; got {type(probe).__name__}.")
        probe.bind(info, data=data, seed=seed)
    hook_names = sorted({name for probe in probes for name in probe.hook_names(info)})
    unknown = [name for name in hook_names if name not in model.hook_dict]
    if unknown:
        raise ModelError(f"The probes read hooks this model does not have: {unknown}.")
    if total is None and isinstance(batches, Sized):
        total = len(batches)
    was_training = getattr(model, "training", False)
    if was_training:
        model.eval()
    n_batches = 0
    runner = _AdaptiveFolding(model, probes, info, max_pattern_bytes)
    try:
        with torch.inference_mode():
            for raw in tqdm(batches, total=total, desc="probing", unit="batch", disable=not progress):
                runner.fold(as_token_batch(raw, info))
                if on_batch is not None:
                    on_batch(n_batches, probes)
                n_batches += 1
    finally:
        if was_training:
            model.train()
    if n_batches == 0:
        raise InputError("No batches were given: the batch iterable was empty.")
    log.info("probed %d batches on %s with %d probes", n_batches, info.name, len(probes))
    return info


def run_probes(
    model: HookedModel,
    probes: Sequence[Probe[ResultT]],
    batches: Iterable[Tensor | TokenBatch],
    *,
    data: str = "unspecified",
    seed: int | None = None,
    progress: bool = True,
    total: int | None = None,
    max_pattern_bytes: int | None = MAX_PATTERN_BYTES,
) -> list[ResultT]:
    """Run ``model`` once per batch, feed every probe, return their results in order.

    Only the union of the probes' hooks is kept, the forward pass stops after the last of them,
    nothing but the probes' running sums outlives a batch, and it all runs under
    ``torch.inference_mode()``. Long sequences (one layer's pattern over ``max_pattern_bytes``) are
    probed from reductions of a fused attention kernel where the model and probes allow it.

    Example::

        results = probes.run_probes(model, [probes.HeadScoreProbe()], [tokens])
    """
    feed_probes(model, probes, batches, data=data, seed=seed, progress=progress, total=total,
                max_pattern_bytes=max_pattern_bytes)
    return [probe.compute() for probe in probes]
