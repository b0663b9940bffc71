"""The typed result of ``mechprobe toy topic``: :class:`TopicResult` (every number the report reads, the claims,
the two-stage dynamics, the histories) and its ``summary.json`` document.

The fields are the ``summary.json`` document (:mod:`mechprobe.records`; ``config`` is written as
``"settings"``). ``save`` also writes each training history as ``history_{stage}.json`` and ``load``
reads them back (histories are not part of the summary, so they take no part in ``==``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from analyses.paper_reference import PaperReference
from analyses.paper_result import Claim, PaperResult
from analyses.topic.config import TopicExperimentConfig
from analyses.toy_findings import ToyFinding
from mechprobe.records import UNSAVED_FIELD, key
from probes.dynamics.block_structure import BlockStructure
from probes.dynamics.two_stage import NormEvents
from toymodels.training import History


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
    config: TopicExperimentConfig = field(metadata=key("settings"))
    figures: tuple[str, ...]
    histories: Mapping[str, History] = field(default_factory=dict, compare=False, metadata=UNSAVED_FIELD)

    def joint_attention(self) -> AttentionNumbers:
        """The jointly trained model's attention numbers (the first nine fields) as one record."""
        return AttentionNumbers(**{f.name: getattr(self, f.name) for f in dataclasses.fields(AttentionNumbers)})

    def claim(self, name: str) -> Claim:
        """The claim called ``name`` (e.g. ``"4_two_stage_dynamics"``)."""
        for claim in self.claims:
            if claim.name == name:
                return claim
        raise KeyError(f"{name!r} is not a claim of the topic experiment; it has {[c.name for c in self.claims]}.")

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
