"""The typed result of ``mechprobe toy topic``: :class:`TopicResult` (every number the report reads, the claims,
the two-stage dynamics, the histories) and its ``summary.json`` document.

``TopicResult.summary()`` is the document ``run`` has always written (same keys, same nesting; numbers
that are not finite become ``null`` through :meth:`~analyses.paper_result.PaperResult.save`), and
:meth:`TopicResult.from_summary` reads it back. ``save`` also writes each training history as
``history_{stage}.json`` and ``load`` reads them back (histories are not part of the summary, so they
take no part in ``==``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from analyses.paper_reference import PaperReference
from analyses.paper_result import Claim, PaperResult, claims_from_dict, claims_to_dict, number, record_from_dict
from analyses.topic.config import TopicExperimentConfig
from analyses.toy_findings import ToyFinding, toy_findings_from_dict, toy_findings_to_dict
from probes.dynamics.block_structure import BlockStructure
from probes.dynamics.two_stage import NormEvents
from toymodels.training import History


def _step(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class AttentionNumbers:
    """Topic and same-token attention of one model's only head on held-out documents.

    ``same_token_attention`` counts the query's own position (as the reference code does),
    ``same_token_attention_other_positions`` only other positions holding the same token.
    """

    same_topic_attention: float
    different_topic_attention: float
    same_token_attention: float
    same_token_attention_self: float
    same_token_attention_other_positions: float
    same_token_chance_attention: float
    attention_ratio: float
    chance_attention: float
    chance_ratio: float

    def to_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> AttentionNumbers:
        return record_from_dict(cls, document)


@dataclass(frozen=True)
class TwoStageNumbers:
    """Claim 4: when ||W_V|| moves and plateaus, when ||W_K||, ||W_Q|| move (steps, or None), and how far
    the W_K/W_Q change had got when W_V plateaued (0 = fully separated stages)."""

    wv_moves_at: int | None
    wv_plateaus_at: int | None
    wkq_moves_at: int | None
    wkq_progress_at_wv_plateau: float
    separated: bool
    norms: Mapping[str, NormEvents]
    final_attention_ratio: float

    def to_dict(self) -> dict[str, Any]:
        document = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        document["norms"] = {name: dataclasses.asdict(events) for name, events in self.norms.items()}
        return document

    @classmethod
    def from_dict(cls, document: Mapping[str, Any]) -> TwoStageNumbers:
        norms = {name: NormEvents(number(e["start"]), number(e["final"]), number(e["change"]), _step(e["moves_at"]),
                                  _step(e["plateaus_at"])) for name, e in document["norms"].items()}
        return cls(_step(document["wv_moves_at"]), _step(document["wv_plateaus_at"]), _step(document["wkq_moves_at"]),
                   number(document["wkq_progress_at_wv_plateau"]), bool(document["separated"]), norms,
                   number(document["final_attention_ratio"]))


def _block_from_dict(document: Mapping[str, Any]) -> BlockStructure:
    unknown = sorted(set(document) - {f.name for f in dataclasses.fields(BlockStructure)})
    if unknown:
        raise TypeError(f"BlockStructure has no fields {unknown}.")
    return BlockStructure(
        number(document["score"]), number(document["mass_fraction"]), number(document["chance_fraction"]),
        number(document["within_mean"]), number(document["between_mean"]), number(document["separation"]),
        int(document["n_within"]), int(document["n_between"]), bool(document.get("centred", False)))


# the scores of W_V (claim 2) after wv_block, in summary order
_VALUE_SCORES = ("wv_block_score_uncentred", "wv_block_score_ceiling", "wv_block_score_trained_decoder",
                 "decoder_wv_block_score_trained_decoder")
_EMBEDDING = ("embedding_same_topic_cosine", "embedding_different_topic_cosine", "embedding_same_topic_dot",
              "embedding_different_topic_dot", "embedding_gram_block_score")


@dataclass(frozen=True)
class TopicResult(PaperResult):
    """Everything ``mechprobe toy topic`` measured. The first nine fields are the jointly trained model's
    :class:`AttentionNumbers` (``result.attention_ratio``, ``result.chance_ratio``, ...; :meth:`joint_attention`).

    ``findings``: the toy findings in the pretrained schema, judged over the seeds measured (``config.seed``
    after ``run``; :mod:`analyses.topic.findings`, :mod:`analyses.toy_findings`); ``config``: the run's
    settings (``summary.json["settings"]`` is its ``dataclasses.asdict``); ``figures``: the file names of the
    figures.
    """

    experiment: ClassVar[str] = "topic"

    same_topic_attention: float
    different_topic_attention: float
    same_token_attention: float
    same_token_attention_self: float
    same_token_attention_other_positions: float
    same_token_chance_attention: float
    attention_ratio: float
    chance_attention: float
    chance_ratio: float
    masked_documents_attention_ratio: float
    embedding_same_topic_cosine: float
    embedding_different_topic_cosine: float
    embedding_same_topic_dot: float
    embedding_different_topic_dot: float
    embedding_gram_block_score: float
    findings: Mapping[str, ToyFinding]
    wv_block_score: float
    wv_block: BlockStructure
    wv_block_score_uncentred: float
    wv_block_score_ceiling: float
    wv_block_score_trained_decoder: float
    decoder_wv_block_score_trained_decoder: float
    fixed_value_attention: AttentionNumbers
    two_stage: TwoStageNumbers
    standard_model: AttentionNumbers | None
    claims: tuple[Claim, ...]
    reference: PaperReference
    config: TopicExperimentConfig
    figures: tuple[str, ...]
    histories: Mapping[str, History] = field(default_factory=dict, compare=False)

    def joint_attention(self) -> AttentionNumbers:
        """The jointly trained model's attention numbers (the first nine fields) as one record."""
        return AttentionNumbers(**{f.name: getattr(self, f.name) for f in dataclasses.fields(AttentionNumbers)})

    def claim(self, name: str) -> Claim:
        """The claim called ``name`` (e.g. ``"4_two_stage_dynamics"``)."""
        for claim in self.claims:
            if claim.name == name:
                return claim
        raise KeyError(f"{name!r} is not a claim of the topic experiment; it has {[c.name for c in self.claims]}.")

    def summary(self) -> dict[str, Any]:
        document: dict[str, Any] = self.joint_attention().to_dict()
        document["masked_documents_attention_ratio"] = self.masked_documents_attention_ratio
        document.update({name: getattr(self, name) for name in _EMBEDDING})
        document["findings"] = toy_findings_to_dict(self.findings)
        document["wv_block_score"] = self.wv_block_score
        document["wv_block"] = self.wv_block.to_dict()
        document.update({name: getattr(self, name) for name in _VALUE_SCORES})
        document["fixed_value_attention"] = self.fixed_value_attention.to_dict()
        document["two_stage"] = self.two_stage.to_dict()
        if self.standard_model is not None:
            document["standard_model"] = self.standard_model.to_dict()
        document["claims"] = claims_to_dict(self.claims)
        document["reference"] = self.reference.to_dict()
        document["settings"] = dataclasses.asdict(self.config)
        document["figures"] = list(self.figures)
        return document

    @classmethod
    def from_summary(cls, document: Mapping[str, Any]) -> TopicResult:
        attention = AttentionNumbers.from_dict(document)
        standard = document.get("standard_model")
        reference = document["reference"]

        def score(name: str) -> float:
            return number(document[name])

        return cls(
            **dataclasses.asdict(attention),
            masked_documents_attention_ratio=score("masked_documents_attention_ratio"),
            embedding_same_topic_cosine=score("embedding_same_topic_cosine"),
            embedding_different_topic_cosine=score("embedding_different_topic_cosine"),
            embedding_same_topic_dot=score("embedding_same_topic_dot"),
            embedding_different_topic_dot=score("embedding_different_topic_dot"),
            embedding_gram_block_score=score("embedding_gram_block_score"),
            findings=toy_findings_from_dict(document["findings"]),
            wv_block_score=score("wv_block_score"),
            wv_block=_block_from_dict(document["wv_block"]),
            wv_block_score_uncentred=score("wv_block_score_uncentred"),
            wv_block_score_ceiling=score("wv_block_score_ceiling"),
            wv_block_score_trained_decoder=score("wv_block_score_trained_decoder"),
            decoder_wv_block_score_trained_decoder=score("decoder_wv_block_score_trained_decoder"),
            fixed_value_attention=AttentionNumbers.from_dict(document["fixed_value_attention"]),
            two_stage=TwoStageNumbers.from_dict(document["two_stage"]),
            standard_model=None if standard is None else AttentionNumbers.from_dict(standard),
            claims=claims_from_dict(document["claims"]),
            reference=PaperReference.from_dict(reference),
            config=TopicExperimentConfig.from_settings(document["settings"]),
            figures=tuple(document["figures"]),
        )

    def toy_findings(self) -> Mapping[str, ToyFinding]:
        return self.findings

    def save(self, folder: str | Path) -> Path:
        """Write ``folder/summary.json`` and each history as ``folder/history_{name}.json``; return the first."""
        path = super().save(folder)
        for name, history in self.histories.items():
            history.save(Path(folder) / f"history_{name}.json")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> TopicResult:
        """The result saved in ``folder``, with the histories found there."""
        result = super().load(folder)
        histories = {path.stem.removeprefix("history_"): History.load(path)
                     for path in sorted(Path(folder).glob("history_*.json"))}
        return dataclasses.replace(result, histories=histories)
