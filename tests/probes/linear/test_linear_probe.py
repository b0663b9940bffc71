"""probes.LinearProbe: reservoir sampling, grouped cross-validation, control task, intervals, save/load.

Every vectorised part is checked against a plain-Python reference (bottom-k reservoir, control labels,
document bootstrap, previous-token labels); planted signals are decodable, noise is at chance and
has selectivity ~0, and a memorising classifier shows grouped folds never share a document. The
token-identity baseline equals a per-fold count table, and the paired comparison with a control model
matches a loop over bootstrap draws.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from probes import (
    CombinedLabels,
    LinearProbe,
    LinearProbeScores,
    ModelInfo,
    PreviousTokenLabels,
    ProbeResult,
    RowLabels,
    TokenBatch,
    TokenClassLabels,
    most_frequent_tokens,
    residual_hooks,
    run_probes,
)
from probes.core.errors import ConfigError, InputError, ProbeStateError
from probes.core.result import results_close
from probes.linear.fit import (
    control_task_labels,
    document_bootstrap,
    group_folds,
    held_out_best_layer,
    out_of_fold_correct,
    token_identity_correct,
)
from tests.hooked_models import PreviousTokenWriter

INFO = ModelInfo("hand-made", 1, 1, 64, 12, True, None, ())
HOOKS = ("hook_embed", "blocks.0.hook_resid_post")
pytestmark = pytest.mark.usefixtures("one_thread")


def batch_of(tokens: torch.Tensor) -> TokenBatch:
    return TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool))


def feed(probe: LinearProbe, tokens: torch.Tensor, activations: dict[str, torch.Tensor], chunk: int) -> LinearProbe:
    probe.bind(INFO)
    for start in range(0, tokens.shape[0], chunk):
        part = slice(start, start + chunk)
        probe.update({hook: value[part] for hook, value in activations.items()}, batch_of(tokens[part]))
    return probe


def reference_reservoir(labels: dict[str, torch.Tensor], k: int, seed: int) -> dict[str, list[tuple[int, int]]]:
    """Per key, bottom-k by a key drawn per position labelled for any key (stream order), with plain lists."""
    rng = np.random.default_rng(seed)
    first = next(iter(labels.values()))
    kept: dict[str, list[tuple[float, int, int]]] = {key: [] for key in labels}
    for row in range(first.shape[0]):
        for position in range(first.shape[1]):
            if all(labels[key][row, position] < 0 for key in labels):
                continue
            u = float(rng.random())
            for key in labels:
                if labels[key][row, position] >= 0:
                    kept[key] = sorted(kept[key] + [(u, row, position)])[:k]
    return {key: sorted((row, position) for _, row, position in entries) for key, entries in kept.items()}


def planted(n_rows: int = 48, n_pos: int = 24, seed: int = 0):
    """Tokens of 12 types in 3 classes; hook_embed = class direction + noise, resid_post = pure noise."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 12, (n_rows, n_pos), generator=generator)
    classes = torch.arange(12) % 3
    signal = nn.functional.one_hot(classes[tokens], 3).float() @ torch.randn(3, 16, generator=generator)
    embed = signal + 0.3 * torch.randn(n_rows, n_pos, 16, generator=generator)
    return tokens, classes, {"hook_embed": embed, HOOKS[1]: torch.randn(n_rows, n_pos, 16, generator=generator)}


def kept_positions(probe: LinearProbe, tokens: torch.Tensor) -> list[tuple[int, int]]:
    """(row, position) of each kept example, read back from the reservoir's stored position index feature."""
    index = probe._features["index"][:, 0].long()
    return sorted((int(i) // tokens.shape[1], int(i) % tokens.shape[1]) for i in index)


def index_activations(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    return {"index": torch.arange(tokens.numel(), dtype=torch.float32).reshape(*tokens.shape, 1)}


@pytest.mark.parametrize("chunk", [1, 5, 48])
def test_reservoir_equals_a_list_based_bottom_k_per_key_whatever_the_batching(chunk):
    tokens, classes, _ = planted()
    sparse = TokenClassLabels(torch.where(torch.arange(12) < 2, classes, -1))  # 2 of 12 types labelled
    dense = RowLabels("document", torch.arange(48) % 3)
    labels = CombinedLabels(sparse, dense)
    probe = feed(LinearProbe(labels, hooks=["index"], max_examples=100, seed=3), tokens, index_activations(tokens),
                 chunk)
    expected = reference_reservoir(labels(batch_of(tokens), torch.arange(48)), 100, seed=3)
    assert len(expected["word"]) == 100 and len(expected["document"]) == 100  # each key gets its own 100
    assert kept_positions(probe, tokens) == sorted(set(expected["word"]) | set(expected["document"]))
    assert all(int(tokens[row, position]) < 2 for row, position in expected["word"])
    result = probe.compute()
    assert result.n_examples == {"word": 100, "document": 100}


def test_reservoir_keeps_every_position_uniformly_often():
    tokens = torch.zeros(10, 10, dtype=torch.long)
    counts = np.zeros(100)
    for seed in range(400):
        probe = feed(LinearProbe(TokenClassLabels(torch.tensor([0] + [1] * 11)), hooks=["index"], max_examples=20,
                                 seed=seed), tokens, index_activations(tokens), chunk=3)
        for row, position in kept_positions(probe, tokens):
            counts[row * 10 + position] += 1
    # each of 100 positions is kept with probability 20/100: 80 of 400 runs, binomial sd 8
    assert counts.sum() == 400 * 20
    assert np.abs(counts - 80).max() < 4.5 * 8
    first_half, second_half = counts[:50].sum(), counts[50:].sum()
    assert abs(first_half - second_half) < 0.05 * counts.sum()


def test_merge_is_the_bottom_k_of_the_union_and_a_sum_of_states_is_refused():
    tokens, classes, _ = planted()
    labels = TokenClassLabels(classes)
    activations = index_activations(tokens)
    a = feed(LinearProbe(labels, hooks=["index"], max_examples=60, seed=1), tokens[:24],
             {"index": activations["index"][:24]}, 8)
    b = feed(LinearProbe(labels, hooks=["index"], max_examples=60, seed=2, first_row=24), tokens[24:],
             {"index": activations["index"][24:]}, 8)
    union = sorted(zip(np.concatenate([a._priority, b._priority]).tolist(),
                       torch.cat([a._features["index"][:, 0], b._features["index"][:, 0]]).tolist()))[:60]
    merged = a.merge(b)
    assert sorted(merged._features["index"][:, 0].tolist()) == sorted(i for _, i in union)
    assert merged._groups.max() >= 24  # rows of the second probe keep their global index
    with pytest.raises(ProbeStateError, match="own seed"):
        feed(LinearProbe(labels, hooks=["index"], seed=1), tokens, activations, 48).merge(
            feed(LinearProbe(labels, hooks=["index"], seed=1), tokens, activations, 48))
    with pytest.raises(ProbeStateError, match="reservoir"):
        merged.state_dict()


def test_planted_signal_is_decodable_noise_is_at_chance_and_its_selectivity_is_zero():
    tokens, classes, activations = planted()
    probe = feed(LinearProbe(TokenClassLabels(classes), hooks=HOOKS, max_examples=600, n_boot=300), tokens,
                 activations, 16)
    result = probe.compute()
    signal, noise = 0, 1
    assert result.accuracy["word"][signal] > 0.97
    assert result.accuracy_ci["word"][signal, 0] > 0.9
    assert result.baseline["word"] == "control_task" and result.statistic["word"] == "selectivity"
    assert result.gain["word"][signal] > 0.3  # the 3 classes, not the 12 types, are linear in the signal
    assert abs(result.accuracy["word"][noise] - 1 / 3) < 0.08
    assert result.accuracy["word"][noise] <= result.majority_baseline["word"] + 0.03
    low, high = result.gain_ci["word"][noise].tolist()
    assert low < 0 < high and abs(float(result.gain["word"][noise])) < 0.06
    assert result.n_examples["word"] == 600 and result.n_documents["word"] == 48


def reference_control(types: np.ndarray, labels: np.ndarray, n_classes: int, seed: int) -> np.ndarray:
    """Loop version of control_task_labels: shuffled types cut at the real labels' cumulative class shares."""
    unique = sorted(set(types.tolist()))
    order = np.random.default_rng(seed).permutation(len(unique))
    edges, total = [], 0.0
    for c in range(n_classes):
        total += float(np.sum(labels == c)) / len(labels)
        edges.append(total)
    assignment, cumulative = {}, 0.0
    for i in order:
        share = float(np.sum(types == unique[i])) / len(types)
        middle = cumulative + share / 2
        cumulative += share
        assignment[unique[i]] = min(next((c for c, e in enumerate(edges) if middle < e), n_classes - 1),
                                    n_classes - 1)
    return np.array([assignment[t] for t in types.tolist()])


def test_control_labels_match_a_loop_reference_and_the_real_class_shares():
    rng = np.random.default_rng(0)
    types = rng.zipf(1.5, 3000) % 200
    labels = rng.integers(0, 5, 3000)
    control = control_task_labels(types, labels, 5, seed=4)
    assert np.array_equal(control, reference_control(types, labels, 5, seed=4))
    for word in np.unique(types):  # one class per word type
        assert len(np.unique(control[types == word])) == 1
    largest_type = np.bincount(types).max() / 3000  # a type cannot be split between classes
    share = np.bincount(control, minlength=5) / 3000
    assert np.abs(share - np.bincount(labels, minlength=5) / 3000).max() <= largest_type
    flat = rng.integers(0, 300, 3000)  # many small types: the class shares match closely
    share = np.bincount(control_task_labels(flat, labels, 5, seed=4), minlength=5) / 3000
    assert np.abs(share - np.bincount(labels, minlength=5) / 3000).max() < 0.01
    three = control_task_labels(np.repeat([7, 8, 9], 100), np.tile([0, 1, 2], 100), 3, seed=1)
    assert sorted(np.unique(three).tolist()) == [0, 1, 2]  # 3 equal types, 3 equal classes: a bijection


def reference_token_identity(types: np.ndarray, labels: np.ndarray, groups: np.ndarray, n_folds: int) -> np.ndarray:
    """Per fold: each token's most frequent training label (ties: smaller class), the training majority for a token
    unseen in training; 1 where that equals the label."""
    correct = np.zeros(len(labels), dtype=np.uint8)
    for train, test in group_folds(groups, n_folds).split(types, labels, groups):
        prior = np.bincount(labels[train]).argmax()
        for i in test:
            seen = labels[train][types[train] == types[i]]
            guess = np.bincount(seen).argmax() if len(seen) else prior
            correct[i] = guess == labels[i]
    return correct


def test_token_identity_baseline_is_a_count_table_per_fold():
    rng = np.random.default_rng(3)
    types = rng.integers(0, 30, 600)
    labels = np.where(rng.random(600) < 0.7, types % 4, rng.integers(0, 4, 600))  # mostly a function of the token
    groups = rng.integers(0, 40, 600)
    got = token_identity_correct(types, labels, groups, 3, smoothing=1e-9)
    want = reference_token_identity(types, labels, groups, 3)
    assert (got != want).sum() <= 3  # ties between equally frequent labels may break either way
    assert abs(got.mean() - 0.7 - 0.3 / 4) < 0.05
    independent = rng.integers(0, 2, 600)  # a label the token says nothing about: the majority rate
    assert abs(token_identity_correct(types, independent, groups, 3).mean() - 0.5) < 0.08


def test_best_layer_against_a_control_is_paired_and_its_p_counts_draws_that_beat_neither():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(40), 10)
    control = (rng.random((3, 400)) < 0.3).astype(np.float64) - 0.2  # gains of a random model
    model = control.copy()
    model[2] += (rng.random(400) < 0.5)  # layer 2 adds correct answers on half the examples
    held = held_out_best_layer(model, groups, control=control, n_boot=400, seed=1)
    assert held["layer"] == 2 and held["p_value"] == 1 / 401
    odd = (groups % 2) == 1
    assert held["value"] == pytest.approx(model[2, odd].mean())
    assert held["difference"] == pytest.approx((model[2] - control[2])[odd].mean())
    same = held_out_best_layer(control, groups, control=control, n_boot=400, seed=1)
    assert same["difference"] == 0 and same["p_value"] == 1.0  # a model never beats itself
    alone = held_out_best_layer(model, groups, n_boot=400, seed=1)
    assert alone["control_value"] is None and alone["layer"] == 2
    with pytest.raises(InputError, match="same layers and examples"):
        held_out_best_layer(model, groups, control=control[:2], n_boot=10, seed=1)


def test_grouped_folds_never_share_a_document_so_memorising_documents_does_not_pay():
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(0)
    documents = np.repeat(np.arange(40), 25)
    labels = rng.integers(0, 4, 40)[documents]  # one label per document, unrelated to anything else
    features = rng.normal(size=(40, 8))[documents] + 0.01 * rng.normal(size=(1000, 8))  # a document fingerprint
    for train, test in group_folds(documents, 5).split(features, labels, documents):
        assert not set(documents[train]) & set(documents[test])
    grouped = out_of_fold_correct(KNeighborsClassifier(1), features, labels, documents, 5).mean()
    leaky = out_of_fold_correct(KNeighborsClassifier(1), features, labels, np.arange(1000), 5).mean()
    assert leaky > 0.95  # rows as their own groups: the fingerprint gives the label away
    assert grouped < 0.45  # four classes: chance is about 0.25


def test_every_fit_runs_on_one_blas_thread_and_the_callers_threads_come_back():
    from sklearn.dummy import DummyClassifier
    from threadpoolctl import threadpool_info, threadpool_limits

    threads_during_fit = []

    class Recording(DummyClassifier):
        def fit(self, X, y, sample_weight=None):
            threads_during_fit.append(max(pool["num_threads"] for pool in threadpool_info()))
            return super().fit(X, y, sample_weight)

    labels = np.arange(40) % 2
    with threadpool_limits(limits=2):  # what a caller had: two threads everywhere
        before = [pool["num_threads"] for pool in threadpool_info()]
        correct = out_of_fold_correct(Recording(strategy="most_frequent"), np.zeros((40, 1)), labels,
                                      np.arange(40) // 4, 5)
        after = [pool["num_threads"] for pool in threadpool_info()]
    assert threads_during_fit == [1] * 5  # one fit per fold, each on one thread
    assert after == before
    assert correct.mean() == 0.5  # balanced classes in every fold: the majority guess is right half the time


def test_document_bootstrap_matches_a_loop_reference():
    rng = np.random.default_rng(1)
    values = rng.integers(0, 2, size=(2, 30)).astype(np.float64)
    groups = np.repeat([5, 9, 2, 7, 1], 6)
    mean, draws = document_bootstrap(values, groups, n_boot=50, seed=3)
    generator = np.random.default_rng(3)
    ids = np.unique(groups)
    for b in range(50):
        picked = generator.integers(0, len(ids), len(ids))
        rows = np.concatenate([np.nonzero(groups == ids[i])[0] for i in picked])
        assert np.allclose(draws[b], values[:, rows].mean(axis=1))
    assert np.allclose(mean, values.mean(axis=1))


def reference_previous(tokens: torch.Tensor, valid: torch.Tensor, k: int, classes: tuple[int, ...]) -> torch.Tensor:
    out = torch.full_like(tokens, -1)
    for b in range(tokens.shape[0]):
        for t in range(tokens.shape[1]):
            if t - k >= 0 and valid[b, t] and valid[b, t - k] and int(tokens[b, t - k]) in classes:
                out[b, t] = classes.index(int(tokens[b, t - k]))
    return out


def test_label_makers_match_loop_references():
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 9, (4, 15), generator=generator)
    valid = torch.rand(4, 15, generator=generator) > 0.2
    batch = TokenBatch(tokens, valid)
    classes = most_frequent_tokens([batch], 4)
    counts = torch.bincount(tokens[valid], minlength=9)
    assert [int(counts[c]) for c in classes] == sorted(counts.tolist(), reverse=True)[:4]
    made = PreviousTokenLabels((1, 3), classes)(batch, torch.arange(4))
    for k in (1, 3):
        assert torch.equal(made[str(k)], reference_previous(tokens, valid, k, classes))
    rows = RowLabels("next", torch.tensor([2, 0, 1, 1, 2, 0]), positions="last")(batch, torch.tensor([2, 3, 4, 5]))
    for b in range(4):
        last = int(torch.nonzero(valid[b]).max())
        assert rows["next"][b, last] == [1, 1, 2, 0][b] and (rows["next"][b] >= 0).sum() == 1
    combined = CombinedLabels(TokenClassLabels(torch.arange(9) % 2), RowLabels("document", torch.arange(4)))
    both = combined(batch, torch.arange(4))
    assert torch.equal(both["word"], torch.where(valid, tokens % 2, -1))
    assert torch.equal(both["document"], torch.where(valid, torch.arange(4)[:, None].expand(4, 15), -1))


@pytest.fixture(scope="module")
def shift_scores() -> LinearProbeScores:
    tokens = torch.randint(0, 12, (64, 20), generator=torch.Generator().manual_seed(1))
    model = PreviousTokenWriter()
    labels = PreviousTokenLabels((1, 2), most_frequent_tokens([tokens], 6))
    probe = LinearProbe(labels, hooks=residual_hooks(model), max_examples=800, n_folds=4, n_boot=200)
    (result,) = run_probes(model, [probe], list(tokens.split(16)), progress=False)
    return result


def test_previous_token_is_read_where_the_model_wrote_it(shift_scores):
    assert shift_scores.hooks == ["hook_embed", "blocks.0.hook_resid_post"]
    assert shift_scores.baseline["1"] == "token_identity"
    assert shift_scores.statistic["1"] == "gain over token identity"
    assert shift_scores.accuracy["1"][1] > 0.97 and shift_scores.gain["1"][1] > 0.5
    assert shift_scores.accuracy["1"][0] < shift_scores.majority_baseline["1"] + 0.1  # i.i.d. tokens
    assert shift_scores.accuracy["2"].max() < shift_scores.majority_baseline["2"] + 0.1
    held = shift_scores.held_out_best_layer("1", n_boot=200)
    assert held["layer"] == 1 and held["ci"][0] > 0.5 and held["p_value"] < 0.01


@pytest.mark.parametrize("suffix", ["", ".json"])
def test_save_load_round_trip(shift_scores, tmp_path, suffix):
    path = shift_scores.save(tmp_path / f"linear{suffix}")
    loaded = ProbeResult.load(path)
    assert isinstance(loaded, LinearProbeScores) and results_close(loaded, shift_scores)
    assert loaded.provenance.settings == shift_scores.provenance.settings
    frame = loaded.to_dataframe()
    assert list(frame["key"]) == ["1", "1", "2", "2"]
    assert frame["accuracy"].tolist() == pytest.approx(torch.cat([shift_scores.accuracy[k] for k in "12"]).tolist())


def test_bad_input_says_what_to_do():
    labels = TokenClassLabels(torch.arange(12) % 3)
    with pytest.raises(ConfigError, match="scikit-learn classifier"):
        LinearProbe(labels, classifier=lambda: "not a classifier")
    with pytest.raises(ConfigError, match="max_examples"):
        LinearProbe(labels, max_examples=0)
    with pytest.raises(ProbeStateError, match="before any data"):
        LinearProbe(labels).bind(INFO).compute()
    tokens, _, activations = planted(n_rows=4)
    probe = LinearProbe(labels, hooks=HOOKS).bind(INFO)
    with pytest.raises(InputError, match="batch pos"):
        probe.update({"hook_embed": activations["hook_embed"][:, :3], HOOKS[1]: activations[HOOKS[1]]},
                     batch_of(tokens))
    one_class = feed(LinearProbe(TokenClassLabels(torch.zeros(12, dtype=torch.long)), hooks=HOOKS), tokens,
                     activations, 4)
    with pytest.raises(InputError, match="at least 2"):
        one_class.compute()
    with pytest.raises(InputError, match="one class per row"):
        feed(LinearProbe(RowLabels("document", torch.arange(2)), hooks=HOOKS), tokens, activations, 4)


def test_a_key_without_enough_data_is_nan_and_the_others_still_count(tmp_path):
    tokens, classes, activations = planted()
    labels = CombinedLabels(TokenClassLabels(classes), RowLabels("document", torch.zeros(48, dtype=torch.long)))
    result = feed(LinearProbe(labels, hooks=HOOKS, max_examples=300, n_boot=100), tokens, activations, 16).compute()
    assert result.accuracy["word"][0] > 0.9
    assert torch.isnan(result.accuracy["document"]).all() and result.n_examples["document"] == 300
    loaded = ProbeResult.load(result.save(tmp_path / "partial"))
    assert results_close(loaded, result) and loaded.correct["document"].shape == (2, 0)


def test_unseen_words_drop_test_word_types_from_training_so_a_word_lookup_cannot_pay():
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(2)
    words = rng.integers(0, 30, 1200)
    documents = np.repeat(np.arange(60), 20)
    labels = rng.integers(0, 3, 30)[words]  # a random class per word: only memorising words helps
    features = np.eye(30)[words]
    by_document = out_of_fold_correct(KNeighborsClassifier(1), features, labels, documents, 5).mean()
    unseen = out_of_fold_correct(KNeighborsClassifier(1), features, labels, documents, 5, unseen=words).mean()
    assert by_document == 1.0  # every test word was seen in another document
    assert unseen < 0.5  # three classes, words never seen: chance


def test_an_aborted_batch_leaves_the_reservoir_as_it_was():
    tokens, classes, _ = planted()
    activations = index_activations(tokens)
    reference = feed(LinearProbe(TokenClassLabels(classes), hooks=["index"], max_examples=50, seed=5), tokens,
                     activations, 12)
    probe = LinearProbe(TokenClassLabels(classes), hooks=["index"], max_examples=50, seed=5).bind(INFO)
    for start in range(0, 48, 12):
        part = slice(start, start + 12)
        probe.begin_batch(batch_of(tokens[part]))
        probe.fold({"index": activations["index"][part]}, batch_of(tokens[part]))
        probe.abort_batch()  # e.g. a later layer ran out of memory: the runner retries the batch
        probe.update({"index": activations["index"][part]}, batch_of(tokens[part]))
    assert kept_positions(probe, tokens) == kept_positions(reference, tokens)
    assert np.array_equal(probe._priority, reference._priority) and probe.n_sequences == 48


def test_probe_linear_rejects_a_target_without_labels_before_loading_the_model(tmp_path, capsys):
    from analyses.cli import main

    assert main(["probe-linear", "--model", "no-such-model", "--target", "next", "--out", str(tmp_path / "o")]) == 2
    assert "needs a toy run folder" in capsys.readouterr().err  # not "unknown model": nothing was loaded
    assert main(["probe-linear", "--model", "x", "--target", "parent", "--out", str(tmp_path / "o"),
                 "--set", "n_folds=1"]) == 2
    assert "n_folds" in capsys.readouterr().err and not (tmp_path / "o").exists()


def test_each_layer_is_released_once_folded():
    import gc
    import weakref

    tokens, classes, activations = planted(n_rows=8)
    probe = LinearProbe(TokenClassLabels(classes), hooks=HOOKS, max_examples=50).bind(INFO)
    assert probe.hook_groups(INFO) == ((HOOKS[0],), (HOOKS[1],))  # one layer per group
    batch = batch_of(tokens)
    probe.begin_batch(batch)
    layer = activations["hook_embed"].clone()
    alive = weakref.ref(layer)
    probe.fold({"hook_embed": layer}, batch)
    del layer
    gc.collect()
    assert alive() is None  # only the kept positions were copied out of the layer
    probe.fold({HOOKS[1]: activations[HOOKS[1]]}, batch)
    probe.end_batch(batch)
    assert probe.n_kept == 50 and set(probe._features) == set(HOOKS)


@pytest.mark.parametrize("kind", ["estimator", "factory"])
def test_any_scikit_learn_classifier_can_be_the_probe(kind):
    from sklearn.linear_model import LogisticRegression, RidgeClassifier

    classifier = RidgeClassifier(alpha=1.0) if kind == "estimator" else (lambda: LogisticRegression(C=0.1))
    tokens, classes, activations = planted()
    probe = LinearProbe(TokenClassLabels(classes), hooks=HOOKS, max_examples=400, n_boot=100, classifier=classifier)
    result = feed(probe, tokens, activations, 16).compute()
    assert result.accuracy["word"][0] > 0.95 and abs(float(result.accuracy["word"][1]) - 1 / 3) < 0.1
    assert ("RidgeClassifier" if kind == "estimator" else "C=0.1") in result.provenance.settings["classifier"]
