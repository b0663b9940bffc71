"""The induction toy's curves at one checkpoint (Chen et al. 2024): the layer-1 copier and the layer-2 classifier,
with the same per-batch sums, intervals and nulls as the other curves of :mod:`analyses.dynamics.measure`.

The data are the toy's held-out chains (:func:`analyses.induction.findings.held_out_chains`, the first
``probe_sequences`` of them, inputs only), the same at every checkpoint, split into ``config.n_batches`` batches:
the even batches choose the heads, the odd batches measure them and are the bootstrap's units.

- ``copier``: the attention mass of layer 1 on each parent distance ``d = 1 .. order - 1`` (the copier profile of
  :class:`~probes.attention.copier.CopierProbe`, queries ``q >= order - 1``), each distance read off the layer-1
  head that puts most mass on it in the selection batches, averaged over the distances. Null: uniform attention
  over the visible keys (``1 / (q + 1)`` per query).
- ``classifier``: the generalized induction score (:class:`~probes.attention.generalized_induction.
  GeneralizedInductionProbe`, order ``order``) of the layer-2 head that scores highest on the selection batches:
  attention on keys whose ``order - 1`` preceding states equal the query's parents. Null: its uniform-attention
  chance.

Beside them, the phases of the in-context solution (:mod:`analyses.dynamics.toy_phases`): the model's loss against
the uniform, in-context unigram and in-context bigram predictors on the measuring batches.

These are the quantities ``mechprobe toy induction`` reports as ``copier_mass`` and
``generalized_induction_score``; here they are held out (chosen on other batches) and kept per batch so that
:mod:`probes.dynamics.change_point` can find when each rises.

Example: ``measure_toy_checkpoint(model, checkpoint, DynamicsConfig(), settings).curves["copier"].value``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch
from torch import Tensor

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.curve_point import CurvePoint, mean_point
from analyses.dynamics.measure import CheckpointMeasure
from analyses.dynamics.toy_phases import phase_points
from analyses.induction.config import InductionExperimentConfig
from analyses.induction.findings import held_out_chains
from analyses.pretrained.held_out import halves
from probes import feed_probes
from probes.attention.copier import CopierProbe
from probes.attention.generalized_induction import GeneralizedInductionProbe
from probes.core.checkpoint_series import Checkpoint
from probes.core.errors import InputError
from probes.core.model_kind import HookedModel
from probes.stats.bootstrap import BatchStateRecorder


def toy_batches(settings: InductionExperimentConfig, config: DynamicsConfig) -> list[Tensor]:
    """The held-out chains (inputs) every checkpoint is measured on, in ``config.n_batches`` batches."""
    chains = held_out_chains(settings)[: settings.probe_sequences, :-1]
    if chains.shape[0] < config.n_batches:
        raise InputError(f"The toy series has {chains.shape[0]} held-out chains to probe (its "
                         f"probe_sequences); --batches {config.n_batches} needs at least as many. Give fewer "
                         f"--batches.")
    return list(chains.tensor_split(config.n_batches))


def _uniform_copier_mass(batches: Sequence[Tensor], min_query: int) -> float:
    """Uniform attention's mass on one fixed distance, per query ``q >= min_query`` (``1 / (q + 1)``)."""
    total, count = 0.0, 0
    for batch in batches:
        rows, length = batch.shape
        total += rows * sum(1.0 / (q + 1) for q in range(min_query, length))
        count += rows * max(length - min_query, 0)
    return total / count


def induction_toy_points(model: HookedModel, batches: Sequence[Tensor], settings: InductionExperimentConfig,
                         config: DynamicsConfig) -> dict[str, CurvePoint]:
    """``copier`` and ``classifier`` of ``model`` on ``batches`` (module docstring)."""
    parents = settings.true_parents
    order = settings.data.order

    def probes_() -> list:
        return [CopierProbe(max(parents)), GeneralizedInductionProbe(order)]

    selection_batches, measuring_batches = halves(batches)
    data = f"{sum(b.shape[0] for b in batches)} held-out chains of the induction toy (seed {settings.seed})"
    selection, measuring = probes_(), probes_()
    recorder = BatchStateRecorder()
    feed_probes(model, selection, selection_batches, data=data, seed=config.seed, progress=False)
    feed_probes(model, measuring, measuring_batches, data=data, seed=config.seed, progress=False, on_batch=recorder)
    copier, classifier = selection[0].compute(), selection[1].compute()
    copier_heads = [int(copier.mass[0, :, d].argmax()) for d in parents]
    layer2 = classifier.scores[-1]
    classifier_head = int(torch.nan_to_num(layer2.double(), nan=float("-inf")).argmax())
    copier_units, classifier_units = recorder.per_unit(0), recorder.per_unit(1)
    copier_mass = torch.stack([copier_units["mass"][:, 0, h, d] for h, d in zip(copier_heads, parents)]).mean(0)
    last = classifier_units["full/mass"].shape[1] - 1
    rows = classifier_units["rows_with_target"].double()
    return {
        "copier": mean_point(copier_mass.double(), copier_units["n_queries"].double(),
                             null_value=_uniform_copier_mass(measuring_batches, max(parents)), n_boot=config.n_boot,
                             seed=config.seed, head=(0, copier_heads[0])),
        "classifier": mean_point(classifier_units["full/mass"][:, last, classifier_head].double(), rows,
                                 null_value=float(classifier_units["full/chance_mass"].sum() / rows.sum()),
                                 n_boot=config.n_boot, seed=config.seed, head=(last, classifier_head)),
    }


def measure_toy_checkpoint(model: HookedModel, checkpoint: Checkpoint, config: DynamicsConfig,
                           settings: InductionExperimentConfig) -> CheckpointMeasure:
    """The induction toy's curves at ``checkpoint`` (module docstring)."""
    started = time.perf_counter()
    batches = toy_batches(settings, config)
    curves = {**induction_toy_points(model, batches, settings, config),
              **phase_points(model, halves(batches)[1], settings, config)}
    return CheckpointMeasure(checkpoint.step, checkpoint.tokens, checkpoint.spec, curves,
                             time.perf_counter() - started)
