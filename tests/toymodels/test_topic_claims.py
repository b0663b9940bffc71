"""The four claims of Li, Li & Risteski (2023), each on a small configuration that trains in seconds.

Setting: T = 4 topics x v = 5 words, documents of 20-30 words, alpha = 0.1, BERT masking.
"""

from __future__ import annotations

import pytest
import torch

from probes.block_structure import block_structure
from probes.embedding_topics import embedding_topic_similarity
from probes.topic_attention import topic_attention
from probes.two_stage import detect_two_stage
from toymodels.lda_data import LDAConfig, MaskingConfig, sample_documents
from toymodels.topic_model import TopicModel, TopicModelConfig
from toymodels.topic_training import TopicTrainingConfig, record_attention_norms, train_topic_model

LDA = LDAConfig(n_topics=4, words_per_topic=5, min_len=20, max_len=30)
MASKING = MaskingConfig()
WORD_TOPICS = LDA.token_topics()[: LDA.n_words]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def model(**kw) -> TopicModel:
    return TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id, d_model=16,
                                       n_ctx=LDA.max_len, words_per_topic=LDA.words_per_topic, **kw))


def train(m: TopicModel, **kw):
    settings = {"batch_size": 32, "n_documents": 512, **kw}
    return train_topic_model(m, LDA, MASKING, TopicTrainingConfig(**settings), callbacks=[record_attention_norms(5)])


def unmasked_attention(m: TopicModel):
    documents = sample_documents(LDA, 32, torch.Generator().manual_seed(99), length=LDA.max_len)
    return topic_attention(m, [documents.tokens], LDA.token_topics())


@pytest.fixture(scope="module")
def jointly_trained() -> TopicModel:
    m = model(embedding="trained")
    train(m, n_steps=200, lr=1e-2, optimizer="adam")
    return m


def test_claim1_same_topic_embeddings_are_more_similar(jointly_trained):
    similarity = embedding_topic_similarity(jointly_trained.W_E.detach()[: LDA.n_words], WORD_TOPICS)
    assert similarity.same_topic_cosine > 0.5
    assert similarity.different_topic_cosine < 0.0
    assert similarity.same_topic_dot > similarity.different_topic_dot
    gram = jointly_trained.W_E.detach()[: LDA.n_words] @ jointly_trained.W_E.detach()[: LDA.n_words].T
    assert block_structure(gram, WORD_TOPICS).score > 0.3


def test_claim2_value_matrix_is_block_wise_under_uniform_attention():
    m = model(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen")
    train(m, n_steps=100, lr=1e-2, optimizer="adam")
    blocks = block_structure(m.W_V.detach()[: LDA.n_words, : LDA.n_words], WORD_TOPICS)
    assert blocks.score > 0.5
    assert blocks.within_mean > 10 * abs(blocks.between_mean)
    untrained = model(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen")
    assert abs(block_structure(untrained.W_V.detach()[: LDA.n_words, : LDA.n_words], WORD_TOPICS).score) < 0.15


def test_claim3_same_topic_attention_exceeds_different_topic_attention(jointly_trained):
    joint = unmasked_attention(jointly_trained)
    assert float(joint.ratio[0, 0]) > 1.4 and joint.chance_ratio == pytest.approx(1.0)
    fixed = model(embedding="one_hot_frozen", value="block_frozen")
    train(fixed, n_steps=100, lr=1e-2, optimizer="adam")
    assert float(unmasked_attention(fixed).ratio[0, 0]) > 1.5


def test_claim4_value_grows_first_then_key_and_query_move():
    m = model(embedding="one_hot_frozen")
    history = train(m, n_steps=300, lr=10.0, optimizer="sgd", loss="cross_entropy")
    stages = detect_two_stage(history.steps, history.values)
    assert stages.separated
    assert stages.first_moves_at < stages.first_plateaus_at <= stages.second_moves_at
    assert stages.second_progress_at_first_plateau < 0.15
    assert stages.events["w_v_norm"].change > 5 * stages.events["w_v_norm"].start
