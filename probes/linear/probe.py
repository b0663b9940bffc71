"""Linear probes: decode labels from each layer's residual stream with scikit-learn, beside a control task.

:class:`LinearProbe` reads the residual hooks (``hook_embed`` then each layer's output, see
:mod:`probes.linear.residual_hooks`), labels the positions of each batch with a label maker
(:mod:`probes.linear.labels`) and keeps a uniform random sample of at most ``max_examples`` labelled
positions: priority (bottom-k) reservoir sampling. Every labelled position gets a key
``u ~ U(0, 1)`` from a NumPy generator seeded by ``seed`` (drawn one per position in stream order, so
splitting a batch changes nothing); the reservoir holds the positions of the ``max_examples`` smallest
keys, with that position's activation at every hook (one sample shared by all layers and label keys,
so layers are compared on the same examples). Memory is ``max_examples x sum of hook widths`` floats,
whatever the corpus size.

Which positions enter is decided from the labels before the forward pass (``_prepare``); each layer's
activations at those positions are copied as its hook fires (one hook group per layer, so the runner can
free the layer), and the reservoir changes only when the batch ends. A batch aborted by the runner (out
of memory half way) changes nothing and puts the random generator back, so the retried batch is sampled
exactly as in an uninterrupted run.
State is not a sum, so a reservoir cannot be all-reduced: :meth:`LinearProbe.state_dict` raises. Two
probes that saw disjoint data with *different* seeds merge exactly (:meth:`LinearProbe.merge`): the
smallest keys of the union are a uniform sample of the union. Give each shard ``first_row`` (its first
row's global index) so row-indexed labels and document ids stay global.

:meth:`compute` fits, for each label key and each hook, the classifier (default ``StandardScaler`` +
``LogisticRegression``) with ``GroupKFold`` over documents (``documents[row]``; each row its own
document by default) and reports, over the out-of-fold predictions: accuracy with a 95% document-
bootstrap interval, the majority-class baseline, and the key's **baseline** with **gain** = accuracy -
baseline accuracy (paired interval). The baseline fits the label: for a property of the current word (its
topic) Hewitt & Liang (2019)'s control task, the same probe on random labels per word type
(:func:`probes.linear.fit.control_task_labels`; the gain is their *selectivity*); for a label that is not
a function of the current word (``tok[t-k]``, the document's topic, the next token) the current token
alone: the better (higher out-of-fold accuracy) of a count table on the token id
(:func:`probes.linear.fit.token_identity_correct`) and the same probe on the token embeddings
(``hook_embed``, when the probe reads it), so the gain is what the layers add to the token; a count table
is the better estimate for a vocabulary seen often, trained embeddings for words that share a direction.
Every fit runs on one BLAS/OpenMP thread (:data:`probes.linear.fit.FIT_THREADS`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor

from mechprobe.validation import integer
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ProbeStateError
from probes.core.model_info import ModelInfo
from probes.core.probe import Probe
from probes.core.result import ProbeResult, Provenance
from probes.display.linear_figure import linear_scores_figure
from probes.linear.fit import (
    control_task_labels,
    document_bootstrap,
    held_out_best_layer,
    majority_correct,
    make_classifier,
    out_of_fold_correct,
    percentile_ci,
    token_identity_correct,
)
from probes.linear.labels import STATISTICS, Baseline, LabelMaker
from probes.linear.residual_hooks import default_residual_hooks

if TYPE_CHECKING:
    import pandas as pd

if TYPE_CHECKING:
    from matplotlib.figure import Figure

log = logging.getLogger(__name__)
EMBEDDING_HOOK = "hook_embed"


@dataclass(frozen=True)
class LinearProbeScores(ProbeResult):
    """Per label key (``"1"``, ``"word"``, ...), tensors over ``hooks`` (embeddings first):
    ``accuracy`` [layer], ``accuracy_ci`` [layer, 2], ``baseline_accuracy`` [layer], ``gain`` [layer] (accuracy -
    baseline accuracy) and ``gain_ci`` [layer, 2]; ``baseline[key]`` names the baseline (``"control_task"`` or
    ``"token_identity"``), ``baseline_source[key]`` which predictor gave it (``"control task"``, ``"token id"``
    or ``"hook_embed"``) and ``statistic[key]`` the gain (``"selectivity"``, ``"gain over token identity"``).
    ``correct`` / ``baseline_correct`` [layer, example] (out-of-fold, 0/1), ``documents``, ``labels`` and
    ``types`` (the token at the position) [example] keep what the numbers were computed from, so two models
    probed on the same batches with the same seed can be compared example by example."""

    hooks: list[str]
    keys: list[str]
    baseline: dict[str, str]
    baseline_source: dict[str, str]
    statistic: dict[str, str]
    accuracy: dict[str, Tensor]
    accuracy_ci: dict[str, Tensor]
    baseline_accuracy: dict[str, Tensor]
    gain: dict[str, Tensor]
    gain_ci: dict[str, Tensor]
    correct: dict[str, Tensor]
    baseline_correct: dict[str, Tensor]
    documents: dict[str, Tensor]
    labels: dict[str, Tensor]
    types: dict[str, Tensor]
    majority_baseline: dict[str, float]
    n_classes: dict[str, int]
    n_examples: dict[str, int]
    n_documents: dict[str, int]
    fit_seconds: float

    def __post_init__(self) -> None:
        """Refuse a result whose tensors do not fit its hooks and examples, or whose accuracies are not ones a
        probe gets (a saved result damaged or edited: render drew accuracies of -1)."""
        n_hooks = len(self.hooks)
        for key in self.keys:
            n = self.documents[key].shape[0] if key in self.documents else -1
            shapes = {"accuracy": (n_hooks,), "baseline_accuracy": (n_hooks,), "gain": (n_hooks,),
                      "accuracy_ci": (n_hooks, 2), "gain_ci": (n_hooks, 2), "correct": (n_hooks, n),
                      "baseline_correct": (n_hooks, n), "documents": (n,), "labels": (n,), "types": (n,)}
            for name, shape in shapes.items():
                tensor = getattr(self, name).get(key)
                if tensor is None or tuple(tensor.shape) != shape:
                    got = "none" if tensor is None else list(tensor.shape)
                    raise InputError(f"{name}[{key!r}] has shape {got}, where {n_hooks} hooks and {n} examples "
                                     f"give {list(shape)}.")
            for name in ("correct", "baseline_correct"):
                if not bool(((self._at(name, key) == 0) | (self._at(name, key) == 1)).all()):
                    raise InputError(f"{name}[{key!r}] holds values other than 0 and 1 (each example is right or "
                                     f"wrong).")
            for name in ("accuracy", "baseline_accuracy", "accuracy_ci"):
                values = self._at(name, key)
                if n == 0 and bool(values.isnan().all()):  # no scores for this key (too little data)
                    continue
                if not bool(((values >= 0) & (values <= 1)).all()):
                    raise InputError(f"{name}[{key!r}] holds {values.flatten().tolist()[:4]}...: accuracies lie "
                                     f"in [0, 1].")

    def _at(self, name: str, key: str) -> Tensor:
        tensor: Tensor = getattr(self, name)[key]
        return tensor.detach().double()

    def example_gain(self, key: str) -> np.ndarray:
        """[layer, example]: each example's correctness minus its baseline's (float64)."""
        gain: np.ndarray = self.correct[key].numpy().astype(np.float64) - self.baseline_correct[key].numpy()
        return gain

    def same_examples(self, other: LinearProbeScores, key: str) -> bool:
        """Whether ``other`` scored the same examples of ``key`` (documents, labels, tokens) at the same hooks."""
        return (self.hooks == other.hooks and key in other.keys
                and all(torch.equal(getattr(self, name)[key], getattr(other, name)[key])
                        for name in ("documents", "labels", "types")))

    def held_out_best_layer(self, key: str, *, control: LinearProbeScores | None = None, n_boot: int = 1000,
                            seed: int = 0) -> dict[str, Any]:
        """The layer of highest gain chosen on half of the documents, measured on the other half
        (:func:`probes.linear.fit.held_out_best_layer`); with ``control`` (e.g. the random-weight model probed on
        the same batches and seed) the gain must also beat the control's, example by example."""
        if control is not None and not self.same_examples(control, key):
            raise InputError(f"The control scored other examples of {key!r} than the model (documents, labels or "
                             f"tokens differ); probe both on the same batches with the same seed and max_examples.")
        return held_out_best_layer(self.example_gain(key), self.documents[key].numpy(),
                                   control=None if control is None else control.example_gain(key),
                                   n_boot=n_boot, seed=seed)

    def plot(self, key: str | None = None) -> Figure:
        """Accuracy per hook with its 95% interval beside its baseline, one panel per label key
        (:func:`probes.display.linear_figure.linear_scores_figure`)."""
        return linear_scores_figure(self, key)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (key, layer): accuracy and its interval, the baseline, the gain and its interval."""
        import pandas as pd

        rows = []
        for key in self.keys:
            for i, hook in enumerate(self.hooks):
                rows.append({
                    "key": key, "layer": i, "hook": hook, "accuracy": float(self.accuracy[key][i]),
                    "ci_low": float(self.accuracy_ci[key][i, 0]), "ci_high": float(self.accuracy_ci[key][i, 1]),
                    "baseline": self.baseline[key], "baseline_accuracy": float(self.baseline_accuracy[key][i]),
                    "statistic": self.statistic[key], "gain": float(self.gain[key][i]),
                    "gain_ci_low": float(self.gain_ci[key][i, 0]), "gain_ci_high": float(self.gain_ci[key][i, 1]),
                    "majority_baseline": self.majority_baseline[key], "n_examples": self.n_examples[key],
                })
        return pd.DataFrame(rows)


def bottom_k_per_key(priority: np.ndarray, labelled: np.ndarray, k: int) -> np.ndarray:
    """Which examples to keep: for each column of ``labelled`` [example, key], the ``k`` labelled examples of
    smallest ``priority`` (all of them when there are fewer); kept = kept for any key."""
    keep = np.zeros(len(priority), dtype=bool)
    for column in labelled.T:
        index = np.nonzero(column)[0]
        if len(index) > k:
            index = index[np.argpartition(priority[index], k - 1)[:k]]
        keep[index] = True
    return keep


class LinearProbe(Probe["LinearProbeScores"]):
    """Linear decodability of ``labels`` from each residual hook (see the module docstring).

    ``hooks``: the hooks to read (default ``hook_embed`` + every ``blocks.{l}.hook_resid_post``; use
    :func:`probes.linear.residual_hooks.residual_hooks` for toy models). ``documents``: document id per global
    row (default: each row is its own document). ``unseen_words=True``: each fold's training part also drops
    every example whose word type (the token at the position) occurs in its test part, so test words are
    unseen as well as test documents: decoding then needs a direction shared by the words of a class, not a
    memorised lookup of each word. ``classifier``: a scikit-learn classifier or a factory (default
    :func:`probes.linear.fit.default_classifier`). ``baselines``: ``{key: "control_task" | "token_identity"}``
    (default: the label maker's ``baseline(key)``; a maker without one gets the control task for every key).

    Example::

        labels = PreviousTokenLabels((1, 2), most_frequent_tokens(batches, 20))
        (scores,) = probes.run_probes(model, [LinearProbe(labels, max_examples=2000)], batches)
        scores.gain["1"]                   # accuracy - the token-identity baseline, per layer, embeddings first
    """

    def __init__(self, labels: LabelMaker, *, hooks: Sequence[str] | None = None, documents: Tensor | None = None,
                 max_examples: int = 2000, classifier: Any | Callable[[], Any] | None = None, n_folds: int = 5,
                 n_boot: int = 1000, seed: int = 0, control_seed: int = 0, first_row: int = 0,
                 unseen_words: bool = False, baselines: Mapping[str, Baseline] | None = None) -> None:
        super().__init__()
        if not callable(labels) or not getattr(labels, "keys", None):
            raise ConfigError(f"labels must be a label maker from probes.linear.labels; got {type(labels).__name__}.")
        if hooks is not None and (isinstance(hooks, str) or not hooks or not all(isinstance(h, str) for h in hooks)):
            raise ConfigError(f"hooks must be a non-empty list of hook names; got {hooks!r}.")
        if documents is not None and (not isinstance(documents, Tensor) or documents.ndim != 1
                                      or documents.dtype.is_floating_point):
            raise InputError("documents must be an integer tensor [n_rows]: the document id of each row fed, in order.")
        if not isinstance(unseen_words, bool):
            raise ConfigError(f"unseen_words must be True or False; got {unseen_words!r}.")
        # a wrong classifier fails here, not after the whole corpus; each fit clones this unfitted template
        self.labels, self.classifier = labels, make_classifier(classifier)
        self.baselines = self._baselines(labels, baselines)
        self.hooks = None if hooks is None else tuple(hooks)
        self.documents = None if documents is None else documents.long().cpu()
        self.max_examples = integer("max_examples", max_examples, 10)
        self.n_folds = integer("n_folds", n_folds, 2)
        self.n_boot = integer("n_boot", n_boot, 1)
        self.seed, self.control_seed = integer("seed", seed, 0), integer("control_seed", control_seed, 0)
        self.first_row = integer("first_row", first_row, 0)
        self.unseen_words = unseen_words
        self._rng = np.random.default_rng(seed)
        self._next_row = first_row
        self._priority = np.empty(0)
        self._features: dict[str, Tensor] = {}
        self._targets = torch.empty(0, len(labels.keys), dtype=torch.long)
        self._types = torch.empty(0, dtype=torch.long)
        self._groups = torch.empty(0, dtype=torch.long)
        self._snapshot: tuple[Any, ...] | None = None
        self._batch: dict[str, Any] = {}

    @staticmethod
    def _baselines(labels: LabelMaker, given: Mapping[str, Baseline] | None) -> dict[str, Baseline]:
        own = getattr(labels, "baseline", None)
        chosen: dict[str, Baseline] = {key: own(key) if callable(own) else "control_task" for key in labels.keys}
        if given is not None:
            if not isinstance(given, Mapping) or not set(given) <= set(labels.keys):
                raise ConfigError(f"baselines must map some of the label keys {list(labels.keys)} to "
                                  f"'control_task' or 'token_identity'; got {given!r}.")
            chosen.update(given)
        wrong = {key: value for key, value in chosen.items() if value not in STATISTICS}
        if wrong:
            raise ConfigError(f"A baseline is 'control_task' (a property of the current word) or 'token_identity' "
                              f"(anything else); got {wrong}.")
        return chosen

    def hook_names(self, info: ModelInfo) -> tuple[str, ...]:
        return self.hooks if self.hooks is not None else default_residual_hooks(info)

    # -- streaming: the reservoir, one layer at a time ---------------------------------------------
    def hook_groups(self, info: ModelInfo) -> tuple[tuple[str, ...], ...]:
        """One group per hook: each layer's activations are gathered as its hook fires, then released."""
        return tuple((name,) for name in self.hook_names(info))

    def begin_batch(self, batch: TokenBatch) -> None:
        # an aborted batch (out of memory half way) puts the generator and the row count back
        self._snapshot = (self._rng.bit_generator.state, self._next_row)
        super().begin_batch(batch)

    def _prepare(self, batch: TokenBatch) -> None:
        """Label the batch and decide which positions enter the reservoir (this needs no activation)."""
        n_rows, n_pos = batch.shape
        rows = torch.arange(self._next_row, self._next_row + n_rows)
        self._next_row += n_rows
        labels = self.labels(batch, rows)
        for key in self.labels.keys:
            if tuple(labels[key].shape) != (n_rows, n_pos):
                raise InputError(f"The label maker gave labels {key!r} of shape {tuple(labels[key].shape)} for a "
                                 f"batch of shape {(n_rows, n_pos)}; it must give one label per position.")
        targets = torch.stack([labels[key] for key in self.labels.keys], -1).cpu()
        labelled = (batch.valid.cpu() & (targets >= 0).any(-1)).nonzero(as_tuple=True)
        self._add("labelled", (targets[labelled] >= 0).sum(0))
        priority = self._rng.random(labelled[0].numel())
        keep = bottom_k_per_key(np.concatenate([self._priority, priority]),
                                torch.cat([self._targets, targets[labelled]]).numpy() >= 0, self.max_examples)
        old, new = keep[: len(self._priority)], keep[len(self._priority):]
        entering = tuple(index[torch.from_numpy(new)] for index in labelled)
        groups = rows if self.documents is None else self._row_documents(rows)
        self._batch = {"shape": (n_rows, n_pos), "entering": entering, "old": torch.from_numpy(old),
                       "priority": priority[new], "targets": targets[entering], "types": batch.tokens.cpu()[entering],
                       "groups": groups[entering[0]], "features": {}}

    def _update(self, activations: Mapping[str, Tensor], batch: TokenBatch) -> None:
        for hook, activation in activations.items():
            staged = self._gather(hook, activation, self._batch["entering"], self._batch["shape"])
            self._batch["features"][hook] = staged

    def end_batch(self, batch: TokenBatch) -> None:
        staged = self._batch
        super().end_batch(batch)  # checks that every hook was folded (else aborts and raises)
        self._snapshot = None
        self._store(staged["old"], staged["priority"], staged["features"], staged["targets"], staged["types"],
                    staged["groups"])

    def abort_batch(self) -> None:
        snapshot = getattr(self, "_snapshot", None)
        if snapshot is not None:
            self._rng.bit_generator.state, self._next_row = snapshot
            self._snapshot = None
        super().abort_batch()

    def _clear_batch(self) -> None:
        super()._clear_batch()
        self._batch = {}

    def _row_documents(self, rows: Tensor) -> Tensor:
        assert self.documents is not None
        if int(rows.max()) >= self.documents.shape[0]:
            raise InputError(f"documents has ids for {self.documents.shape[0]} rows, but the probe is at row "
                             f"{int(rows.max())}; give one document id per row of every batch fed.")
        return self.documents[rows]

    @staticmethod
    def _gather(hook: str, activation: Tensor, index: tuple[Tensor, Tensor], shape: tuple[int, int]) -> Tensor:
        if tuple(activation.shape[:2]) != shape:
            raise InputError(f"Hook {hook} gave shape {tuple(activation.shape)}; a linear probe reads activations "
                             f"[batch pos ...] of the batch's shape {shape}. Choose residual-stream hooks.")
        return activation.reshape(shape[0], shape[1], -1)[index[0].to(activation.device),
                                                           index[1].to(activation.device)].float().cpu()

    def _store(self, old: Tensor, priority: np.ndarray, features: Mapping[str, Tensor], targets: Tensor,
               types: Tensor, groups: Tensor) -> None:
        self._priority = np.concatenate([self._priority[old.numpy()], priority])
        for hook, values in features.items():
            before = self._features.get(hook, values[:0])
            self._features[hook] = torch.cat([before[old], values])
        self._targets = torch.cat([self._targets[old], targets])
        self._types = torch.cat([self._types[old], types])
        self._groups = torch.cat([self._groups[old], groups])

    # -- state: a reservoir is not a sum -----------------------------------------------------------
    def state_dict(self) -> dict[str, Tensor]:
        raise ProbeStateError(
            "LinearProbe keeps a reservoir sample of activations, not additive sums, so its state cannot be "
            "all-reduced with a sum (probes.core.distributed). Run it in one process, or give each shard its own seed "
            "and first_row and combine the probes with probe.merge(other) (exact: bottom-k of the sampling keys)."
        )

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.state_dict()

    def merge(self, other: Probe[Any]) -> LinearProbe:
        """The probe that saw both streams: the ``max_examples`` smallest sampling keys of the union.

        Exact when the two saw disjoint data with different ``seed`` (independent keys) and
        ``first_row`` values that keep their rows' global indices apart."""
        if type(other) is not type(self):
            raise ProbeStateError(f"Can only merge a LinearProbe with a LinearProbe; got {type(other).__name__}.")
        assert isinstance(other, LinearProbe)
        per_shard = ("seed", "first_row", "documents")  # differ between shards by design
        mine = {k: v for k, v in self.settings().items() if k not in per_shard}
        if mine != {k: v for k, v in other.settings().items() if k not in per_shard}:
            raise ProbeStateError("Can only merge LinearProbes with the same labels, hooks and settings (seed aside).")
        if other.seed == self.seed:
            raise ProbeStateError(
                f"Both probes sampled with seed {self.seed}, so their sampling keys are not independent and the "
                f"merged reservoir would not be a uniform sample. Give each shard its own seed (e.g. seed=rank)."
            )
        if self._info is not None and other._info is not None and self._info != other._info:
            raise ProbeStateError(
                f"Cannot merge probes of different models ({self._info.name!r} vs {other._info.name!r}).")
        priority = np.concatenate([self._priority, other._priority])
        targets = torch.cat([self._targets, other._targets])
        keep = np.nonzero(bottom_k_per_key(priority, targets.numpy() >= 0, self.max_examples))[0]
        index = torch.from_numpy(keep)
        self._priority = priority[keep]
        for hook in set(self._features) | set(other._features):
            both = [p._features[hook] for p in (self, other) if hook in p._features]
            self._features[hook] = torch.cat(both)[index]
        self._targets = targets[index]
        self._types = torch.cat([self._types, other._types])[index]
        self._groups = torch.cat([self._groups, other._groups])[index]
        for key, value in other._state.items():
            self._add(key, value)
        self._next_row = max(self._next_row, other._next_row)
        if self._info is None:
            self._info, self._data, self._seed = other._info, other._data, other._seed
        self._activations = self._activations or other._activations
        return self

    @property
    def n_kept(self) -> int:
        """How many labelled positions the reservoir holds (at most ``max_examples`` per label key)."""
        return len(self._priority)

    # -- fitting -------------------------------------------------------------------------------------
    def _compute(self, state: Mapping[str, Tensor], info: ModelInfo, provenance: Provenance) -> LinearProbeScores:
        started = time.perf_counter()
        hooks = list(self.hook_names(info))
        fields: dict[str, dict[str, Any]] = {name: {} for name in (
            "baseline", "baseline_source", "statistic", "accuracy", "accuracy_ci", "baseline_accuracy", "gain",
            "gain_ci", "correct", "baseline_correct", "documents", "labels", "types", "majority_baseline", "n_classes",
            "n_examples", "n_documents")}
        errors = {}
        for column, key in enumerate(self.labels.keys):
            try:
                values = self._fit_key(column, key, hooks)
            except InputError as error:  # too little data for this key: NaN, the other keys still count
                log.warning("LinearProbe: no scores for %r: %s", key, error)
                errors[key] = error
                values = self._empty_key(column, key, len(hooks))
            values.update(baseline=self.baselines[key], statistic=STATISTICS[self.baselines[key]])
            for name, value in values.items():
                fields[name][key] = value
        if len(errors) == len(self.labels.keys):
            raise next(iter(errors.values()))
        return LinearProbeScores(provenance=provenance, hooks=hooks, keys=list(self.labels.keys),
                                 fit_seconds=time.perf_counter() - started, **fields)

    def _kept(self, column: int) -> np.ndarray:
        return bottom_k_per_key(self._priority, (self._targets[:, column:column + 1] >= 0).numpy(), self.max_examples)

    def _fit_key(self, column: int, key: str, hooks: list[str]) -> dict[str, Any]:
        rows = self._kept(column)
        labels = self._targets[rows, column].numpy()
        groups, types = self._groups.numpy()[rows], self._types.numpy()[rows]
        unseen = types if self.unseen_words else None
        if len(np.unique(labels)) < 2:
            raise InputError(
                f"The kept examples of {key!r} hold {len(np.unique(labels))} class(es); a probe needs at least 2. "
                f"Feed more text or choose more classes."
            )
        n_classes = self.labels.n_classes(key)
        correct = np.stack([out_of_fold_correct(self.classifier, self._features[h].numpy()[rows], labels, groups,
                                                self.n_folds, unseen) for h in hooks])
        if self.baselines[key] == "control_task":
            control = control_task_labels(types, labels, n_classes, self.control_seed)
            baseline_correct = np.stack([out_of_fold_correct(self.classifier, self._features[h].numpy()[rows], control,
                                                             groups, self.n_folds, unseen) for h in hooks])
        else:  # the better of two token-only predictors, the same for every layer
            baseline_correct, source = token_identity_correct(types, labels, groups, self.n_folds, unseen), "token id"
            if EMBEDDING_HOOK in hooks:
                embedded = correct[hooks.index(EMBEDDING_HOOK)]
                if embedded.mean() > baseline_correct.mean():
                    baseline_correct, source = embedded, EMBEDDING_HOOK
            baseline_correct = np.repeat(baseline_correct[None], len(hooks), axis=0)
        accuracy, draws = document_bootstrap(correct, groups, n_boot=self.n_boot, seed=self.seed)
        gain, gain_draws = document_bootstrap(correct.astype(np.float64) - baseline_correct, groups,
                                              n_boot=self.n_boot, seed=self.seed)
        curves = {"accuracy": accuracy, "accuracy_ci": percentile_ci(draws),
                  "baseline_accuracy": baseline_correct.mean(axis=1), "gain": gain,
                  "gain_ci": percentile_ci(gain_draws)}
        values: dict[str, Any] = {name: torch.from_numpy(np.asarray(v, dtype=np.float64)) for name, v in curves.items()}
        if self.baselines[key] == "control_task":
            source = "control task"
        values.update(correct=torch.from_numpy(correct), baseline_correct=torch.from_numpy(baseline_correct),
                      baseline_source=source,
                      documents=torch.from_numpy(groups.astype(np.int64)),
                      labels=torch.from_numpy(labels.astype(np.int64)), types=torch.from_numpy(types.astype(np.int64)),
                      majority_baseline=float(majority_correct(labels, groups, self.n_folds, unseen).mean()),
                      n_classes=n_classes, n_examples=int(rows.sum()), n_documents=len(np.unique(groups)))
        return values

    def _empty_key(self, column: int, key: str, n_hooks: int) -> dict[str, Any]:
        rows = self._kept(column)
        nan = torch.full((n_hooks,), float("nan"), dtype=torch.float64)
        none = torch.zeros(0, dtype=torch.int64)
        return {"baseline_source": "", "accuracy": nan, "accuracy_ci": nan[:, None].expand(n_hooks, 2).clone(),
                "baseline_accuracy": nan.clone(), "gain": nan.clone(),
                "gain_ci": nan[:, None].expand(n_hooks, 2).clone(),
                "correct": torch.zeros(n_hooks, 0, dtype=torch.uint8),
                "baseline_correct": torch.zeros(n_hooks, 0, dtype=torch.uint8),
                "documents": none, "labels": none.clone(), "types": none.clone(), "majority_baseline": float("nan"),
                "n_classes": self.labels.n_classes(key), "n_examples": int(rows.sum()),
                "n_documents": len(np.unique(self._groups.numpy()[rows]))}
