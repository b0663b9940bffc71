"""Tian et al. (2023), Scan and Snap: co-occurrence data, the 1-layer Y/Z model and its two-rate training,
many seeds at once, and the PyTorch tutorial transformer on WikiText.

Modules: data, model, seeds, training, tutorial_transformer, word_lm.
"""

from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.scansnap.seeds import YZRun, YZRunsResult, support_compositions, train_yz_runs
from toymodels.scansnap.training import (
    TwoRateConfig,
    make_two_rate_optimizers,
    parameter_groups,
    query_logits,
    train_on_cooccurrence,
)
from toymodels.scansnap.tutorial_transformer import TutorialTransformer, TutorialTransformerConfig, sinusoidal_positions
from toymodels.scansnap.word_lm import (
    TutorialSGD,
    WordLMTrainConfig,
    basic_english,
    batchify,
    build_vocabulary,
    encode,
    train_word_lm,
    windows,
)

__all__ = [
    "CooccurrenceConfig", "CooccurrenceData", "TutorialSGD", "TutorialTransformer", "TutorialTransformerConfig",
    "TwoRateConfig", "WordLMTrainConfig", "YZModelConfig", "YZRun", "YZRunsResult", "YZTransformer",
    "basic_english", "batchify", "build_vocabulary", "encode", "make_two_rate_optimizers", "parameter_groups",
    "query_logits", "sinusoidal_positions", "support_compositions", "train_on_cooccurrence", "train_word_lm",
    "train_yz_runs", "windows",
]
