"""Li, Li & Risteski (2023): LDA documents with BERT-style masking, the one-layer masked-LM model, its training.

Modules: data, model, training.
"""

from toymodels.topic.data import Documents, LDAConfig, MaskedDocuments, MaskingConfig, mask_documents, sample_documents
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.topic.training import (
    MaskedLMData,
    MaskedLMDataConfig,
    TopicTrainingConfig,
    attention_weights,
    masked_lm_loss,
    record_attention_norms,
    record_value,
    train_topic_model,
    training_fingerprint,
    value_l2_penalty,
)

__all__ = [
    "Documents", "LDAConfig", "MaskedDocuments", "MaskedLMData", "MaskedLMDataConfig", "MaskingConfig", "TopicModel",
    "TopicModelConfig", "TopicTrainingConfig", "attention_weights", "mask_documents", "masked_lm_loss",
    "record_attention_norms", "record_value", "sample_documents", "train_topic_model", "training_fingerprint",
    "value_l2_penalty",
]
