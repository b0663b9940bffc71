"""The report's topic-attention null is one that random weights obey: random-weight models of four architectures
(GPT-NeoX, Gemma 2, Llama, RoBERTa) land inside its 95% range on the default corpus and on WikiText-2, with the
report's statistic (the same/different-topic ratio averaged over heads) and the report's LDA pipeline."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

import probes
from probes.attention.topic_attention import topic_attention
from probes.text.corpora import iter_documents, wikitext_documents
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import token_topic_labels
from probes.text.topics import LdaTopicConfig, assign_word_topics, fit_lda_topics
from tests.random_checkpoints import make_random_checkpoint

WIKITEXT = Path(__file__).resolve().parents[3].parent / "shared" / "data" / "wikitext-2-raw" / "wiki.test.raw"
KINDS = ("gpt_neox", "gemma2", "llama", "roberta")

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


def _documents(corpus: str) -> list:
    if corpus == "wikipedia-excerpt":
        return list(iter_documents(corpus, min_chars=200, max_documents=1500))
    if not WIKITEXT.is_file():
        pytest.skip(f"WikiText-2 is not at {WIKITEXT} (../shared/data beside the repo)")
    lines = WIKITEXT.read_text(encoding="utf-8").splitlines(keepends=True)
    return [d for d in wikitext_documents(lines, "wikitext-2 test", unit="paragraph") if len(d.text) >= 200][:1500]


@pytest.fixture(scope="module", params=["wikipedia-excerpt", "wikitext-2"])
def corpus(request):
    documents = _documents(request.param)
    topics = fit_lda_topics(documents, LdaTopicConfig(n_topics=10, passes=2, chunk_words=0, no_below=5,
                                                      held_out_fraction=0.0))
    random.Random(0).shuffle(documents)
    return request.param, documents, assign_word_topics(topics)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("random")
    return {kind: probes.load_model(make_random_checkpoint(kind, root / kind, seed=0)) for kind in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_random_weights_land_inside_the_distance_matched_null(corpus, models, kind):
    name, documents, word_topics = corpus
    model = models[kind]
    info = probes.ModelInfo.of(model)
    labels = token_topic_labels(word_topics, model.tokenizer, info.d_vocab).labels
    batches = list(text_token_batches(documents, model.tokenizer, info, seq_len=64, batch_size=8, max_batches=8))
    result = topic_attention(model, batches, labels, n_permutations=200, permutation_seed=0, null="distance")
    observed = float(result.ratio.double().nanmean())
    null = result.null_ratio.double().flatten(1).nanmean(1)
    low, high = (float(v) for v in torch.quantile(null, torch.tensor([0.025, 0.975], dtype=torch.float64)))
    assert low - 1e-9 <= observed <= high + 1e-9, f"{kind} on {name}: {observed:.4f} outside [{low:.4f}, {high:.4f}]"
    p = float(probes.permutation_p_value(torch.tensor(observed), null))
    assert p > 0.02, f"{kind} on {name}: p = {p:.3f}"
