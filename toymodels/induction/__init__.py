"""Chen et al. (2024): in-context n-gram Markov chains, the simplified and full two-attention-layer
models, and their training.

Modules: data, model, training.
"""

from toymodels.induction.data import (
    MarkovBatch,
    MarkovConfig,
    bayes_optimal_loss,
    bayes_optimal_probs,
    sample_markov_icl,
)
from toymodels.induction.model import (
    FullInductionModel,
    SUBSET_WEIGHTS_HOOK,
    SimplifiedInductionConfig,
    SimplifiedInductionModel,
    WindowBatch,
    head_distances,
)
from toymodels.induction.training import (
    LOSSES,
    SimplifiedTraining,
    all_token_loss,
    last_token_loss,
    loss_from_probs,
    simplified_loss,
    train_on_fresh_chains,
    train_simplified,
)

__all__ = [
    "FullInductionModel", "LOSSES", "MarkovBatch", "MarkovConfig", "SUBSET_WEIGHTS_HOOK",
    "SimplifiedInductionConfig", "SimplifiedInductionModel", "SimplifiedTraining", "WindowBatch", "all_token_loss",
    "bayes_optimal_loss", "bayes_optimal_probs", "head_distances", "last_token_loss", "loss_from_probs",
    "sample_markov_icl", "simplified_loss", "train_on_fresh_chains", "train_simplified",
]
