"""Fitting linear probes with scikit-learn: grouped cross-validation, the control task, document bootstrap.

- :func:`default_classifier`: ``StandardScaler`` + ``LogisticRegression`` (any scikit-learn classifier
  can replace it; each fit uses a fresh ``sklearn.base.clone``).
- :func:`out_of_fold_correct`: every example is predicted once, by a classifier fitted on the other
  folds; folds are ``GroupKFold`` over documents, so no document is in a fold's train and test part
  (optionally no word type either: ``unseen``). Fits run with one BLAS/OpenMP thread
  (:func:`fitting_threads`).
- :func:`token_identity_correct`: the baseline for labels that are not a property of the current word
  (``tok[t-k]``, the document's topic, the next token): what the current token alone predicts, a
  ``CategoricalNB`` on the token id fitted on the same folds (the training folds' most frequent class of
  that token, smoothed; the prior's class for a token unseen there).
- :func:`control_task_labels`: Hewitt & Liang (2019)'s control task, the baseline for labels that are a
  property of the current word (its topic): each word type (the token at the probed position) gets a
  random class. Unlike their independent draws, the types are shuffled and cut at the real labels'
  cumulative class frequencies, so the control's class frequencies match the
  real task's (up to one type's mass) and a vocabulary of a few types cannot collapse onto one class.
- :func:`document_bootstrap`: percentile intervals that resample documents (examples of one document
  are not independent).
- :func:`held_out_best_layer`: the layer where the gain over the baseline (and over a random-weight
  model's gain, paired example by example) is highest on the even-ranked documents, measured on the
  odd-ranked ones (out-of-fold predictions, so no extra fit).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from probes.core.errors import ConfigError, InputError

FIT_THREADS = 1
"""BLAS and OpenMP threads while a probe is fitted. A fit of a few hundred examples x ``d_model`` features is
thousands of small BLAS calls (each L-BFGS step), and a second thread adds a synchronisation to each one; when
the machine is busy every synchronisation waits for the other thread's time slice. The report's linear
section spent 164 s fitting with two threads and 14 s with one on the shared 2-core machine (1,300 s and 15 s
when it was busier; ``benchmarks/linear_section_speed.py``)."""


def default_classifier() -> Any:
    """``StandardScaler`` then multinomial ``LogisticRegression`` (L2, C = 1, lbfgs, tol 1e-3, at most 1,000 iterations;
    tol 1e-3 instead of 1e-4 fits 3x faster and moved held-out accuracy by < 0.03 on MiniLM residuals)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=1000, tol=1e-3))


def make_classifier(classifier: Any | Callable[[], Any] | None) -> Any:
    """A fresh, unfitted classifier from an estimator (cloned), a factory, or None (the default)."""
    from sklearn.base import clone, is_classifier

    if classifier is None:
        return default_classifier()
    if hasattr(classifier, "get_params"):
        estimator = clone(classifier)
    elif callable(classifier):
        estimator = classifier()
    else:
        estimator = classifier
    if not hasattr(estimator, "get_params") or not is_classifier(estimator):
        raise ConfigError(
            f"classifier must be a scikit-learn classifier (or a function returning one), e.g. "
            f"LogisticRegression(C=0.1); got {type(estimator).__name__}."
        )
    return estimator


def group_folds(groups: np.ndarray, n_folds: int) -> Any:
    """``GroupKFold`` with ``min(n_folds, distinct groups)`` splits; an error below 2 groups."""
    from sklearn.model_selection import GroupKFold

    n_groups = len(np.unique(groups))
    if n_groups < 2:
        raise InputError(
            f"The labelled examples come from {n_groups} document(s); grouped cross-validation needs at least 2. "
            f"Feed more documents (sequences) or give each row its own document id."
        )
    return GroupKFold(n_splits=min(n_folds, n_groups))


@functools.cache
def _thread_pools() -> Any:
    import sklearn.linear_model  # noqa: F401  (loads scipy's BLAS and scikit-learn's OpenMP before the scan)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()  # scanning the loaded libraries takes ~10 ms, so once per process


def fitting_threads() -> Any:
    """A context in which BLAS and OpenMP run on ``FIT_THREADS`` thread(s), restored on exit (threadpoolctl).

    Example: ``with fitting_threads(): LogisticRegression().fit(features, labels)``.
    """
    return _thread_pools().limit(limits=FIT_THREADS)


def out_of_fold_correct(classifier: Any, features: np.ndarray, labels: np.ndarray, groups: np.ndarray,
                        n_folds: int, unseen: np.ndarray | None = None) -> np.ndarray:
    """1 where the out-of-fold prediction of example ``i`` equals ``labels[i]`` (uint8 [n_examples]).

    With ``unseen`` (e.g. the word type of each example), each fold's training part also drops every
    example whose ``unseen`` value occurs in its test part, so test values are never seen in training."""
    predicted = np.empty_like(labels)
    with fitting_threads():
        for train, test in group_folds(groups, n_folds).split(features, labels, groups):
            if unseen is not None:
                train = train[~np.isin(unseen[train], unseen[test])]
            if len(train) == 0:  # nothing left to learn from: count the fold as wrong
                predicted[test] = -1
                continue
            if len(np.unique(labels[train])) < 2:  # a classifier cannot be fitted on one class: predict it
                predicted[test] = labels[train][0]
                continue
            model = make_classifier(classifier)
            model.fit(features[train], labels[train])
            predicted[test] = model.predict(features[test])
    correct: np.ndarray = (predicted == labels).astype(np.uint8)
    return correct


def majority_correct(labels: np.ndarray, groups: np.ndarray, n_folds: int, unseen: np.ndarray | None = None
                     ) -> np.ndarray:
    """Out-of-fold correctness of predicting the training folds' most frequent class (``DummyClassifier``)."""
    from sklearn.dummy import DummyClassifier

    zeros = np.zeros((len(labels), 1))
    return out_of_fold_correct(DummyClassifier(strategy="most_frequent"), zeros, labels, groups, n_folds, unseen)


def token_identity_correct(types: np.ndarray, labels: np.ndarray, groups: np.ndarray, n_folds: int,
                           unseen: np.ndarray | None = None, *, smoothing: float = 0.1) -> np.ndarray:
    """Out-of-fold correctness of predicting each label from the current token alone (uint8 [n_examples]).

    ``CategoricalNB`` on one feature, the token id: for a token seen in the training folds, the class it most
    often had there (Laplace ``smoothing`` toward the class prior); for a token unseen there, the prior's most
    frequent class. Same folds as the probes (:func:`out_of_fold_correct`). Example: tokens that always carry
    the same label are predicted perfectly once seen, and a label independent of the token gives the majority rate.
    """
    from sklearn.naive_bayes import CategoricalNB

    _, codes = np.unique(types, return_inverse=True)
    estimator = CategoricalNB(alpha=smoothing, min_categories=int(codes.max()) + 1)
    return out_of_fold_correct(estimator, codes.reshape(-1, 1), labels, groups, n_folds, unseen)


def control_task_labels(word_types: np.ndarray, labels: np.ndarray, n_classes: int, seed: int) -> np.ndarray:
    """A random class per word type, with the real labels' class frequencies (see the module docstring).

    Types are shuffled (``seed``); type ``w`` whose cumulative example share spans ``[a, b)`` gets the
    class whose interval of the real labels' cumulative class frequencies holds ``(a + b) / 2``.
    Example: 3 equally frequent types and 3 balanced classes give a random bijection.
    """
    types, inverse, counts = np.unique(word_types, return_inverse=True, return_counts=True)
    order = np.random.default_rng(seed).permutation(len(types))
    mass = counts[order] / counts.sum()
    middle = np.cumsum(mass) - mass / 2
    class_edges = np.cumsum(np.bincount(labels, minlength=n_classes)) / len(labels)
    assigned = np.minimum(np.searchsorted(class_edges, middle, side="right"), n_classes - 1)
    per_type = np.empty(len(types), dtype=np.int64)
    per_type[order] = assigned
    return per_type[inverse]


def document_bootstrap(values: np.ndarray, groups: np.ndarray, *, n_boot: int, seed: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Means of ``values`` [layer, example] and their draws [n_boot, layer] resampling documents.

    Each draw picks as many documents as there are, with replacement, and averages over their examples.
    """
    _, doc = np.unique(groups, return_inverse=True)
    n_docs = int(doc.max()) + 1
    per_doc = np.stack([np.bincount(doc, weights=row, minlength=n_docs) for row in values])  # [layer, doc]
    sizes = np.bincount(doc, minlength=n_docs).astype(np.float64)
    rng = np.random.default_rng(seed)
    weights = np.stack([np.bincount(rng.integers(0, n_docs, n_docs), minlength=n_docs) for _ in range(n_boot)])
    draws = (weights @ per_doc.T) / (weights @ sizes)[:, None]
    return values.mean(axis=1), draws


def percentile_ci(draws: np.ndarray, level: float = 0.95) -> np.ndarray:
    """[layer, 2]: the percentile interval of bootstrap draws [n_boot, layer]."""
    tail = (1 - level) / 2 * 100
    return np.stack([np.percentile(draws, tail, axis=0), np.percentile(draws, 100 - tail, axis=0)], axis=-1)


def held_out_best_layer(gain: np.ndarray, groups: np.ndarray, *, control: np.ndarray | None = None, n_boot: int,
                        seed: int) -> dict[str, Any]:
    """The best layer chosen on the even-ranked documents, measured on the odd-ranked ones.

    ``gain`` [layer, example]: each example's correctness minus its baseline's (the control task's or the
    token-identity prediction's). ``control``: the same for a random-weight model on the *same* examples, so the
    two are paired. The layer maximises ``gain - max(0, control)`` (means over the even documents); on the odd
    documents it returns ``layer``, ``selection_value``, ``value`` (mean gain) and its ``ci`` (document
    bootstrap), ``control_value`` / ``control_ci`` (None without a control), ``difference`` / ``difference_ci``
    (gain minus control, paired) and ``p_value``: the share of bootstrap draws in which the model does not beat
    both the baseline and the control (gain <= 0 or gain - control <= 0), at least ``1 / (n_boot + 1)``.
    """
    _, rank = np.unique(groups, return_inverse=True)
    if rank.max() < 3:
        raise InputError(f"Choosing a layer on half of the documents needs at least 4 documents; got {rank.max() + 1}.")
    if control is not None and control.shape != gain.shape:
        raise InputError(f"The control's gains have shape {control.shape}, the model's {gain.shape}; a paired "
                         f"comparison needs the same layers and examples (probe both on the same batches and seed).")
    gain = gain.astype(np.float64)
    even, odd = rank % 2 == 0, rank % 2 == 1
    selection = gain[:, even].mean(axis=1)
    if control is not None:
        selection = selection - np.maximum(0.0, control[:, even].mean(axis=1))
    layer = int(np.argmax(selection))
    rows = [gain[layer]] if control is None else [gain[layer], control[layer], gain[layer] - control[layer]]
    means, draws = document_bootstrap(np.stack(rows)[:, odd], groups[odd], n_boot=n_boot, seed=seed)
    intervals = percentile_ci(draws)
    beaten = draws[:, 0] <= 0 if control is None else (draws[:, 0] <= 0) | (draws[:, 2] <= 0)
    p_value = max(float(beaten.mean()), 1 / (n_boot + 1))

    def pair(i: int) -> tuple[float, float]:
        return float(intervals[i, 0]), float(intervals[i, 1])

    return {"layer": layer, "selection_value": float(selection[layer]), "value": float(means[0]), "ci": pair(0),
            "control_value": None if control is None else float(means[1]),
            "control_ci": None if control is None else pair(1),
            "difference": None if control is None else float(means[2]),
            "difference_ci": None if control is None else pair(2),
            "p_value": p_value if math.isfinite(p_value) else 1.0}
