"""What a toy preset reproduces: the paper, the figure, and the deviations that remain.

Every toy preset's ``summary.json`` carries ``"reference"``: a :class:`PaperReference` (its fields) so a
reader comparing a run with a published figure knows which figure it is and where the run differs
(including where the paper's text and its reference code disagree, and which one was followed).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PaperReference:
    """The published experiment a preset reproduces.

    ``paper``: short citation (authors, year, title). ``experiment``: the figure, table or section.
    ``deviations``: each remaining difference from the paper, one sentence each (empty: none known).
    ``followed``: where paper text and reference code differ, which one this preset follows and why.
    """

    paper: str
    experiment: str
    deviations: tuple[str, ...] = ()
    followed: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.paper.strip() or not self.experiment.strip():
            raise ValueError("PaperReference needs a paper and an experiment (figure, table or section).")
        for text in (*self.deviations, *self.followed):
            if not isinstance(text, str) or not text.strip():
                raise ValueError("PaperReference deviations and followed notes must be non-empty strings.")


TIAN_2023 = "Tian, Wang, Chen, Du 2023, Scan and Snap: Understanding Training Dynamics and Token Composition in " \
            "1-layer Transformer"
CHEN_2024 = "Chen, Sheen, Wang, Yang 2024, Unveiling Induction Heads: Provable Training Dynamics and Feature " \
            "Learning in Transformers"
LI_2023 = "Li, Li, Risteski 2023, How Do Transformers Learn Topic Structure: Towards a Mechanistic Understanding"
