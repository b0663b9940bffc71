"""Phases of the in-context solution on the induction toy's series: the model's next-token loss beside the loss of
three predictors that read only the sequence so far (Edelman et al. 2024, "The evolution of statistical induction
heads": a model trained on in-context Markov chains passes them in turn).

On the held-out chains the toy's series is measured on (the measuring batches of
:mod:`analyses.dynamics.toy_measure`, so these curves' bootstrap draws pair with the copier's and the
classifier's), at every position ``q >= 1`` (the token after ``q`` predicted from ``x_0 .. x_q``, as the toy is
trained), the curves are the baselines' loss minus the model's (nats per token):

- ``beats_uniform``: ``log S`` (every state equally likely);
- ``beats_unigram``: the in-context unigram (the counts of each state so far, add-``alpha`` smoothed);
- ``beats_bigram``: the in-context bigram (the counts of what followed the current state so far, add-``alpha``),
  :func:`toymodels.induction.data.in_context_ngram_probs` with ``alpha`` the chains' Dirichlet concentration (with
  ``n`` = the chains' order that estimator is the Bayes-optimal predictor, which no model beats on average).

Each curve's event (:mod:`analyses.dynamics.events`) is the step from which on the model's loss stays below that
baseline's (the curve passes 0 for good, :func:`probes.dynamics.change_point.change_point` with ``crossing=0``). Null:
0 (the model no better than the baseline); control: the first checkpoint (the toy at initialisation predicts about
uniformly, so its gains are at most about 0 and it has no event).

Example: ``phase_points(model, measuring_batches, settings, config)["beats_bigram"].value``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.curve_point import CurvePoint
from analyses.dynamics.measure import difference_point
from analyses.induction.config import InductionExperimentConfig
from mechprobe import forward
from probes.core.model_kind import HookedModel
from toymodels.induction.data import in_context_ngram_probs

PHASE_BASELINES = {"beats_uniform": None, "beats_unigram": 1, "beats_bigram": 2}
"""Each phase curve's baseline: the in-context n-gram's ``n`` (None: uniform)."""


def _nll_sums(log_probs: Tensor, chains: Tensor) -> tuple[float, float]:
    """Summed NLL of ``chains[:, 1:]`` under ``log_probs[:, :-1]`` (row ``q`` predicts token ``q + 1``), count."""
    targets = chains[:, 1:]
    nll = -log_probs[:, :-1].gather(-1, targets[..., None])[..., 0]
    return float(nll.sum()), float(targets.numel())


def baseline_sums(chains: Tensor, settings: InductionExperimentConfig, n: int | None) -> tuple[float, float]:
    """The baseline's summed NLL over ``chains``' positions ``1 ..`` and their count (module docstring)."""
    data = settings.data
    if n is None:
        count = float(chains[:, 1:].numel())
        return count * math.log(data.n_states), count
    return _nll_sums(in_context_ngram_probs(chains, n, data.n_states, data.alpha).log(), chains)


def phase_points(model: HookedModel, batches: Sequence[Tensor], settings: InductionExperimentConfig,
                 config: DynamicsConfig) -> dict[str, CurvePoint]:
    """``beats_uniform``, ``beats_unigram`` and ``beats_bigram`` of ``model`` on ``batches`` (module docstring)."""
    model_sums = []
    for chains in batches:
        logits = forward.run(model, chains)
        model_sums.append(_nll_sums(torch.log_softmax(logits.double().cpu(), -1), chains.cpu()))
    return {curve: difference_point([baseline_sums(chains.cpu(), settings, n) for chains in batches], model_sums,
                                    n_boot=config.n_boot, seed=config.seed)
            for curve, n in PHASE_BASELINES.items()}
