"""Synthetic data and toy models of the three papers, plus standard TransformerLens toy models.

One subpackage per paper, each with data, model and training modules: ``topic`` (Li, Li & Risteski 2023),
``scansnap`` (Tian et al. 2023; also the PyTorch tutorial transformer on WikiText and many seeds as one
batch) and ``induction`` (Chen et al. 2024). Shared: ``training`` (the training loop, checkpoints, history),
``standard`` (TransformerLens models of any shape), ``errors``.
"""

from toymodels import induction, scansnap, topic
from toymodels.errors import CheckpointError, ToyConfigError, TrainingDiverged, TrainingInterrupted
from toymodels.induction import *  # noqa: F403
from toymodels.scansnap import *  # noqa: F403
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.topic import *  # noqa: F403
from toymodels.training import Checkpointer, History, make_optimizer, train

__all__ = [
    "CheckpointError", "Checkpointer", "History", "StandardModelConfig", "ToyConfigError", "TrainingDiverged",
    "TrainingInterrupted", "build_standard_model", "make_optimizer", "train",
    *topic.__all__, *scansnap.__all__, *induction.__all__,
]
