"""The issue's claims for linear probes on the toy models, and ``mechprobe probe-linear`` end to end.

- Chen et al.'s induction toy (``--preset fast``): after layer 1, the parents ``tok[t-1..3]`` are
  decodable (accuracy >= 0.9) with a gain of at least 0.3 over what the current token alone predicts;
  from the one-hot embeddings no better than that (in-context Markov chains repeat states, so the
  current token predicts its predecessors above the majority class; the baseline is exactly that
  count table); ``tok[t-k]`` beyond the copier's window gains less than every parent.
- Li et al.'s topic toy: the word's topic is decodable from the trained embeddings (>= 0.9).
- Scan and Snap's data: the next-token class is read at the query position of a saved Y/Z model.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from analyses.cli import main
from analyses.linear.experiment import LinearProbeConfig, run_linear_probe, toy_setup
from analyses.toy_model_loader import load_toy_model
from analyses.toy_model_store import save_toy_model
from probes import LinearProbe, ProbeResult, TokenClassLabels, residual_hooks, run_probes
from probes.core.atomic import atomic_write_text
from toymodels.induction.data import MarkovConfig, sample_markov_icl
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.topic.data import LDAConfig, MaskingConfig, sample_documents
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.topic.training import MaskedLMData, MaskedLMDataConfig, TopicTrainingConfig, train_topic_model

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@dataclasses.dataclass(frozen=True)
class LinearRun:
    toy: Path  # `mechprobe toy induction --preset fast`, shared with test_determinism.py (tests/conftest.py)
    out: Path  # where `mechprobe probe-linear` writes (lin/, next/)


@pytest.fixture(scope="module")
def induction_run(tmp_path_factory, fast_toy_run):
    out = tmp_path_factory.mktemp("linear")
    toy = fast_toy_run("induction").folder
    assert main(["probe-linear", "--model", str(toy), "--target", "parent", "--out", str(out / "lin"),
                 "--no-progress"]) == 0
    return LinearRun(toy, out)


def test_cli_writes_the_issue_schema_and_results_that_load(induction_run):
    summary = json.loads((induction_run.out / "lin" / "summary.json").read_text())
    assert set(summary) == {"model", "target", "layers", "results"}
    assert summary["target"] == "parent" and summary["layers"] == ["hook_embed", "blocks.0.attn.hook_z"]
    assert list(summary["results"]) == ["1", "2", "3", "9"]  # 1..n and one beyond the window of 8
    for entry in summary["results"].values():
        assert set(entry) == {"statistic", "baseline_kind", "baseline_source", "accuracy", "ci", "baseline_accuracy",
                              "gain", "gain_ci", "majority_baseline"}
        assert entry["statistic"] == "gain over token identity" and entry["baseline_kind"] == "token_identity"
        assert len(entry["accuracy"]) == len(entry["ci"]) == len(entry["gain"]) == 2
        for accuracy, (low, high) in zip(entry["accuracy"], entry["ci"]):
            assert low <= accuracy <= high
    result = ProbeResult.load(induction_run.out / "lin" / "result")
    assert result.accuracy["1"].tolist() == pytest.approx(summary["results"]["1"]["accuracy"])
    control = json.loads((induction_run.out / "lin" / "control" / "summary.json").read_text())
    assert control["model"].endswith("(random weights)") and control["layers"] == summary["layers"]


def current_token_chance(k: int, settings: dict) -> float:
    """Accuracy of the best function of tok[t] alone at predicting tok[t-k] (a lookup table), on fresh chains."""
    tokens = sample_markov_icl(MarkovConfig(settings["n_states"], settings["order"], settings["seq_len"],
                                            settings["alpha"]), 2000, 777).tokens
    current, previous = tokens[:, k:].flatten(), tokens[:, :-k].flatten()
    table = torch.zeros(settings["n_states"], settings["n_states"])
    table.index_put_((current, previous), torch.ones_like(current, dtype=torch.float), accumulate=True)
    return float(table.max(1).values.sum() / table.sum())


def test_copier_puts_the_parents_into_the_stream_after_layer_1(induction_run):
    summary = json.loads((induction_run.out / "lin" / "summary.json").read_text())["results"]
    control = json.loads((induction_run.out / "lin" / "control" / "summary.json").read_text())["results"]
    settings = json.loads((induction_run.toy / "summary.json").read_text())["settings"]["data"]
    parents = ("1", "2", "3")
    for k in parents:
        assert summary[k]["accuracy"][1] >= 0.9 and summary[k]["gain"][1] >= 0.3
        assert summary[k]["gain_ci"][1][0] >= 0.25
    for k in ("1", "2"):
        assert control[k]["accuracy"][1] < summary[k]["accuracy"][1] - 0.2  # this random draw copies far less
    for k in ("1", "2", "3", "9"):
        # embeddings: no more than the current token predicts, which is what the baseline measures
        chance = current_token_chance(int(k), settings)
        assert summary[k]["accuracy"][0] <= chance + 0.05
        assert abs(summary[k]["baseline_accuracy"][0] - chance) < 0.05
        assert abs(summary[k]["gain"][0]) < 0.05
    assert summary["9"]["gain"][1] < min(summary[k]["gain"][1] for k in parents) - 0.1


def test_probe_linear_refuses_a_target_the_toy_has_no_labels_for(induction_run, capsys):
    code = main(["probe-linear", "--model", str(induction_run.toy), "--target", "next", "--out",
                 str(induction_run.out / "next")])
    assert code == 2 and "--target parent" in capsys.readouterr().err


def topic_model(steps: int) -> tuple[TopicModel, LDAConfig]:
    lda = LDAConfig(n_topics=4, words_per_topic=5, min_len=20, max_len=30)
    model = TopicModel(TopicModelConfig(d_vocab=lda.vocab_size, n_words=lda.n_words, pad_id=lda.pad_id, d_model=16,
                                        n_ctx=lda.max_len, words_per_topic=lda.words_per_topic, embedding="trained"))
    if steps:
        data = MaskedLMData(lda, MaskingConfig(), MaskedLMDataConfig(n_documents=512))
        train_topic_model(model, data, TopicTrainingConfig(batch_size=32, n_steps=steps, lr=1e-2, optimizer="adam"))
    return model, lda


def test_topic_of_the_word_is_decodable_from_trained_embeddings():
    model, lda = topic_model(200)
    documents = sample_documents(lda, 96, torch.Generator().manual_seed(5), length=lda.max_len)
    probe = LinearProbe(TokenClassLabels(lda.token_topics(), n_classes=4), hooks=residual_hooks(model),
                        max_examples=1500, n_boot=200)
    (trained,) = run_probes(model, [probe], list(documents.tokens.split(32)), progress=False)
    assert trained.hooks[0] == "hook_embed"
    assert trained.accuracy["word"][0] >= 0.9 and trained.accuracy_ci["word"][0, 0] >= 0.85
    assert trained.majority_baseline["word"] < 0.5


def unseen_word_accuracy(steps: int) -> float:
    """Word topic from the embeddings with every test word unseen in training. 20 word types in 16 dimensions:
    any labelling is separable, so only unseen words tell a topic direction from a memorised lookup. Each row
    repeats one word (the embedding ignores context), so documents = words and whole words can be held out."""
    model, lda = topic_model(steps)
    rows = torch.arange(lda.n_words).repeat(3)[:, None].expand(-1, 6).contiguous()
    probe = LinearProbe(TokenClassLabels(lda.token_topics(), n_classes=4), hooks=["hook_embed"], n_boot=200,
                        unseen_words=True)
    (scores,) = run_probes(model, [probe], [rows], progress=False)
    return float(scores.accuracy["word"][0])


def test_topic_direction_generalises_to_unseen_words_only_after_training():
    assert unseen_word_accuracy(200) >= 0.9
    assert unseen_word_accuracy(0) < 0.5  # four topics: chance is 0.25


def test_next_token_class_is_read_at_the_query_of_a_saved_scansnap_model(tmp_path):
    from analyses.scansnap.config import PRESETS

    settings = PRESETS["fast"]
    model = YZTransformer(YZModelConfig(d_vocab=settings.data.d_vocab, n_ctx=settings.data.seq_len))
    save_toy_model(model, tmp_path, "scansnap")
    atomic_write_text(tmp_path / "summary.json", json.dumps({"settings": dataclasses.asdict(settings)}))
    toy = load_toy_model(tmp_path)
    assert all(torch.equal(a, b) for a, b in zip(toy.model.state_dict().values(), model.state_dict().values()))
    config = LinearProbeConfig(toy_sequences=128, n_boot=200, control=False)
    setup = toy_setup(toy, "next", config)
    assert setup.hooks == ("blocks.0.hook_attn_out",)
    labelled = [int((setup.labels(b, torch.arange(i * 32, i * 32 + b.shape[0]))["next"] >= 0).sum(1).max())
                for i, b in enumerate(setup.batches)]
    assert labelled == [1] * len(setup.batches)  # one label per sequence: the query
    summary = run_linear_probe(str(tmp_path), "next", tmp_path / "out", config, progress=False, echo=lambda *_: None)
    # even untrained (uniform attention), the pooled context is the fact's bag of tokens
    assert summary.results["next"].accuracy[0] >= 0.9
    assert np.isclose(summary.results["next"].majority_baseline, 0.5, atol=0.15)
