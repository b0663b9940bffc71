"""What ``mechprobe report`` trains, reads and probes (:class:`ReportConfig`), and the settings a finished report
records (:class:`ReportSettings`, ``summary.json["settings"]``: the config and where each model's weights came
from)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from analyses.pretrained.measure import PretrainedConfig
from analyses.pretrained.settled import SettleConfig
from analyses.report.linear_section import LinearReportConfig
from analyses.toy_registry import toy_names
from mechprobe.validation import integer
from probes.core.errors import ConfigError
from probes.text.topics import LdaTopicConfig


@dataclass(frozen=True)
class ReportConfig:
    """What the report trains, reads and probes (the offline defaults need no network)."""

    models: tuple[str, ...] = ("smollm2-135m", "minilm-l6")
    corpus: str = "wikipedia-excerpt"
    text_column: str = "text"
    toys: tuple[str, ...] = field(default_factory=toy_names)
    toy_preset: str = "fast"
    toy_seeds: int = 5
    max_documents: int = 5000  # the excerpt has 4,544 paragraphs of >= 200 characters: all of them
    min_chars: int = 200
    topics: LdaTopicConfig = field(default_factory=LdaTopicConfig)
    pretrained: PretrainedConfig = field(default_factory=PretrainedConfig)
    linear: LinearReportConfig = field(default_factory=LinearReportConfig)
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    series: tuple[str, ...] = ()
    """Checkpoint series (``mechprobe dynamics --model`` specs) measured into a "Dynamics" section; none: no
    section."""
    settle: SettleConfig = field(default_factory=SettleConfig)
    """``--settle``: rounds of fresh text for each pretrained model's inconclusive findings
    (:mod:`analyses.pretrained.settle`); off: the fixed-sample report."""

    def __post_init__(self) -> None:
        unknown = [t for t in self.toys if t not in toy_names()]
        if unknown:
            raise ConfigError(f"Unknown toy settings {unknown}; choose from {', '.join(toy_names())}.")
        if not self.models and not self.toys and not self.series:
            raise ConfigError("The report needs at least one pretrained model, one toy setting or one --series.")
        integer("toy_seeds", self.toy_seeds, 1)
        if self.corpus in self.settle.corpora:
            raise ConfigError(f"--corpus {self.corpus} is named twice: each corpus is read once (text is never read "
                              f"again); name it once.")
        if self.max_documents < 2 or self.min_chars < 1:
            raise ConfigError(
                f"max_documents must be >= 2 and min_chars >= 1; got {self.max_documents}, {self.min_chars}."
            )

    @classmethod
    def fast(cls, **changes: Any) -> ReportConfig:
        """Less text: 2,000 paragraphs and 8 batches per model. The head ablations (100 draws each on a decoder and its
        control) are not reduced and take most of the time: with SmolLM2 the report takes about as long as the
        defaults (``report --fast`` on one CPU thread, 2026-11-28: 290 s, of which SmolLM2 213 s and its ablations
        and circuit edge 152 s)."""
        base = cls(max_documents=2000, pretrained=PretrainedConfig(max_batches=8))
        return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class ReportSettings(ReportConfig):
    """A finished report's settings: its :class:`ReportConfig` and ``model_weights`` (each model spec -> the
    weights it loaded), written flat as ``summary.json["settings"]``."""

    model_weights: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, config: ReportConfig, model_weights: Mapping[str, str]) -> ReportSettings:
        """``config`` with the weights each of its models loaded."""
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
        return cls(**values, model_weights=dict(model_weights))
