"""Synthetic data and toy models of the three papers, plus standard TransformerLens toy models.

One subpackage per paper, each with data, model and training modules: ``topic`` (Li, Li & Risteski 2023),
``scansnap`` (Tian et al. 2023; also the PyTorch tutorial transformer on WikiText and many seeds as one
batch) and ``induction`` (Chen et al. 2024). Shared: ``training`` (the training loop, checkpoints, history),
``standard`` (TransformerLens models of any shape), ``errors``.
"""

from toymodels.errors import CheckpointError, ToyConfigError, TrainingDiverged
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import Checkpointer, History, make_optimizer, train
from toymodels.topic import *  # noqa: F401,F403
from toymodels.scansnap import *  # noqa: F401,F403
from toymodels.induction import *  # noqa: F401,F403

__all__ = [
    "SUBSET_WEIGHTS_HOOK",
    "CheckpointError", "Checkpointer", "CooccurrenceConfig", "CooccurrenceData", "Documents", "FullInductionModel",
    "History", "LDAConfig", "MarkovBatch", "MarkovConfig", "MaskedDocuments", "MaskedLMData", "MaskingConfig",
    "SimplifiedInductionConfig", "SimplifiedInductionModel", "SimplifiedTraining", "StandardModelConfig",
    "ToyConfigError", "TopicModel", "TopicModelConfig", "TopicTrainingConfig", "TrainingDiverged", "TwoRateConfig",
    "YZModelConfig", "YZTransformer",
    "all_token_loss", "attention_weights", "bayes_optimal_loss", "bayes_optimal_probs", "build_standard_model",
    "last_token_loss", "make_optimizer", "make_two_rate_optimizers", "mask_documents", "masked_lm_loss",
    "parameter_groups", "query_logits", "record_attention_norms", "record_value", "sample_documents",
    "sample_markov_icl", "train", "train_on_cooccurrence", "train_on_fresh_chains", "train_simplified",
    "train_topic_model", "value_l2_penalty",
    "TutorialTransformer", "TutorialTransformerConfig", "WordLMHistory", "WordLMTrainConfig", "YZRun", "YZRunsResult",
    "basic_english", "batchify", "build_vocabulary", "encode", "sinusoidal_positions", "support_compositions",
    "train_word_lm", "train_yz_runs", "windows",
    "LOSSES", "WindowBatch", "head_distances", "loss_from_probs", "simplified_loss",
]
