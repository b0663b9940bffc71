"""The typed result of ``mechprobe toy induction`` (:class:`InductionResult`) and its ``summary.json`` document.

Every number the report reads is a field; the training trajectory and the generalisation rows are
typed records. :meth:`InductionResult.summary` writes the document (keys in a fixed order, the
trajectory keys only for models with a selector, the all-position losses only for the standard
model) and :meth:`InductionResult.from_summary` reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from analyses.induction.config import InductionExperimentConfig
from analyses.induction.trajectory import TRAJECTORY_KEYS
from analyses.paper_reference import PaperReference
from analyses.paper_result import PaperResult, number, optional, record_from_dict
from analyses.toy_findings import ToyFinding, toy_findings_from_dict, toy_findings_to_dict


def _numbers(document: Mapping[str, Any]) -> dict[str, float]:
    return {str(k): number(v) for k, v in document.items()}


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

    def to_dict(self) -> dict[str, list[Any]]:
        return {"step": list(self.step), **{name: list(getattr(self, name)) for name in TRAJECTORY_KEYS}}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> Trajectory:
        return record_from_dict(cls, document)


@dataclass(frozen=True)
class GeneralisationRow:
    """Last-token loss of the trained model and of the optimal estimator on chains of another ``seq_len`` /
    ``alpha``."""

    seq_len: int
    alpha: float
    loss: float
    optimal_loss: float
    gap: float

    def to_dict(self) -> dict[str, Any]:
        return {"seq_len": self.seq_len, "alpha": self.alpha, "loss": self.loss, "optimal_loss": self.optimal_loss,
                "gap": self.gap}

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> GeneralisationRow:
        return record_from_dict(cls, document)


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
    config: InductionExperimentConfig
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

    def summary(self) -> dict[str, Any]:
        """The ``summary.json`` document (non-finite numbers stay floats here; :meth:`save` writes them as null)."""
        document: dict[str, Any] = {
            "model": self.model,
            "val_loss": self.val_loss,
            "optimal_loss": self.optimal_loss,
            "loss_gap": self.loss_gap,
            "parent_share": dict(self.parent_share),
            "true_parent_subset": self.true_parent_subset,
            "true_parent_share": self.true_parent_share,
            "true_parent_share_early": self.true_parent_share_early,
            "early_step": self.early_step,
            "copier_distance": list(self.copier_distance),
            "copier_mass": [list(row) for row in self.copier_mass],
            "generalized_induction_score": self.generalized_induction_score,
            "generalized_induction_chance": self.generalized_induction_chance,
            "last_token_only_mass": self.last_token_only_mass,
            "last_token_only_chance": self.last_token_only_chance,
            "generalized_induction_head": self.generalized_induction_head,
            "parent_subset_attention": dict(self.parent_subset_attention),
            "parent_subset_chance": dict(self.parent_subset_chance),
            "parent_criterion": dict(self.parent_criterion),
            "parent_criterion_selected": self.parent_criterion_selected,
            "parent_criterion_population": dict(self.parent_criterion_population),
            "parent_criterion_population_selected": self.parent_criterion_population_selected,
            "parent_criterion_population_chains": self.parent_criterion_population_chains,
            "generalisation": [row.to_dict() for row in self.generalisation],
            "final_a": self.final_a,
            "final_train_loss": self.final_train_loss,
            "steps": self.steps,
            "settings": dataclasses.asdict(self.config),
            "trajectory": None if self.trajectory is None else self.trajectory.to_dict(),
            "reference": self.reference.to_dict(),
            "findings": toy_findings_to_dict(self.findings),
        }
        if self.trajectory is not None:
            document.update(objective=self.objective, train_loss_objective=self.train_loss_objective,
                            val_loss_objective=self.val_loss_objective,
                            a_log_growth=None if self.a_log_growth is None else dict(self.a_log_growth),
                            first_step_share_above_half=self.first_step_share_above_half)
        if self.model == "standard":
            document.update(induction_onset_step=self.induction_onset_step,
                            val_loss_all_positions=self.val_loss_all_positions,
                            optimal_loss_all_positions=self.optimal_loss_all_positions)
        return document

    @classmethod
    def from_summary(cls, document: Mapping[str, Any]) -> InductionResult:
        """The result whose :meth:`summary` is ``document`` (as read back from ``summary.json``)."""
        d = document
        trajectory = d.get("trajectory")
        growth = d.get("a_log_growth")
        reference = d["reference"]
        return cls(
            model=str(d["model"]), val_loss=number(d["val_loss"]), optimal_loss=number(d["optimal_loss"]),
            loss_gap=number(d["loss_gap"]), parent_share=_numbers(d["parent_share"]),
            true_parent_subset=str(d["true_parent_subset"]), true_parent_share=number(d["true_parent_share"]),
            true_parent_share_early=optional(d["true_parent_share_early"]), early_step=int(d["early_step"]),
            copier_distance=tuple(int(v) for v in d["copier_distance"]),
            copier_mass=tuple(tuple(number(v) for v in row) for row in d["copier_mass"]),
            generalized_induction_score=number(d["generalized_induction_score"]),
            generalized_induction_chance=number(d["generalized_induction_chance"]),
            last_token_only_mass=number(d["last_token_only_mass"]),
            last_token_only_chance=number(d["last_token_only_chance"]),
            generalized_induction_head=int(d["generalized_induction_head"]),
            parent_subset_attention=_numbers(d["parent_subset_attention"]),
            parent_subset_chance=_numbers(d["parent_subset_chance"]),
            parent_criterion=_numbers(d["parent_criterion"]),
            parent_criterion_selected=str(d["parent_criterion_selected"]),
            parent_criterion_population=_numbers(d["parent_criterion_population"]),
            parent_criterion_population_selected=str(d["parent_criterion_population_selected"]),
            parent_criterion_population_chains=int(d["parent_criterion_population_chains"]),
            generalisation=tuple(GeneralisationRow.from_dict(row) for row in d["generalisation"]),
            final_a=optional(d["final_a"]), final_train_loss=optional(d["final_train_loss"]), steps=int(d["steps"]),
            config=InductionExperimentConfig.from_settings(d["settings"]),
            trajectory=None if trajectory is None else Trajectory.from_dict(trajectory),
            reference=PaperReference.from_dict(reference), findings=toy_findings_from_dict(d.get("findings")),
            objective=optional(d.get("objective"), str), train_loss_objective=optional(d.get("train_loss_objective")),
            val_loss_objective=optional(d.get("val_loss_objective")),
            a_log_growth=(None if growth is None
                          else {k: v if k == "from_step" else number(v) for k, v in growth.items()}),
            first_step_share_above_half=optional(d.get("first_step_share_above_half"), int),
            induction_onset_step=optional(d.get("induction_onset_step"), int),
            val_loss_all_positions=optional(d.get("val_loss_all_positions")),
            optimal_loss_all_positions=optional(d.get("optimal_loss_all_positions")),
        )

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        return self.findings
