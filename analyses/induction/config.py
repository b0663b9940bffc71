"""The settings of ``mechprobe toy induction`` (a frozen config composed of the toymodels configs) and its presets.

The config holds the toy models' own configs as sections rather than copies of their fields:
``data`` (:class:`~toymodels.induction.data.MarkovConfig`), ``simplified`` (the simplified / full
model, :class:`~toymodels.induction.simplified.SimplifiedInductionConfig`), ``train`` (its training,
:class:`~toymodels.induction.training.SimplifiedTraining`), ``standard`` and ``standard_train``
(the TransformerLens model, :class:`~toymodels.standard.StandardModelConfig`, and its training,
:class:`~toymodels.induction.training.FreshChainTraining`). ``--set train.lr_c=1`` sets a field of
a section (:func:`analyses.config_overrides.apply_overrides`); experiment-only settings, ``seed``
and ``device`` are top-level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from analyses.config_overrides import config_from_dict, config_sections
from analyses.series_writer import checkpoints_refusal
from mechprobe.validation import integers, one_of
from probes.core.loading import check_device
from toymodels.errors import ToyConfigError
from toymodels.induction.data import MarkovConfig
from toymodels.induction.simplified import SimplifiedInductionConfig
from toymodels.induction.training import FreshChainTraining, SimplifiedTraining
from toymodels.standard import StandardModelConfig

MODELS = ("simplified", "full", "standard")

_N_CTX = "the longest of data.seq_len and eval_seq_lens, plus 1"
DERIVED = {
    "simplified": {"n_states": "data.n_states", "n_ctx": _N_CTX, "seed": "seed", "model_name": "model"},
    "train": {"seed": "seed + 1"},
    "standard": {"n_layers": "2 (the probes read layer 2)", "d_vocab": "data.n_states", "n_ctx": _N_CTX,
                 "seed": "seed"},
    "standard_train": {"seed": "seed + 1"},
}
"""The fields of each section that the experiment fills in itself, and from what."""


MAX_ORDER = 12  # the parent-subset probe and criterion compare all 2**order - 2 subsets of the distances


@dataclass(frozen=True)
class InductionExperimentConfig:
    """Every setting of the experiment; ``mechprobe toy induction --set key=value`` overrides fields.

    ``model``: ``"simplified"`` / ``"full"`` (built from ``simplified``, trained by ``train``:
    schedule joint or staged, SGD rates ``lr_c``, ``lr_w``, ``lr_a``, ``batch_size`` 0 = full batch,
    loss ``"nll"`` or the reference code's ``"probs_as_logits"``) or ``"standard"`` (built from
    ``standard``, trained by ``standard_train``: Adam on fresh chains). ``data``: the chains;
    ``n_train`` / ``n_val`` sequences of it. The sections' ``n_states`` / ``d_vocab`` (from ``data``),
    ``n_ctx`` (the longest sequence + 1), ``seed`` (the model's: ``seed``; the training generator's:
    ``seed + 1``), ``model_name`` and the standard model's 2 layers are filled in by the experiment
    and must be left as they are. ``max_subset`` of ``simplified`` also bounds the parent subsets
    probed on any model. ``trajectory_dense_until`` / ``trajectory_per_decade`` choose the recorded
    steps; ``checkpoint_every`` > 0 saves a resumable checkpoint in ``OUT/checkpoint``; ``series_checkpoints`` > 0
    (standard model only) saves the model at step 0 and about that many log-spaced steps into ``OUT/series`` (a
    checkpoint series ``mechprobe dynamics --model OUT/series`` measures: copier and classifier per checkpoint).
    ``device`` is where the model trains and is probed (data is sampled on the CPU).
    """

    model: Literal["simplified", "full", "standard"] = "simplified"
    data: MarkovConfig = field(default_factory=MarkovConfig)
    n_train: int = 9000
    n_val: int = 1000
    simplified: SimplifiedInductionConfig = field(default_factory=SimplifiedInductionConfig)
    train: SimplifiedTraining = field(default_factory=SimplifiedTraining)
    standard: StandardModelConfig = field(default_factory=StandardModelConfig)
    standard_train: FreshChainTraining = field(default_factory=FreshChainTraining)
    eval_every: int = 100
    probe_sequences: int = 128
    eval_seq_lens: tuple[int, ...] = (50, 200)
    eval_alphas: tuple[float, ...] = (0.05, 1.0)
    early_step: int = 10
    trajectory_dense_until: int = 100
    trajectory_per_decade: int = 20
    checkpoint_every: int = 0
    series_checkpoints: int = 0
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        one_of("model", self.model, MODELS, error=ToyConfigError)
        sections = config_sections(type(self))
        for name, kind in sections.items():
            if not isinstance(getattr(self, name), kind):
                raise ToyConfigError(f"{name} must be a {kind.__name__}; got {type(getattr(self, name)).__name__}.")
        for name, fields in DERIVED.items():
            section, default = getattr(self, name), sections[name]()
            for inner, source in fields.items():
                if getattr(section, inner) != getattr(default, inner):
                    raise ToyConfigError(f"{name}.{inner} is set by the experiment from {source}; leave it at "
                                         f"{getattr(default, inner)!r} (got {getattr(section, inner)!r}).")
        integers(self, ("n_train", "n_val", "probe_sequences", "eval_every", "early_step", "trajectory_dense_until",
                        "trajectory_per_decade"), 1, error=ToyConfigError)
        integers(self, ("checkpoint_every", "series_checkpoints"), 0, error=ToyConfigError)
        if self.data.order > MAX_ORDER:
            raise ToyConfigError(f"data.order ({self.data.order}) is more than the experiment probes: its "
                                 f"parent-subset probe and criterion compare every subset of the {self.data.order} "
                                 f"distances "
                                 f"({2 ** self.data.order - 2:,}); use data.order <= {MAX_ORDER}.")
        if self.probe_sequences > self.n_val:
            raise ToyConfigError(f"probe_sequences ({self.probe_sequences}) is more than the n_val ({self.n_val}) "
                                 f"held-out chains the probes read; raise n_val or lower probe_sequences "
                                 f"(e.g. --set probe_sequences={self.n_val}).")
        if self.series_checkpoints and self.model != "standard":
            raise ToyConfigError(f"series_checkpoints saves a TransformerLens model's checkpoints; it needs "
                                 f"model='standard' (preset standard), got model={self.model!r} (whose copier is "
                                 f"planted at initialisation). Leave series_checkpoints at 0, or use --preset "
                                 f"standard without --set model=....")
        if self.series_checkpoints and self.standard_train.n_steps < 1:
            raise ToyConfigError("series_checkpoints needs standard_train.n_steps >= 1 (a series of step 0 alone is "
                                 "no series).")
        if self.series_checkpoints == 1:
            raise ToyConfigError("series_checkpoints must be 0 (no series) or >= 2 (step 0 and the last step at "
                                 "least); got 1.")
        refusal = None if not self.series_checkpoints else checkpoints_refusal(
            "series_checkpoints", self.series_checkpoints, "standard_train.n_steps", self.standard_train.n_steps)
        if refusal is not None:
            raise ToyConfigError(refusal)
        for length in self.eval_seq_lens:
            dataclasses.replace(self.data, seq_len=length)  # validates each evaluation setting
        for alpha in self.eval_alphas:
            dataclasses.replace(self.data, alpha=alpha)
        self.model_config()
        self.standard_model_config()

    def unused_settings(self) -> dict[str, str]:
        """The settings (dotted names) this config does not use, each with the reason: ``--set`` refuses them
        (:func:`analyses.config_overrides.refuse_unused`) rather than record them as if used."""
        unused = {}
        if self.model == "standard":
            unused["train"] = "the standard model trains by standard_train"
        else:
            unused["standard"] = unused["standard_train"] = f"the {self.model} model is built from simplified and " \
                                                            f"trained by train"
            if self.train.schedule == "staged":
                unused["train.n_steps"] = "the staged schedule runs train.stage_steps (c, w, a) steps"
            else:
                unused["train.stage_steps"] = "the joint schedule runs train.n_steps steps"
        return unused

    # -- what the experiment builds ----------------------------------------------------------------
    @property
    def n_ctx(self) -> int:
        """The longest input the model sees (training or evaluation) plus one."""
        return max(self.data.seq_len, *self.eval_seq_lens) + 1

    @property
    def true_parents(self) -> list[int]:
        return list(range(1, self.data.order))

    @property
    def true_heads(self) -> tuple[int, ...]:
        """The layer-1 heads initialised on a parent distance (head h starts peaked at distance h + 1)."""
        return tuple(d - 1 for d in self.true_parents if d - 1 < self.simplified.n_heads)

    def model_config(self) -> SimplifiedInductionConfig:
        """The simplified / full model's config: the ``simplified`` section with its derived fields."""
        return dataclasses.replace(self.simplified, n_states=self.data.n_states, n_ctx=self.n_ctx, seed=self.seed,
                                   model_name=f"chen-{self.model}")

    def standard_model_config(self) -> StandardModelConfig:
        """The standard model's config: the ``standard`` section with its derived fields."""
        return dataclasses.replace(self.standard, n_layers=2, d_vocab=self.data.n_states, n_ctx=self.n_ctx,
                                   seed=self.seed)

    def training(self) -> SimplifiedTraining:
        """The simplified / full model's training (its generator seeded with ``seed + 1``)."""
        return dataclasses.replace(self.train, seed=self.seed + 1)

    def standard_training(self) -> FreshChainTraining:
        """The standard model's training (its generator seeded with ``seed + 1``)."""
        return dataclasses.replace(self.standard_train, seed=self.seed + 1)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> InductionExperimentConfig:
        """The config whose ``dataclasses.asdict`` is ``settings`` (a summary's ``"settings"``; lists become tuples).

        Example: ``InductionExperimentConfig.from_settings(dataclasses.asdict(config)) == config``.
        """
        return config_from_dict(cls, settings)


# -- presets ------------------------------------------------------------------------------------
# the staged c -> w -> a schedule on the paper's data: large per-part rates from c = a = 1
_STAGED_MODEL = SimplifiedInductionConfig(n_heads=3, max_subset=2, window=8, head_windows="shared", w_plus=3.0,
                                          w_minus=0.1, c_init=1.0, a_init=1.0)
_STAGED_TRAIN = SimplifiedTraining(schedule="staged", lr_c=100.0, lr_w=10.0, lr_a=10.0, loss="nll", batch_size=0)
# the reference code's main-text run (see analyses.induction.reference.PAPER_RUN)
_PAPER_MODEL = SimplifiedInductionConfig(n_heads=3, max_subset=2, window=3, head_windows="shifted", empty_subset=True,
                                         token_subsets=True, w_plus=3.0, w_minus=0.1, c_init=0.01, a_init=0.01)
_PAPER_TRAIN = SimplifiedTraining(schedule="joint", n_steps=1000, lr_c=1.0, lr_w=1.0, lr_a=1.0,
                                  loss="probs_as_logits", batch_size=0)
_PAPER_DATA = MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1)

PRESETS: dict[str, InductionExperimentConfig] = {
    # the reference code's main-text run (joint SGD); `train.n_steps=50000` for its full length
    "paper": InductionExperimentConfig(model="simplified", data=_PAPER_DATA, n_train=9000, n_val=1000,
                                       simplified=_PAPER_MODEL, train=_PAPER_TRAIN, eval_every=100),
    # the staged c -> w -> a schedule (formerly `paper`)
    "staged": InductionExperimentConfig(model="simplified", data=_PAPER_DATA, n_train=9000, n_val=1000,
                                        simplified=_STAGED_MODEL,
                                        train=dataclasses.replace(_STAGED_TRAIN, stage_steps=(50, 50, 200))),
    # appendix B: the full model, joint SGD at the reference's lr 0.01 for 10,000 steps
    "full": InductionExperimentConfig(
        model="full", data=_PAPER_DATA, n_train=9000, n_val=1000,
        simplified=dataclasses.replace(_PAPER_MODEL, w_minus=0.01, qk_init=0.01),
        train=dataclasses.replace(_PAPER_TRAIN, lr_c=0.01, lr_w=0.01, lr_a=0.01, n_steps=10_000), eval_every=1000),
    # small and quick (the report trains it): staged, 500 chains, a sparser trajectory
    "fast": InductionExperimentConfig(model="simplified", data=_PAPER_DATA, n_train=500, n_val=500,
                                      simplified=_STAGED_MODEL,
                                      train=dataclasses.replace(_STAGED_TRAIN, stage_steps=(20, 20, 60)),
                                      probe_sequences=64, eval_seq_lens=(50, 200), eval_alphas=(0.05, 1.0),
                                      trajectory_dense_until=20, trajectory_per_decade=10),
    # a TransformerLens 2-layer model on the same data: Adam on 32 fresh chains per step
    "standard": InductionExperimentConfig(model="standard", n_train=2000, n_val=256,
                                          standard=StandardModelConfig(d_model=64, n_heads=4, attn_only=True,
                                                                       positional="standard"),
                                          standard_train=FreshChainTraining(n_steps=800, batch_size=32, lr=3e-3),
                                          eval_every=100, probe_sequences=128),
}
