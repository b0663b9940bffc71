"""embedding_topic_similarity: closed form vs nested loops, a known answer, errors."""

from __future__ import annotations

import pytest
import torch

from probes.embedding_topics import embedding_topic_similarity
from probes.errors import ConfigError, InputError


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
