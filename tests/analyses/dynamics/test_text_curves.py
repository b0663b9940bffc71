"""The report's text probes over a series: a ``train-lm`` checkpoint reads text through its cut vocabulary, the
same-topic attention and co-occurrence ordering curves carry per-unit sums that give back their values, and a
series whose checkpoints do not change has no event on them."""

from __future__ import annotations

import json
import random
import shutil

import pytest
import torch

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.run import run_dynamics
from analyses.dynamics.text_measure import text_points, text_probe_data, word_topics_of
from analyses.dynamics.train_lm import TrainLmConfig, train_lm
from analyses.lm_data import CutVocabTokenizer, smollm2_tokenizer
from analyses.toy_model_loader import load_any_model
from probes import ModelInfo
from probes.dynamics.change_point import CurveUnits
from probes.text.topics import LdaTopicConfig

pytestmark = pytest.mark.usefixtures("one_thread")

ANIMALS = ["tiger", "horse", "monkey", "rabbit", "snake", "eagle", "camel", "mouse"]
METALS = ["copper", "silver", "nickel", "steel", "bronze", "iron", "gold", "zinc"]
TOPICS = LdaTopicConfig(n_topics=2, passes=10, no_below=1, no_above=1.0, assignment="threshold", threshold=0.8,
                        seed=0, chunk_words=0)  # one file is one article: chunk paragraph by paragraph


@pytest.fixture(scope="module")
def series(tmp_path_factory):
    """A tiny train-lm series on two-topic paragraphs (each word from the paragraph's list 9 times in 10)."""
    folder = tmp_path_factory.mktemp("text")
    rng = random.Random(0)
    lists = (METALS, ANIMALS)
    paragraphs = [" ".join(rng.choice(lists[(i + (rng.random() < 0.1)) % 2]) for _ in range(45)) for i in range(80)]
    (folder / "text.txt").write_text("\n\n".join(paragraphs))
    config = TrainLmConfig(corpus=str(folder / "text.txt"), vocab=40, seq_len=32, batch_size=8, d_model=16,
                           n_heads=2, n_steps=30, n_checkpoints=3, span=8)
    train_lm(config, folder / "lm", progress=False)
    return folder


def dynamics_config(series) -> DynamicsConfig:
    return DynamicsConfig(seq_len=8, n_batches=4, batch_size=2, n_boot=200, corpus=str(series / "text.txt"),
                          text_seq_len=32, early=(1, 5), late=(20, 31), text_batches=2, topic_batches=8,
                          n_permutations=50, topics=TOPICS)


def test_a_train_lm_checkpoint_reads_text_through_its_cut_vocabulary(series):
    model = load_any_model(str(series / "lm" / "step_30"))
    tokenizer = model.tokenizer
    assert isinstance(tokenizer, CutVocabTokenizer) and len(tokenizer) == model.cfg.d_vocab
    kept = json.loads((series / "lm" / "vocab.json").read_text())["smollm2_ids"]
    base = smollm2_tokenizer()
    text = " tiger copper Zanzibar"
    expected = [kept.index(i) if i in kept else len(kept) for i in base.encode(text, add_special_tokens=False)]
    assert tokenizer.encode(text) == expected and expected[-1] == tokenizer.unk_token_id  # Zanzibar: not kept
    assert tokenizer.decode(tokenizer.encode(" tiger copper")) == " tiger copper"
    info = ModelInfo.of(model)  # trained without BOS or special positions: the protocol frames nothing
    assert info.bos_token_id is None and info.special_token_ids == ()


def test_the_text_curves_units_give_back_their_values(series):
    config = dynamics_config(series)
    model = load_any_model(str(series / "lm" / "step_30"))
    topics = word_topics_of(config)
    assert set(topics[1]) == set(ANIMALS + METALS)
    data = text_probe_data(model, config, topics)
    assert data is not None and int((data.labels >= 0).sum()) >= 8
    assert int(data.labels[model.tokenizer.unk_token_id]) == -1  # the cut tokens carry no topic
    points = text_points(model, data, config)
    topic, ordering = points["topic_attention"], points["cooccurrence_ordering"]
    assert topic.divide and len(topic.numerator) == 4  # the measuring half of 8 batches
    for point in (topic, ordering):
        units = CurveUnits(*(torch.tensor([getattr(point, f)], dtype=torch.float64) if getattr(point, f) is not None
                             else None for f in ("numerator", "denominator", "minus_numerator", "minus_denominator")),
                           divide=point.divide)
        assert float(units.values()[0, 0]) == pytest.approx(point.value, rel=1e-6)  # float32 sums
        assert point.ci[0] <= point.value <= point.ci[1] and point.null_value == point.null_value


def test_a_series_that_does_not_change_has_no_text_event(series, tmp_path):
    frozen = tmp_path / "frozen"
    frozen.mkdir()
    shutil.copy(series / "lm" / "vocab.json", frozen)
    for step in (0, 10, 100):
        shutil.copytree(series / "lm" / "step_0", frozen / f"step_{step}")
    (frozen / "series.json").write_text(json.dumps({"checkpoints": [
        {"step": s, "tokens": None, "path": f"step_{s}"} for s in (0, 10, 100)]}))
    summary = run_dynamics(frozen, tmp_path / "out", dynamics_config(series), progress=False)
    for curve in ("topic_attention", "cooccurrence_ordering"):
        assert len(set(summary.curves[curve])) == 1  # the same weights read the same text at every step
        assert not summary.events.events[curve].holds


def test_without_topic_words_the_text_curves_are_skipped_and_the_run_goes_on(series, tmp_path, caplog):
    (tmp_path / "digits.txt").write_text("\n\n".join(" ".join(str(i * j % 97) for j in range(80)) for i in range(30)))
    config = DynamicsConfig(seq_len=8, n_batches=4, batch_size=2, n_boot=100, corpus=str(tmp_path / "digits.txt"),
                            text_seq_len=32, early=(1, 5), late=(20, 31), text_batches=2, topics=TOPICS)
    summary = run_dynamics(series / "lm", tmp_path / "out", config, progress=False)
    assert "topic_attention" not in summary.curves and "context_loss_gain" in summary.curves
    assert "skipped" in caplog.text
