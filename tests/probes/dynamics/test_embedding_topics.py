"""embedding_topic_similarity: closed form vs nested loops, a known answer, errors."""

from __future__ import annotations

import pytest
import torch

from probes.core.errors import ConfigError, InputError
from probes.dynamics.embedding_topics import embedding_topic_similarity


def reference(embedding, topics):
    sums = {"same_dot": 0.0, "diff_dot": 0.0, "same_cos": 0.0, "diff_cos": 0.0}
    n_same = n_diff = 0
    for i in range(len(topics)):
        for j in range(len(topics)):
            if i == j or topics[i] < 0 or topics[j] < 0:
                continue
            dot = float(embedding[i].double() @ embedding[j].double())
            cos = dot / float(embedding[i].double().norm() * embedding[j].double().norm())
            kind = "same" if topics[i] == topics[j] else "diff"
            sums[f"{kind}_dot"] += dot
            sums[f"{kind}_cos"] += cos
            n_same += kind == "same"
            n_diff += kind == "diff"
    return {"same_dot": sums["same_dot"] / n_same, "diff_dot": sums["diff_dot"] / n_diff,
            "same_cos": sums["same_cos"] / n_same, "diff_cos": sums["diff_cos"] / n_diff,
            "n_same": n_same, "n_diff": n_diff}


def test_matches_nested_loop_reference():
    g = torch.Generator().manual_seed(0)
    embedding = torch.randn(15, 6, generator=g) + torch.randn(3, 6, generator=g).repeat_interleave(5, 0)
    topics = torch.arange(15) // 5
    topics[[2, 9]] = -1
    result = embedding_topic_similarity(embedding, topics)
    ref = reference(embedding, topics)
    assert result.same_topic_pairs == ref["n_same"] and result.different_topic_pairs == ref["n_diff"]
    assert result.same_topic_dot == pytest.approx(ref["same_dot"], rel=1e-9)
    assert result.different_topic_dot == pytest.approx(ref["diff_dot"], rel=1e-9, abs=1e-12)
    assert result.same_topic_cosine == pytest.approx(ref["same_cos"], rel=1e-9)
    assert result.different_topic_cosine == pytest.approx(ref["diff_cos"], rel=1e-9, abs=1e-12)


def test_known_answer_orthogonal_topic_directions():
    # every word of topic t is (t+1) * e_t: same-topic cosine 1, different-topic cosine and dot 0.
    topics = torch.tensor([0, 0, 1, 1, 1, 2, 2])
    embedding = torch.nn.functional.one_hot(topics, 3).float() * (topics[:, None] + 1)
    result = embedding_topic_similarity(embedding, topics)
    assert result.same_topic_cosine == pytest.approx(1.0)
    assert result.different_topic_cosine == pytest.approx(0.0)
    assert result.different_topic_dot == pytest.approx(0.0)
    # same-topic dots: topic 0 pairs 2 x 1, topic 1 pairs 6 x 4, topic 2 pairs 2 x 9 -> 44 / 10
    assert result.same_topic_dot == pytest.approx(44 / 10)
    assert result.same_topic_pairs == 10 and result.different_topic_pairs == 7 * 7 - 7 - 10


def test_errors():
    with pytest.raises(InputError, match="2-d"):
        embedding_topic_similarity(torch.zeros(3), torch.tensor([0, 1, 1]))
    with pytest.raises(InputError, match="every row"):
        embedding_topic_similarity(torch.zeros(3, 2), torch.tensor([0, 1]))
    with pytest.raises(InputError, match="same-topic and different-topic"):
        embedding_topic_similarity(torch.ones(3, 2), torch.tensor([0, 1, 2]))
    with pytest.raises(ConfigError):
        embedding_topic_similarity(torch.ones(3, 2), torch.tensor([-1, -1, -1]))


def _planted(strength: float, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    topics = torch.arange(60) % 4
    topics[::7] = -1
    common = torch.randn(16, generator=g) * 5  # a shared direction, as in anisotropic pretrained embeddings
    directions = torch.randn(4, 16, generator=g)
    embedding = common + torch.randn(60, 16, generator=g) + strength * directions[topics.clamp(min=0)]
    return embedding, topics


def test_centred_measures_and_null_match_a_direct_recomputation():
    from probes.dynamics.embedding_topics import EMBEDDING_MEASURES, embedding_topic_test
    from probes.stats.nulls import label_permutations

    embedding, topics = _planted(0.5)
    test = embedding_topic_test(embedding, topics, n_permutations=20, n_boot=50, seed=4)
    centred = embedding.double() - embedding.double().mean(0)
    ref = reference(centred, topics)
    assert test.same["centred_dot"] == pytest.approx(ref["same_dot"], rel=1e-9)
    assert test.different["centred_cosine"] == pytest.approx(ref["diff_cos"], rel=1e-9, abs=1e-12)
    for p, labels in enumerate(label_permutations(topics, 20, seed=4)):
        for measure in EMBEDDING_MEASURES:
            direct = embedding_topic_similarity(embedding, labels, center=measure.startswith("centred"))
            kind = "cosine" if measure.endswith("cosine") else "dot"
            expected = getattr(direct, f"same_topic_{kind}") - getattr(direct, f"different_topic_{kind}")
            assert float(test.null_gaps[measure][p]) == pytest.approx(expected, rel=1e-9, abs=1e-12)
    for measure in EMBEDDING_MEASURES:
        low, high = test.gap_ci[measure]
        assert low <= test.gap[measure] <= high


def test_planted_topics_beat_the_null_and_random_embeddings_do_not():
    from probes.dynamics.embedding_topics import embedding_topic_test

    planted = embedding_topic_test(*_planted(1.0), n_permutations=200, n_boot=100)
    unplanted = embedding_topic_test(*_planted(0.0), n_permutations=200, n_boot=100)
    for measure in ("centred_dot", "centred_cosine"):
        assert planted.p_value[measure] == pytest.approx(1 / 201)
        assert unplanted.p_value[measure] > 0.05
    # the common direction inflates raw cosines for every pair alike
    assert unplanted.same["cosine"] > 0.5 and abs(unplanted.gap["cosine"]) < 0.1


def test_a_sequential_null_draws_the_same_permutations_and_keeps_the_decision():
    from probes.dynamics.embedding_topics import EMBEDDING_MEASURES, embedding_topic_test

    for strength in (1.0, 0.0):
        fixed = embedding_topic_test(*_planted(strength), n_permutations=300, n_boot=50, seed=2)
        sequential = embedding_topic_test(*_planted(strength), n_permutations=300, n_boot=50, seed=2, stop_at=0.01)
        drawn = len(sequential.null_gaps["centred_dot"])
        for measure in EMBEDDING_MEASURES:  # the first draws are the fixed null's, and so is every decision
            torch.testing.assert_close(sequential.null_gaps[measure], fixed.null_gaps[measure][:drawn])
            assert (sequential.p_value[measure] < 0.01) == (fixed.p_value[measure] < 0.01)
        if strength:  # a planted topic is beaten by every permutation: all of them are drawn
            assert drawn == 300 and "all 300" in sequential.null_stop
        else:  # none planted: every measure settled within the first groups (10, 100)
            assert drawn <= 110 and "stopped after" in sequential.null_stop
