"""Synthetic data and toy models of the three papers, plus standard TransformerLens toy models.

Modules: lda_data, topic_model, topic_training (Li, Li & Risteski 2023); cooccurrence_data,
scansnap_model, scansnap_training (Tian et al. 2023); markov_data, induction_models,
induction_training (Chen et al. 2024); standard (boot_native models); training (the shared loop).
"""

from toymodels.cooccurrence_data import CooccurrenceConfig, CooccurrenceData
from toymodels.errors import CheckpointError, ToyConfigError, TrainingDiverged
from toymodels.induction_models import (
    SUBSET_WEIGHTS_HOOK,
    FullInductionModel,
    SimplifiedInductionConfig,
    SimplifiedInductionModel,
)
from toymodels.induction_training import (
    SimplifiedTraining,
    all_token_loss,
    last_token_loss,
    train_on_fresh_chains,
    train_simplified,
)
from toymodels.lda_data import Documents, LDAConfig, MaskedDocuments, MaskingConfig, mask_documents, sample_documents
from toymodels.markov_data import MarkovBatch, MarkovConfig, bayes_optimal_loss, bayes_optimal_probs, sample_markov_icl
from toymodels.scansnap_model import YZModelConfig, YZTransformer
from toymodels.scansnap_training import (
    TwoRateConfig,
    make_two_rate_optimizers,
    parameter_groups,
    query_logits,
    train_on_cooccurrence,
)
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.topic_model import TopicModel, TopicModelConfig
from toymodels.topic_training import (
    MaskedLMData,
    TopicTrainingConfig,
    attention_weights,
    masked_lm_loss,
    record_attention_norms,
    record_value,
    train_topic_model,
)
from toymodels.training import Checkpointer, History, make_optimizer, train

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
    "train_topic_model",
]
