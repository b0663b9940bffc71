"""Random weights never settle as "holds": tiny random-weight models of three architectures (GPT-NeoX, Llama, the
RoBERTa encoder) probed by the report's first pass, then every monitored finding settled on fresh Wikipedia-excerpt
text and fresh [BOS] X X batches (the head ablations on fresh sequences too), decided on its confidence sequence
(analyses.pretrained.settle).

The topic words are the excerpt's 300 most frequent long words dealt round-robin into 5 topics: random weights have
no topic structure to find whatever the topics are, and no LDA fit is needed."""

from __future__ import annotations

import collections
import random
import re

import pytest

import probes
from analyses.pretrained.causal import CausalConfig
from analyses.pretrained.measure import PretrainedConfig, probe_pretrained
from analyses.pretrained.settle import MONITORED, settle_run
from analyses.pretrained.settled import SettleConfig
from probes.text.corpora import iter_documents
from tests.random_checkpoints import make_random_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

CONFIG = PretrainedConfig(seq_len=64, batch_size=4, max_batches=8, n_pair_tokens=60, n_boot=200, n_permutations=200,
                          protocol_seq_len=20, protocol_batches=4, causal=CausalConfig(k=2, seq_len=8, sequences=4),
                          control=False)  # no control bar to clear: nothing may hold on the null and threshold alone
SETTLE = SettleConfig(enabled=True, max_round_units=40, max_rounds=3, budget_minutes=2.0)


@pytest.fixture(scope="module")
def corpus():
    documents = list(iter_documents("wikipedia-excerpt", min_chars=200, max_documents=1500))
    random.Random(0).shuffle(documents)
    counts = collections.Counter(w for d in documents for w in re.findall(r"[a-z]{5,}", d.text.lower()))
    return documents, {word: i % 5 for i, (word, _) in enumerate(counts.most_common(300))}


@pytest.mark.parametrize("kind", ["gpt_neox", "llama", "roberta"])
def test_a_random_weight_model_settles_nothing_as_holding(corpus, tmp_path, kind):
    documents, word_topics = corpus
    model = probes.load_model(make_random_checkpoint(kind, tmp_path / kind, seed=0))
    run = probe_pretrained(model, documents, word_topics, CONFIG, progress=False, name=kind)
    monitored = [name for name in MONITORED if name in run.findings]  # the encoder has no causal findings
    assert len(monitored) == len(MONITORED) - (3 if kind == "roberta" else 0)
    settled = settle_run(model, run, documents, SETTLE, monitor=monitored)
    lines = "\n".join(f"{name}: {f.cell()}" for name, f in settled.items())
    for name in monitored:  # each was measured on fresh units and decided on its sequence alone
        assert settled[name].rounds >= 1 and settled[name].units >= SETTLE.min_units, lines
    assert not [name for name, f in settled.items() if f.verdict == "holds"], lines
    # nor did the first pass (fixed sample) on these findings
    assert not [name for name in monitored if run.findings[name].holds], lines
