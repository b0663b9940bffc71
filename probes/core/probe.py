"""The probe contract: declare hooks, fold batches into additive running sums, compute a result.

A probe's whole accumulated state is a dict of float64 tensors that *add*: two probes that saw
two halves of the data merge (``a.merge(b)``) into exactly the probe that saw all of it, and a
sharded run all-reduces the same dict with a sum. ``compute()`` turns the sums into a frozen
:class:`~probes.core.result.ProbeResult`.

Writing a probe: subclass :class:`Probe`, store each constructor argument on ``self`` under its own
name (its ``settings()`` are read back from them) and call ``super().__init__()``; implement
``hook_names``, ``_update`` (call
``self._add(key, tensor)``) and ``_compute``.

One layer at a time: a batch is folded as ``begin_batch(batch)``, then ``fold(activations, batch)``
once per hook group (:meth:`Probe.hook_groups`, by default one group of every hook), then
``end_batch(batch)``. The runner folds each group the moment its last hook fires, inside the forward
pass, and drops the activations before the next layer runs, so a probe that declares one group per
layer (:class:`LayerwiseProbe`) never holds more than one layer's activations. What a batch adds is
staged until ``end_batch`` and dropped by ``abort_batch`` (a forward pass that ran out of memory
half way is retried on fewer rows without counting the layers it already folded twice).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import torch
from torch import Tensor

from probes.core.batch import TokenBatch
from probes.core.errors import ProbeStateError
from probes.core.model_info import ModelInfo
from probes.core.pattern_sums import check_pattern_block
from probes.core.result import ProbeResult, Provenance
from probes.core.settings import constructor_settings

if TYPE_CHECKING:
    from typing_extensions import Self

    from probes.core.attention_rows import LayerAttention
    from probes.core.attention_terms import AttentionTerms, TermSums

ResultT = TypeVar("ResultT", bound=ProbeResult, covariant=True)
"""The result class a probe computes: ``HeadScoreProbe`` is a ``Probe[HeadScores]``."""

_N_SEQUENCES = "_n_sequences"
_N_TOKENS = "_n_tokens"


def _combined(data: str, seed: int | None, more: str, more_seed: int | None) -> tuple[str, int | None]:
    """The data description and seed of a probe that saw ``data`` (``seed``) and then ``more`` (``more_seed``):
    both sources named (each once), and the seed kept only when both agree (else named with its source)."""
    if seed == more_seed:
        sources = data.split(" + ")
        return (data if more in sources else f"{data} + {more}"), seed

    def tag(text: str, s: int | None) -> str:
        return text if s is None or "(seed " in text else f"{text} (seed {s})"

    return f"{tag(data, seed)} + {tag(more, more_seed)}", None


class Probe(ABC, Generic[ResultT]):
    """Base class of every probe (see the module docstring for the contract); ``ResultT`` is the class of
    :meth:`compute`'s result."""

    def __init__(self) -> None:
        self._state: dict[str, Tensor] = {}
        self._info: ModelInfo | None = None
        self._data = "unspecified"
        self._seed: int | None = None
        self._activations: tuple[str, str] | None = None  # (device, dtype) of the first activation read
        self._pending: dict[str, Tensor] | None = None  # what the open batch adds (None: no batch open)
        self._folded: set[str] = set()  # hooks of the open batch folded so far

    # -- what a subclass defines -------------------------------------------------------------
    @abstractmethod
    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        """The hook points this probe reads on a model described by ``info``."""

    def settings(self) -> dict[str, Any]:
        """The constructor's arguments as this probe holds them, JSON-ready: they go into the provenance and
        decide whether two probes may merge (:func:`probes.core.settings.constructor_settings`)."""
        return constructor_settings(self)

    @abstractmethod
    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        """Fold one batch into the running sums with ``self._add``. Must not modify inputs."""

    @abstractmethod
    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> ResultT:
        """Turn the summed state into a result."""

    # -- the contract ------------------------------------------------------------------------
    @property
    def info(self) -> ModelInfo:
        if self._info is None:
            raise ProbeStateError(
                f"{type(self).__name__} is not bound to a model. Use probes.run_probes(model, "
                f"[probe], batches), or call probe.bind(ModelInfo.of(model)) before update()."
            )
        return self._info

    def bind(self, info: ModelInfo, *, data: str = "unspecified", seed: int | None = None) -> Self:
        """Attach the model facts and data description used for hooks and provenance."""
        if self._state and self._info is not None and self._info != info:
            raise ProbeStateError(
                f"{type(self).__name__} already holds data from model {self._info.name!r}; "
                f"create a new probe for {info.name!r}."
            )
        if self._state:  # more data for the same probe: the provenance names every source
            self._data, self._seed = _combined(self._data, self._seed, data, seed)
        else:
            self._data, self._seed = data, seed
        self._info = info
        return self

    def hook_groups(self, info: ModelInfo) -> tuple[tuple[str, ...], ...]:
        """Hooks that must reach ``_update`` together; every hook of ``hook_names`` is in exactly one group.

        The default is one group of all hooks (``_update`` sees the whole batch at once).
        """
        return (self.hook_names(info),)

    def _prepare(self, batch: TokenBatch) -> None:
        """Work that depends on the batch alone, done once before its groups are folded (default: none)."""

    def update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        """Fold one batch: ``activations`` maps each of ``hook_names(info)`` to its tensor."""
        info = self.info
        missing = [name for name in self.hook_names(info) if name not in activations]
        if missing:
            raise ProbeStateError(
                f"{type(self).__name__}.update() needs activations for {missing}; got "
                f"{sorted(activations)}. Run it through probes.run_probes, which caches them."
            )
        self.begin_batch(batch)
        try:
            for group in self.hook_groups(info):
                self.fold({name: activations[name] for name in group}, batch)
            self.end_batch(batch)
        except BaseException:
            self.abort_batch()
            raise

    def begin_batch(self, batch: TokenBatch) -> None:
        """Open ``batch``: its folds are staged until :meth:`end_batch` (or dropped by :meth:`abort_batch`)."""
        self.info  # noqa: B018  (raises the "not bound" error before any work)
        if self._pending is not None:
            raise ProbeStateError(
                f"{type(self).__name__}.begin_batch() was called while a batch is open; call end_batch() or "
                f"abort_batch() first."
            )
        self._pending, self._folded = {}, set()
        self._prepare(batch)

    def fold(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        """Fold one hook group of the open batch (``activations`` holds exactly that group's hooks)."""
        if self._pending is None:
            raise ProbeStateError(f"{type(self).__name__}.fold() needs an open batch: call begin_batch(batch) first.")
        repeated = self._folded.intersection(activations)
        if repeated:
            raise ProbeStateError(f"{type(self).__name__} was fed {sorted(repeated)} twice for one batch.")
        self._folded.update(activations)
        self._update(activations, batch)
        if self._activations is None and activations:
            first = next(iter(activations.values()))
            self._activations = (str(first.device), str(first.dtype).removeprefix("torch."))

    def end_batch(self, batch: TokenBatch) -> None:
        """Close the open batch: check every hook was folded, then add what it staged to the state."""
        if self._pending is None:
            raise ProbeStateError(f"{type(self).__name__}.end_batch() without begin_batch().")
        missing = sorted(set(self.hook_names(self.info)) - self._folded)
        if missing:
            self.abort_batch()
            raise ProbeStateError(f"{type(self).__name__}: the batch ended before {missing} were folded.")
        pending, self._pending = self._pending, None
        self._clear_batch()
        for key, value in pending.items():
            self._add(key, value)
        self._add(_N_SEQUENCES, torch.tensor(float(batch.tokens.shape[0])))
        # padding (attention_mask 0) is not a token of the corpus: the count must not depend on batching
        n_tokens = batch.tokens.numel() if batch.attention_mask is None else int(batch.attention_mask.sum())
        self._add(_N_TOKENS, torch.tensor(float(n_tokens)))

    def abort_batch(self) -> None:
        """Drop everything the open batch staged (no-op when none is open)."""
        self._pending = None
        self._clear_batch()

    def _clear_batch(self) -> None:
        """Forget per-batch context kept by ``_prepare`` (default: none)."""
        self._folded = set()

    def _add(self, key: str, value: Tensor) -> None:
        target = self._state if self._pending is None else self._pending
        value = value.detach().to(torch.float64)
        current = target.get(key)
        target[key] = value.clone() if current is None else current + value.to(current.device)

    def _add_at(self, key: str, index: int, size: int, value: Tensor) -> None:
        """Add ``value`` into row ``index`` of the ``[size, *value.shape]`` sum ``key`` (one layer of a stack)."""
        target = self._state if self._pending is None else self._pending
        current = target.get(key)
        if current is None:
            current = target[key] = torch.zeros((size, *value.shape), dtype=torch.float64, device=value.device)
        current[index] += value.detach().to(device=current.device, dtype=torch.float64)

    @property
    def n_sequences(self) -> int:
        return int(self._state[_N_SEQUENCES]) if _N_SEQUENCES in self._state else 0

    def state_dict(self) -> dict[str, Tensor]:
        """A copy of the additive state (float64 tensors); all-reduce it with a sum to shard a run."""
        return {key: value.clone() for key, value in self._state.items()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self._state = {key: value.detach().to(torch.float64).clone() for key, value in state.items()}

    def merge(self, other: Probe[Any]) -> Self:
        """Add ``other``'s state into this probe (in place) and return it."""
        if type(other) is not type(self) or other.settings() != self.settings():
            raise ProbeStateError(
                f"Can only merge probes of one type and settings; got {type(self).__name__}"
                f"{self.settings()} and {type(other).__name__}{other.settings()}."
            )
        if self._info is not None and other._info is not None and self._info != other._info:
            raise ProbeStateError(
                f"Cannot merge probes bound to different models ({self._info.name!r} vs {other._info.name!r})."
            )
        if self._state and other._state and self._state.keys() != other._state.keys():
            raise ProbeStateError(
                f"Cannot merge: the probes accumulated different quantities "
                f"({sorted(self._state)} vs {sorted(other._state)})."
            )
        for key, value in other._state.items():
            self._add(key, value)
        if self._info is None:
            self._info, self._data, self._seed = other._info, other._data, other._seed
        elif other._state:
            self._data, self._seed = _combined(self._data, self._seed, other._data, other._seed)
        self._activations = self._activations or other._activations
        return self

    def compute(self) -> ResultT:
        """The result over everything folded in so far, in CPU tensors (the running sums stay on the
        model's device). Raises before any data."""
        if not self._state:
            raise ProbeStateError(
                f"{type(self).__name__}.compute() was called before any data: feed batches with "
                f"probes.run_probes(model, [probe], batches) or probe.update(...) first."
            )
        info = self.info
        provenance = Provenance(
            model=info.name,
            data=self._data,
            probe=type(self).__name__,
            settings=self.settings(),
            seed=self._seed,
            n_sequences=int(self._state[_N_SEQUENCES]),
            n_tokens=int(self._state[_N_TOKENS]),
            device=self._activations[0] if self._activations else "unspecified",
            dtype=self._activations[1] if self._activations else "unspecified",
        )
        return self._compute({key: value.cpu() for key, value in self._state.items()}, info, provenance)


class LayerwiseProbe(Probe[ResultT]):
    """A probe that reads one hook per layer and folds each layer on its own, as its hook fires.

    Subclasses implement ``hook_names`` (stack order = the order of the rows of their per-layer sums),
    ``_batch_context(batch, first)`` (what every layer of the batch shares: masks, label lookups,
    checks; ``first`` is the first activation folded, for shape checks: for attention patterns it may
    hold only the first block of query rows) and either ``_update_layer(index, activation, batch,
    context)`` or, for attention patterns that can arrive a block of query rows at a time (long
    sequences), ``_update_rows(index, rows, start, batch, context)`` with ``rows`` =
    ``pattern[:, :, start:start + n]``. Both add a layer's sums with ``self._add_at(key, index, len(hook_names),
    value)``; only per-head partial sums reach float64.

    A probe that folds query rows also takes a layer as reductions (:mod:`probes.core.attention_rows`: the row
    log-sum-exp, gathered entries and label sums of a fused attention call, no ``[T, T]`` pattern). By default
    ``_update_attention`` materialises the layer's rows a block at a time and hands them to ``_update_rows``; a
    probe that can do with entries and label sums overrides it (and ``key_columns`` for the label columns it
    needs), keeping ``_update_rows`` as the reference it is tested against.
    """

    _context: Any = None
    _rows_seen: dict[str, int] | None = None

    def hook_groups(self, info: ModelInfo) -> tuple[tuple[str, ...], ...]:
        return tuple((name,) for name in self.hook_names(info))

    @abstractmethod
    def _batch_context(self, batch: TokenBatch, first: Tensor) -> Any:
        """What all layers of ``batch`` share (computed once, at the first layer folded)."""

    def _update_layer(self, index: int, activation: Tensor, batch: TokenBatch, context: Any) -> None:
        """Fold the activation of hook ``hook_names(info)[index]`` (default: the whole pattern as one block of rows)."""
        n_pos = batch.tokens.shape[1]
        check_pattern_block(activation, None, None, n_pos, whole=True)
        self._update_rows(index, activation, 0, batch, context)

    def _update_rows(self, index: int, rows: Tensor, start: int, batch: TokenBatch, context: Any) -> None:
        """Fold query rows ``start ...`` of the pattern of hook ``hook_names(info)[index]``."""
        raise NotImplementedError(f"{type(self).__name__} folds whole layers only")

    def key_columns(self, batch: TokenBatch) -> Tensor | None:
        """Label columns ``[batch k_pos column]`` whose attention mass per query ``_update_attention`` reads from
        ``attention.column_mass`` (taken in the model's own attention call); None (the default) for none."""
        return None

    def _update_attention(self, index: int, attention: LayerAttention, batch: TokenBatch, context: Any) -> None:
        """Fold the layer of hook ``hook_names(info)[index]`` given as reductions (default: its rows, a block at a
        time, through ``_update_rows``)."""
        for start, rows in attention.row_blocks():
            self._update_rows(index, rows, start, batch, context)

    def fold_attention(self, name: str, attention: LayerAttention, batch: TokenBatch) -> None:
        """Fold hook ``name``'s layer of the open batch from its reductions (:mod:`probes.core.attention_rows`)."""
        if self._pending is None:
            raise ProbeStateError(f"{type(self).__name__}.fold_attention() needs an open batch: call "
                                  f"begin_batch(batch) first.")
        if not self.folds_query_rows():
            raise ProbeStateError(f"{type(self).__name__} folds whole layers only; feed it with fold().")
        if name in self._folded:
            raise ProbeStateError(f"{type(self).__name__} was fed {name} twice for one batch.")
        if self._context is None:
            self._context = self._batch_context(batch, attention.rows(0, 1))
        self._update_attention(self.hook_names(self.info).index(name), attention, batch, self._context)
        self._folded.add(name)
        if self._activations is None:
            self._activations = (str(attention.query.device), str(attention.query.dtype).removeprefix("torch."))

    def _folds_terms(self) -> bool:
        """Whether this probe states its per-layer work as :class:`~probes.core.attention_terms.AttentionTerms`
        (``_terms`` and ``_fold_terms`` defined); default no."""
        return False

    def _terms(self, batch: TokenBatch, context: Any) -> AttentionTerms | None:
        """The batch's terms from its context (None: fold each layer with ``_update_attention`` instead)."""
        return None

    def _fold_terms(self, sums: TermSums, context: Any) -> None:
        """Add every layer's term sums of the batch (``sums.entries[l, s, h]``, ``sums.columns[l, h, r, c]``)."""
        raise NotImplementedError(f"{type(self).__name__} states no attention terms")

    def attention_terms(self, batch: TokenBatch) -> AttentionTerms | None:
        """What every layer's softmax adds to this probe for the open batch, as linear terms
        (:mod:`probes.core.attention_terms`), planned from ``batch``'s tokens (on the CPU) before the forward pass;
        the batch's context is set from them. None where the probe folds each layer itself (nothing staged then)."""
        if self._pending is None:
            raise ProbeStateError(f"{type(self).__name__}.attention_terms() needs an open batch: call "
                                  f"begin_batch(batch) first.")
        if not self._folds_terms() or self.info.causal is None or self._context is not None:
            return None
        n_batch, n_pos = batch.tokens.shape
        first = torch.empty((n_batch, self.info.n_heads, 1, n_pos), device="meta")  # shapes for the checks only
        staged = dict(self._pending)  # _add replaces tensors, never mutates them: this undoes the context's counts
        context = self._batch_context(batch, first)
        terms = self._terms(batch, context)
        if terms is None:
            self._pending = staged
            return None
        self._context = context
        return terms

    def fold_terms(self, sums: TermSums, activations: tuple[str, str]) -> None:
        """Fold every layer of the open batch from its term sums (:meth:`attention_terms` first); ``activations`` is
        the (device, dtype) of the attention they were taken from."""
        if self._pending is None or self._context is None:
            raise ProbeStateError(f"{type(self).__name__}.fold_terms() needs an open batch whose attention_terms() "
                                  f"were taken.")
        self._fold_terms(sums, self._context)
        self._folded.update(self.hook_names(self.info))
        if self._activations is None:
            self._activations = activations

    @classmethod
    def folds_query_rows(cls) -> bool:
        """Whether this probe accepts a layer's pattern a block of query rows at a time."""
        return cls._update_rows is not LayerwiseProbe._update_rows

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        names = self.hook_names(self.info)
        for name, activation in activations.items():
            if self._context is None:
                self._context = self._batch_context(batch, activation)
            self._update_layer(names.index(name), activation, batch, self._context)

    def fold_rows(self, name: str, rows: Tensor, start: int, batch: TokenBatch) -> None:
        """Fold query rows ``start ... start + rows.shape[2]`` of hook ``name``'s pattern in the open batch;
        the hook counts as folded once its last row has arrived (blocks must come in order)."""
        if self._pending is None:
            raise ProbeStateError(f"{type(self).__name__}.fold_rows() needs an open batch: call begin_batch(batch) "
                                  f"first.")
        if not self.folds_query_rows():
            raise ProbeStateError(f"{type(self).__name__} folds whole layers only; feed it with fold().")
        seen = self._rows_seen if self._rows_seen is not None else {}
        if name in self._folded or seen.get(name, 0) != start:
            raise ProbeStateError(f"{type(self).__name__}: rows of {name} must arrive once each, in order; got "
                                  f"rows from {start} after {seen.get(name, 0)}.")
        if self._context is None:
            self._context = self._batch_context(batch, rows)
        self._update_rows(self.hook_names(self.info).index(name), rows, start, batch, self._context)
        seen[name] = start + rows.shape[2]
        self._rows_seen = seen
        if seen[name] >= batch.tokens.shape[1]:
            self._folded.add(name)
        if self._activations is None:
            self._activations = (str(rows.device), str(rows.dtype).removeprefix("torch."))

    def _clear_batch(self) -> None:
        super()._clear_batch()
        self._context = None
        self._rows_seen = None
