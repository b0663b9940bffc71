"""The settings of ``mechprobe toy topic``: the config composed of the toymodels configs, and ``PRESETS``.

The config holds the toymodels' own configs rather than copies of their fields: ``lda``
(:class:`~toymodels.topic.data.LDAConfig`), ``masking``, ``data`` (the training set), ``model`` (what
every TopicModel shares) and one :class:`~toymodels.topic.training.TopicTrainingConfig` per stage
(``joint``, ``uniform``, ``fixed_value``, ``two_stage``, ``standard``). Every field can be ``--set``,
nested ones dotted: ``--set lda.n_topics=5 joint.lr=0.01 two_stage.optimizer=adam``. ``seed`` and
``device`` stay top-level: the one seed draws the training set, every stage's minibatches and the
held-out documents (a stage's own ``seed`` must stay 0).
``summary.json["settings"]`` is ``dataclasses.asdict(config)``; :meth:`TopicExperimentConfig.from_settings`
reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from analyses.config_overrides import config_from_dict
from analyses.topic.reference import topic_reference
from mechprobe.validation import at_least, integer, is_integer, one_of
from probes.core.loading import check_device
from toymodels.errors import ToyConfigError
from toymodels.topic.data import LDAConfig, MaskingConfig
from toymodels.topic.model import TopicModelConfig
from toymodels.topic.training import MaskedLMDataConfig, TopicTrainingConfig

STAGES = ("joint", "uniform", "fixed_value", "two_stage", "standard")
"""The training stages, in the order they run (``standard`` only with ``standard.n_steps > 0``)."""

FrozenValue = Literal["block_frozen", "identity_frozen"]


@dataclass(frozen=True)
class TopicModelSettings:
    """What every :class:`~toymodels.topic.model.TopicModel` of the run shares (the rest follows from ``lda``
    and the stage). ``qkv_bias`` / ``scale_scores``: the reference code's (BERT's) attention biases and
    1/sqrt(d) score scaling (off: the paper's formula)."""

    d_model: int = 64
    init_std: float = 0.01
    qkv_bias: bool = False
    scale_scores: bool = False

    def __post_init__(self) -> None:
        integer("d_model", self.d_model, 1, error=ToyConfigError)
        at_least("init_std", self.init_std, 0, error=ToyConfigError)
        for name in ("qkv_bias", "scale_scores"):
            one_of(name, getattr(self, name), (True, False), error=ToyConfigError)


def _stage(**settings: Any) -> TopicTrainingConfig:
    return TopicTrainingConfig(**{"loss": "cross_entropy", **settings})


@dataclass(frozen=True)
class TopicExperimentConfig:
    """All settings of one ``mechprobe toy topic`` run (every field can be ``--set``, nested ones dotted).

    Stages: ``joint`` (trained embeddings, claims 1 and 3), ``uniform`` (uniform attention, W_V trained;
    claim 2; its ``value_l2`` is Theorem 2's lambda), ``fixed_value`` (W_V frozen as ``frozen_value``,
    W_K and W_Q trained; claim 3), ``two_stage`` (everything trained with plain SGD; claim 4) and
    ``standard`` (a standard bidirectional TransformerLens model; ``n_steps=0`` skips it).
    ``device`` is where the models train and are probed (data is sampled on the CPU).
    """

    # data (paper: T = 10, v = 10, alpha = 0.1, N ~ U{100..150}; masking 0.15 / 80-10-10; 10,000 documents)
    lda: LDAConfig = LDAConfig()
    masking: MaskingConfig = MaskingConfig()
    data: MaskedLMDataConfig = MaskedLMDataConfig(n_documents=10_000)
    model: TopicModelSettings = TopicModelSettings()
    joint: TopicTrainingConfig = _stage(n_steps=2000, lr=1e-3, optimizer="adam")
    uniform: TopicTrainingConfig = _stage(n_steps=800, lr=1e-2, value_l2=1e-4)
    fixed_value: TopicTrainingConfig = _stage(n_steps=800, lr=1e-2)
    frozen_value: FrozenValue = "block_frozen"
    two_stage: TopicTrainingConfig = _stage(n_steps=2000, lr=10.0, optimizer="sgd")
    standard: TopicTrainingConfig = _stage(n_steps=0, lr=1e-3)
    record_every: int = 10
    eval_documents: int = 128
    checkpoints: bool = False
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        for name, kind in (("lda", LDAConfig), ("masking", MaskingConfig), ("data", MaskedLMDataConfig),
                           ("model", TopicModelSettings), *((stage, TopicTrainingConfig) for stage in STAGES)):
            if not isinstance(getattr(self, name), kind):
                raise ToyConfigError(f"{name} must be a {kind.__name__}; got {type(getattr(self, name)).__name__}.")
        for stage in STAGES:
            if getattr(self, stage).seed != 0:
                raise ToyConfigError(
                    f"{stage}.seed must stay 0: every stage draws its minibatches from the experiment's seed. "
                    f"Set seed={getattr(self, stage).seed} instead.")
        one_of("frozen_value", self.frozen_value, ("block_frozen", "identity_frozen"), error=ToyConfigError)
        integer("record_every", self.record_every, 1, error=ToyConfigError)
        integer("eval_documents", self.eval_documents, 1, error=ToyConfigError)
        if not is_integer(self.seed):
            raise ToyConfigError(f"seed must be an integer; got {self.seed!r}.")
        one_of("checkpoints", self.checkpoints, (True, False), error=ToyConfigError)
        self.model_config()

    def training(self, stage: str) -> TopicTrainingConfig:
        """The training settings of ``stage`` (one of :data:`STAGES`), seeded with the experiment's seed."""
        one_of("stage", stage, STAGES, error=ToyConfigError)
        return dataclasses.replace(getattr(self, stage), seed=self.seed)

    def model_config(self, **variant: Any) -> TopicModelConfig:
        """The :class:`TopicModelConfig` of a model of this run; ``variant`` picks the frozen parts."""
        lda = self.lda
        return TopicModelConfig(d_vocab=lda.vocab_size, n_words=lda.n_words, pad_id=lda.pad_id,
                                d_model=self.model.d_model, n_ctx=lda.max_len, words_per_topic=lda.words_per_topic,
                                init_std=self.model.init_std, qkv_bias=self.model.qkv_bias,
                                scale_scores=self.model.scale_scores, seed=self.seed, **variant)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> TopicExperimentConfig:
        """The config whose ``dataclasses.asdict`` is ``settings`` (a summary's ``"settings"``).

        Example: ``TopicExperimentConfig.from_settings(dataclasses.asdict(PRESETS["fast"])) == PRESETS["fast"]``.
        """
        return config_from_dict(cls, settings)


def _fast() -> TopicExperimentConfig:
    paper = TopicExperimentConfig()
    steps = {"joint": 400, "uniform": 150, "fixed_value": 200, "two_stage": 400, "standard": paper.standard.n_steps}
    return TopicExperimentConfig(
        lda=dataclasses.replace(paper.lda, min_len=40, max_len=60),
        data=dataclasses.replace(paper.data, n_documents=2048),
        **{stage: dataclasses.replace(getattr(paper, stage), n_steps=n, batch_size=32) for stage, n in steps.items()},
        eval_documents=64,
    )


PRESETS: dict[str, TopicExperimentConfig] = {
    "paper": TopicExperimentConfig(),
    "fast": _fast(),
}

PRESET_REFERENCES = {name: topic_reference(config) for name, config in PRESETS.items()}
"""What each preset reproduces of the paper and where it differs (``summary.json["reference"]``)."""
