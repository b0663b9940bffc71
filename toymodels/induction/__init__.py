"""Chen et al. (2024): in-context n-gram Markov chains, the simplified and full two-attention-layer
models, and their training.

Modules: data (the chains and the Bayes-optimal predictor), simplified (the simplified model and its
config), full (the appendix's full model), windows (window states for fast last-token predictions),
training (``train_simplified`` and ``train_on_fresh_chains``, one signature).
"""

from toymodels.induction.data import (
    MarkovBatch,
    MarkovConfig,
    bayes_optimal_loss,
    bayes_optimal_probs,
    sample_markov_icl,
)
from toymodels.induction.full import FullInductionModel
from toymodels.induction.simplified import (
    SUBSET_WEIGHTS_HOOK,
    SimplifiedInductionConfig,
    SimplifiedInductionModel,
    head_distances,
)
from toymodels.induction.training import (
    LOSSES,
    FreshChainTraining,
    SimplifiedTraining,
    all_token_loss,
    last_token_loss,
    loss_from_probs,
    simplified_loss,
    train_on_fresh_chains,
    train_simplified,
)
from toymodels.induction.windows import WindowBatch

__all__ = [
    "LOSSES", "SUBSET_WEIGHTS_HOOK", "FreshChainTraining", "FullInductionModel", "MarkovBatch", "MarkovConfig",
    "SimplifiedInductionConfig", "SimplifiedInductionModel", "SimplifiedTraining", "WindowBatch", "all_token_loss",
    "bayes_optimal_loss", "bayes_optimal_probs", "head_distances", "last_token_loss", "loss_from_probs",
    "sample_markov_icl", "simplified_loss", "train_on_fresh_chains", "train_simplified",
]
