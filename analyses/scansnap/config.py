"""Scan and Snap's experiment settings: :class:`ScanSnapConfig`, composed of the toymodels configs, and its ``PRESETS``.

``mechprobe toy scansnap --set KEY=VALUE`` overrides one setting; a dotted key sets a field of a
section (``--set train.eta_z=2``, ``--set data.num_common=5``, ``--set sweep.num_last=1,3``,
``--set wikitext.train.epochs=1``). The sections are the toymodels configs themselves
(:class:`toymodels.scansnap.data.CooccurrenceConfig`, :class:`toymodels.scansnap.training.TwoRateConfig`,
:class:`toymodels.scansnap.word_lm.WordLMTrainConfig`) and three experiment sections defined here
(the standard-model comparison, Figure 6's sweep, the WikiText run). ``seed`` is the experiment's one
seed: it drives the data, the initialisation and the evaluation sets, and the training sections get it
(their own ``seed`` stays 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from analyses.config_overrides import config_from_dict
from mechprobe.validation import fraction, integers, is_integer, one_of, positive
from probes.core.loading import check_device
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceConfig
from toymodels.scansnap.model import YZModelConfig
from toymodels.scansnap.training import TwoRateConfig
from toymodels.scansnap.word_lm import WordLMTrainConfig

DEFAULT_WIKITEXT_TRAIN = "../shared/data/wikitext-2/wiki.test.tokens"
DEFAULT_WIKITEXT_PROBE = "../shared/data/wikitext-2/wiki.valid.tokens"


@dataclass(frozen=True)
class StandardComparison:
    """The standard 1-layer attention-only TransformerLens model (no positional encoding) on the same data.

    This project's comparison (the paper has none). It trains like the main run (the ``train`` section's
    batch size and momentum, the same seed) with its own optimiser, learning rates and number of steps.
    """

    enabled: bool = True
    d_model: int = 64
    optimizer: Literal["sgd", "adam"] = "adam"
    eta_y: float = 0.01
    eta_z: float = 0.01
    n_steps: int = 200

    def __post_init__(self) -> None:
        integers(self, ("d_model",), 1, prefix="standard.", error=ToyConfigError)
        integers(self, ("n_steps",), 0, prefix="standard.", error=ToyConfigError)
        one_of("standard.optimizer", self.optimizer, ("sgd", "adam"), error=ToyConfigError)
        for name in ("eta_y", "eta_z"):
            positive(f"standard.{name}", getattr(self, name), error=ToyConfigError)

    def train_config(self, main: TwoRateConfig) -> TwoRateConfig:
        """``main`` with this model's optimiser, learning rates and number of steps."""
        return dataclasses.replace(main, eta_y=self.eta_y, eta_z=self.eta_z, optimizer=self.optimizer,
                                   n_steps=self.n_steps)


@dataclass(frozen=True)
class Figure6Sweep:
    """Figure 6's grid (:mod:`analyses.scansnap.sweep`): ``num_last`` x ``eta_z`` x ``ratio`` (eta_Y / eta_Z), ``seeds``
    runs per cell, each fact with ``num_next_per_last`` next tokens. An empty ``num_last`` runs no sweep."""

    num_last: tuple[int, ...] = ()
    num_next_per_last: int = 2
    eta_z: tuple[float, ...] = (0.5, 1.0, 2.0, 3.0)
    ratio: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0)
    seeds: int = 10
    init: Literal["zero", "linear"] = "linear"

    def __post_init__(self) -> None:
        integers(self, ("seeds", "num_next_per_last"), 1, prefix="sweep.", error=ToyConfigError)
        for name in ("eta_z", "ratio"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or not values:
                raise ToyConfigError(f"sweep.{name} must be a non-empty tuple of numbers > 0; got {values!r}.")
            for value in values:
                positive(f"sweep.{name} items", value, error=ToyConfigError)
        if not isinstance(self.num_last, tuple) or any(not is_integer(v) or v < 1
                                                        for v in self.num_last):
            raise ToyConfigError(f"sweep.num_last must hold integers >= 1 (empty = no sweep); got {self.num_last!r}.")
        one_of("sweep.init", self.init, ("zero", "linear"), error=ToyConfigError)


@dataclass(frozen=True)
class WikitextConfig:
    """The WikiText run (:mod:`analyses.scansnap.wikitext`): texts, the tutorial model's sizes, its training
    (``train``: the tutorial's SGD schedule) and the probes across training."""

    train_text: str = DEFAULT_WIKITEXT_TRAIN
    probe_text: str = DEFAULT_WIKITEXT_PROBE
    max_vocab: int | None = None
    d_model: int = 200
    d_mlp: int = 200
    n_heads: int = 1
    dropout: float = 0.2
    batch_size: int = 20
    train: WordLMTrainConfig = field(default_factory=WordLMTrainConfig)
    snapshot_every: int = 50
    probe_windows: int = 1000
    queries: int = 30
    query_rank: int = 50
    keys: int = 300
    min_cooccurrence: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.train, WordLMTrainConfig):
            raise ToyConfigError(f"wikitext.train must be a WordLMTrainConfig; got {type(self.train).__name__}.")
        integers(self, ("d_model", "d_mlp", "n_heads", "batch_size", "snapshot_every", "probe_windows", "queries",
                        "query_rank", "min_cooccurrence"), 1, prefix="wikitext.", error=ToyConfigError)
        integers(self, ("keys",), 2, prefix="wikitext.", error=ToyConfigError)
        integers(self.train, ("bptt",), 2, prefix="wikitext.train.", error=ToyConfigError)
        if self.train.max_steps is not None:
            integers(self.train, ("max_steps",), 1, prefix="wikitext.train.", error=ToyConfigError)
        if self.max_vocab is not None:
            integers(self, ("max_vocab",), 4, prefix="wikitext.", error=ToyConfigError)
        fraction("wikitext.dropout", self.dropout, open_high=True, error=ToyConfigError)
        if self.d_model % self.n_heads:
            raise ToyConfigError(f"wikitext.d_model ({self.d_model}) must be divisible by wikitext.n_heads "
                                 f"({self.n_heads}).")
        if self.max_vocab is not None and self.max_vocab < max(self.query_rank + self.queries, self.keys + 1):
            raise ToyConfigError(
                f"wikitext.max_vocab ({self.max_vocab}) must hold the query words (ranks up to "
                f"{self.query_rank + self.queries}) and the {self.keys} key words; raise it or lower "
                f"wikitext.query_rank / wikitext.queries / wikitext.keys.")


@dataclass(frozen=True)
class ScanSnapConfig:
    """Every setting of the experiment (module docstring); ``mechprobe toy scansnap --set key=value`` overrides fields.

    ``experiment`` picks the co-occurrence task (main run, standard model, optional sweep) or WikiText.
    ``init`` is the Y/Z model's initialisation (:class:`toymodels.scansnap.model.YZModelConfig`; its vocabulary
    and context come from ``data``). ``eval_sequences`` (per fact), ``snap_rate``, ``snap_patience`` and
    ``scan_tolerance`` set the measurements of the main run. ``device`` is where the models train and are
    probed (data is sampled on the CPU); ``threads`` the torch threads during the run.
    """

    experiment: Literal["cooccurrence", "wikitext"] = "cooccurrence"
    data: CooccurrenceConfig = field(default_factory=CooccurrenceConfig)
    init: Literal["zero", "linear"] = "zero"
    train: TwoRateConfig = field(default_factory=TwoRateConfig)
    eval_sequences: int = 512
    snap_rate: float = 0.01
    snap_patience: int = 10
    scan_tolerance: float = 0.05
    standard: StandardComparison = field(default_factory=StandardComparison)
    sweep: Figure6Sweep = field(default_factory=Figure6Sweep)
    wikitext: WikitextConfig = field(default_factory=WikitextConfig)
    threads: int = 1
    seed: int = 0
    device: str = "cpu"

    def __post_init__(self) -> None:
        check_device(self.device)
        one_of("experiment", self.experiment, ("cooccurrence", "wikitext"), error=ToyConfigError)
        for name, kind in (("data", CooccurrenceConfig), ("train", TwoRateConfig), ("standard", StandardComparison),
                           ("sweep", Figure6Sweep), ("wikitext", WikitextConfig)):
            if not isinstance(getattr(self, name), kind):
                raise ToyConfigError(f"ScanSnapConfig.{name} must be a {kind.__name__}; got "
                                     f"{type(getattr(self, name)).__name__}.")
        integers(self, ("eval_sequences",), 2, error=ToyConfigError)
        integers(self, ("snap_patience", "seed"), 0, error=ToyConfigError)
        integers(self, ("threads",), 1, error=ToyConfigError)
        # the library trains 0 steps (the initialisation); the experiment measures a training curve
        integers(self.train, ("n_steps",), 1, prefix="train.", error=ToyConfigError)
        fraction("snap_rate", self.snap_rate, open_low=True, open_high=True, error=ToyConfigError)
        fraction("scan_tolerance", self.scan_tolerance, open_high=True, error=ToyConfigError)
        # one seed for the whole experiment: the training sections get it when they are used
        for name, section in (("train", self.train), ("wikitext.train", self.wikitext.train)):
            if section.seed != 0:
                raise ToyConfigError(f"{name}.seed is set by the experiment from seed; leave it at 0 and set "
                                     f"seed={section.seed} instead.")
        self.model_config()

    def training(self) -> TwoRateConfig:
        """The main run's training settings, seeded with the experiment's ``seed``."""
        return dataclasses.replace(self.train, seed=self.seed)

    def wikitext_training(self) -> WordLMTrainConfig:
        """The WikiText run's training settings, seeded with the experiment's ``seed``."""
        return dataclasses.replace(self.wikitext.train, seed=self.seed)

    def model_config(self) -> YZModelConfig:
        """The Y/Z model of the main run: ``data``'s vocabulary and sequence length, ``init`` and ``seed``."""
        return YZModelConfig(d_vocab=self.data.d_vocab, n_ctx=self.data.seq_len, init=self.init, seed=self.seed)

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> ScanSnapConfig:
        """The config whose ``dataclasses.asdict`` is ``settings`` (a summary's ``"settings"``; lists become tuples).

        Example: ``ScanSnapConfig.from_settings(json.loads(text)["settings"]) == config``.
        """
        return config_from_dict(cls, settings)


PRESETS: dict[str, ScanSnapConfig] = {
    "paper": ScanSnapConfig(),
    "fast": ScanSnapConfig(eval_sequences=128, standard=StandardComparison(d_model=32, n_steps=20)),
    "adam": ScanSnapConfig(train=TwoRateConfig(optimizer="adam", eta_y=0.05, eta_z=0.05)),
    "sweep": ScanSnapConfig(sweep=Figure6Sweep(num_last=(1, 3, 5, 10))),
    "wikitext": ScanSnapConfig(experiment="wikitext", standard=StandardComparison(enabled=False)),
}
