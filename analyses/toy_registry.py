"""The paper toys, one typed record each (:class:`ToySpec`), from which every table of toys derives: the names
``mechprobe toy`` takes and the report trains (:func:`toy_names`), the model classes a toy folder saves, the
linear-probe target of a toy folder, which toy carries each finding, and (through the lazily imported module
paths) each toy's experiment and config class.

The records sit at the bottom of ``analyses`` (they import only ``toymodels``): the toy packages
(``analyses/<name>/``) sit above, so a record names its experiment and config by module path, and
:func:`analyses.experiments.toy_experiment` imports the experiment when it is needed.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from probes.core.errors import ConfigError
from toymodels.induction import FullInductionModel, SimplifiedInductionConfig, SimplifiedInductionModel
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.topic.model import TopicModel, TopicModelConfig


@dataclass(frozen=True)
class ToySpec:
    """One paper toy.

    ``name``: ``mechprobe toy NAME``; ``paper``: whose experiment it reproduces (the CLI's help); ``experiment``:
    the module (``analyses.<name>.experiment``) holding ``PRESETS``, ``run``, ``result_from_summary`` and
    ``seed_findings`` (:class:`analyses.experiments.ToyExperiment`); ``config``: the experiment's config class as
    ``module:Class``; ``models``: each hooked model class it saves into a toy folder, with that model's config class
    (``model.json``: :mod:`analyses.toy_model_store`); ``probe_target``: the ``probe-linear --target`` a folder of
    this toy takes; ``findings``: the names of the findings it carries (pretrained ones it is the toy side of, and
    its paper's own)."""

    name: str
    paper: str
    experiment: str
    config: str
    models: tuple[tuple[type, type], ...]
    probe_target: str
    findings: tuple[str, ...]

    def config_class(self) -> type:
        """The experiment's config class (imported on first use)."""
        module, _, name = self.config.partition(":")
        found: type = getattr(importlib.import_module(module), name)
        return found


TOYS: tuple[ToySpec, ...] = (
    ToySpec("topic", paper="Li et al. 2023", experiment="analyses.topic.experiment",
            config="analyses.topic.config:TopicExperimentConfig",
            models=((TopicModel, TopicModelConfig),), probe_target="topic",
            findings=("topic_attention_mean", "topic_attention_best_head", "embedding_topic_similarity",
                      "value_block_structure", "topic_heads_causal", "value_before_key_query")),
    ToySpec("scansnap", paper="Tian et al. 2023", experiment="analyses.scansnap.experiment",
            config="analyses.scansnap.config:ScanSnapConfig",
            models=((YZTransformer, YZModelConfig),), probe_target="next",
            findings=("cooccurrence_ordering", "scan_order", "scansnap_attention_causal", "scan_before_snap")),
    ToySpec("induction", paper="Chen et al. 2024", experiment="analyses.induction.experiment",
            config="analyses.induction.config:InductionExperimentConfig",
            models=((SimplifiedInductionModel, SimplifiedInductionConfig), (FullInductionModel,
                                                                           SimplifiedInductionConfig)),
            probe_target="parent",
            findings=("induction_protocol", "induction_text", "previous_token_text", "generalized_induction",
                      "previous_token_causal")),
)
"""Every toy, in the order the report trains them and the CLI names them."""



def toys() -> tuple[ToySpec, ...]:
    """:data:`TOYS`, read when called (what the CLI and the linear probes ask, so a toy added to the table at run
    time is seen; the tables built on import, such as the model classes, read :data:`TOYS` itself)."""
    return TOYS


def toy_names() -> tuple[str, ...]:
    """The toys' names, in the order of :data:`TOYS`."""
    return tuple(spec.name for spec in toys())


def toy_spec(name: str) -> ToySpec:
    """The record of toy ``name``; :class:`ConfigError` naming the toys for any other name."""
    for spec in toys():
        if spec.name == name:
            return spec
    raise ConfigError(f"Unknown toy experiment {name!r}; choose from {', '.join(toy_names())}.")
