"""The typed result of ``mechprobe toy induction`` (:class:`InductionResult`) and its ``summary.json`` document.

Every number the report reads is a field; the training trajectory and the generalisation rows are
typed records. The fields are the document (:mod:`mechprobe.records`): ``config`` is written as
``"settings"``; the trajectory fields are None for the standard model, the all-position losses None for
every other model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from analyses.induction.config import InductionExperimentConfig
from analyses.paper_reference import PaperReference
from analyses.paper_result import PaperResult
from analyses.toy_findings import ToyFinding
from mechprobe.records import key


@dataclass(frozen=True)
class Trajectory:
    """Values at the recorded training steps (step 0 = initialisation): the true-parent share, ``a`` and the
    last-token losses (the training objective ``train_loss`` / ``val_loss``, the NLL ``train_nll`` / ``val_nll``)."""

    step: tuple[int, ...]
    true_parent_share: tuple[float, ...]
    a: tuple[float, ...]
    train_loss: tuple[float, ...]
    val_loss: tuple[float, ...]
    train_nll: tuple[float, ...]
    val_nll: tuple[float, ...]


@dataclass(frozen=True)
class GeneralisationRow:
    """Last-token loss of the trained model and of the optimal estimator on chains of another ``seq_len`` /
    ``alpha``."""

    seq_len: int
    alpha: float
    loss: float
    optimal_loss: float
    gap: float


@dataclass(frozen=True)
class InductionResult(PaperResult):
    """What ``mechprobe toy induction`` found (see :mod:`analyses.induction.experiment` for the definitions).

    Losses are last-token NLLs in nats. ``parent_share``: the selector share of each subset of layer-1
    heads (simplified / full model) or the best layer-2 head's excess attention on keys matching each
    parent subset (standard model). ``copier_distance`` / ``copier_mass``: each layer-1 head's most
    attended relative distance and its attention mass by distance. ``trajectory`` and the fields after it
    that need a selector are None for the standard model; the three all-position fields are None
    except for the standard model. ``findings``: the toy's findings over its seeds, each judged against the
    toy at initialisation (:mod:`analyses.induction.findings`).
    """

    experiment: ClassVar[str] = "induction"

    model: str
    val_loss: float
    optimal_loss: float
    loss_gap: float
    parent_share: Mapping[str, float]
    true_parent_subset: str
    true_parent_share: float
    true_parent_share_early: float | None
    early_step: int
    copier_distance: tuple[int, ...]
    copier_mass: tuple[tuple[float, ...], ...]
    generalized_induction_score: float
    generalized_induction_chance: float
    last_token_only_mass: float
    last_token_only_chance: float
    generalized_induction_head: int
    parent_subset_attention: Mapping[str, float]
    parent_subset_chance: Mapping[str, float]
    parent_criterion: Mapping[str, float]
    parent_criterion_selected: str
    parent_criterion_population: Mapping[str, float]
    parent_criterion_population_selected: str
    parent_criterion_population_chains: int
    generalisation: tuple[GeneralisationRow, ...]
    final_a: float | None
    final_train_loss: float | None
    steps: int
    config: InductionExperimentConfig = field(metadata=key("settings"))
    trajectory: Trajectory | None
    reference: PaperReference
    findings: Mapping[str, ToyFinding]
    objective: str | None = None
    train_loss_objective: float | None = None
    val_loss_objective: float | None = None
    a_log_growth: Mapping[str, float] | None = None
    first_step_share_above_half: int | None = None
    induction_onset_step: int | None = None
    val_loss_all_positions: float | None = None
    optimal_loss_all_positions: float | None = None

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        return self.findings
