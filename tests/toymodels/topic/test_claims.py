"""The four claims of Li, Li & Risteski (2023), each on a small configuration that trains in seconds.

Setting: T = 4 topics x v = 5 words, documents of 20-30 words, alpha = 0.1, BERT masking.
"""

from __future__ import annotations

import pytest
import torch

from probes.attention.topic_attention import topic_attention
from probes.dynamics.block_structure import block_structure, centred_block_ceiling
from probes.dynamics.embedding_topics import embedding_topic_similarity
from probes.dynamics.two_stage import detect_two_stage
from toymodels.topic.data import LDAConfig, MaskingConfig, mask_documents, sample_documents
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.topic.training import (
    MaskedLMData,
    MaskedLMDataConfig,
    TopicTrainingConfig,
    batch_loss,
    record_attention_norms,
    train_topic_model,
)

LDA = LDAConfig(n_topics=4, words_per_topic=5, min_len=20, max_len=30)
MASKING = MaskingConfig()
WORD_TOPICS = LDA.token_topics()[: LDA.n_words]


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def model(**kw) -> TopicModel:
    return TopicModel(TopicModelConfig(d_vocab=LDA.vocab_size, n_words=LDA.n_words, pad_id=LDA.pad_id, d_model=16,
                                       n_ctx=LDA.max_len, words_per_topic=LDA.words_per_topic, **kw))


def train(m: TopicModel, **kw):
    settings = {"batch_size": 32, **kw}
    data = MaskedLMData(LDA, MASKING, MaskedLMDataConfig(n_documents=512))
    return train_topic_model(m, data, TopicTrainingConfig(**settings), callbacks=[record_attention_norms(5)])


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


def test_cross_entropy_cannot_see_a_constant_added_to_a_column_of_w_v():
    m = model(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen", init_std=0.3)
    generator = torch.Generator().manual_seed(4)
    masked = mask_documents(sample_documents(LDA, 8, generator), MASKING, generator, lda=LDA)
    key_mask = ~masked.selected
    def losses() -> dict[str, float]:
        return {kind: float(batch_loss(m, masked, key_mask, LDA.pad_id, kind)) for kind in ("cross_entropy", "squared")}

    with torch.no_grad():
        before = losses()
        m.W_V += torch.linspace(-2, 2, m.W_V.shape[1])[None, :]     # c_j added down column j
        after = losses()
    assert after["cross_entropy"] == pytest.approx(before["cross_entropy"], rel=1e-5)
    assert after["squared"] > 2 * before["squared"]   # the squared loss does see it: no centring needed there


def test_claim2_under_cross_entropy_centred_and_with_theorem_2s_l2():
    def value_after_training(value_l2: float) -> torch.Tensor:
        m = model(embedding="one_hot_frozen", attention="uniform_frozen", decoder="identity_frozen")
        train(m, n_steps=200, lr=1e-2, optimizer="adam", loss="cross_entropy", value_l2=value_l2)
        return m.W_V.detach()[: LDA.n_words, : LDA.n_words]

    ceiling = centred_block_ceiling(WORD_TOPICS)          # 0.627 for 4 blocks of 5
    plain, regularised = value_after_training(0.0), value_after_training(1e-3)
    for value in (plain, regularised):                     # centred: the ideal block matrix's score, nearly
        centred = block_structure(value, WORD_TOPICS, centre_columns=True)
        assert centred.score > 0.9 * ceiling and centred.within_mean > 0 > centred.between_mean
    # without L2 the column offsets (free under cross-entropy) hide the blocks from the uncentred score;
    # lambda * ||W_V||^2 pulls them towards 0, the smallest-norm choice, which is what centring picks
    assert block_structure(plain, WORD_TOPICS).score < 0.1
    assert block_structure(regularised, WORD_TOPICS).score > block_structure(plain, WORD_TOPICS).score + 0.2


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
