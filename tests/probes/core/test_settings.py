"""Probe settings come from the constructor: every argument is in them, described as JSON, with nothing to keep by
hand."""

from __future__ import annotations

import json

import pytest
import torch

from probes import CopierProbe, HeadScoreProbe, KeyTokenAttentionProbe, TopicAttentionProbe
from probes.core.settings import constructor_settings, describe_setting
from probes.linear.labels import TokenClassLabels


def test_settings_are_the_constructor_arguments_as_json():
    labels = torch.tensor([0, 1, -1, 1])
    probe = TopicAttentionProbe(labels, n_permutations=3, permutation_seed=7)
    settings = probe.settings()
    assert list(settings) == ["token_topics", "has_topic", "n_permutations", "permutation_seed", "null",
                              "permutation_start"]
    assert settings["token_topics"] == [0, 1, -1, 1] and settings["has_topic"] is None
    assert (settings["n_permutations"], settings["permutation_seed"]) == (3, 7)
    json.dumps(settings)  # JSON as it is
    assert CopierProbe(4).settings() == {"max_distance": 4, "min_query": 4}  # stored as the probe uses it
    assert HeadScoreProbe(["induction"]).settings() == {"kinds": ["induction"]}
    key = KeyTokenAttentionProbe([3, 1], None, query_position="last", window=2).settings()
    assert key == {"query_tokens": [3, 1], "key_tokens": None, "query_position": "last", "exclude_self": True,
                   "window": 2, "causal": None, "layers": None, "distance_matched": False}


def test_probes_with_other_arguments_do_not_merge_and_equal_ones_do():
    a, b = TopicAttentionProbe(torch.tensor([0, 1])), TopicAttentionProbe(torch.tensor([1, 0]))
    assert a.settings() != b.settings()
    assert a.settings() == TopicAttentionProbe(torch.tensor([0, 1])).settings()


def test_describe_setting_by_kind():
    big = torch.arange(1000)
    described = describe_setting(big)
    assert described["shape"] == [1000] and len(described["sha256"]) == 64
    assert describe_setting(torch.arange(1000)) == described and describe_setting(big + 1) != described
    assert describe_setting(torch.tensor([0.5, 1.0]))["shape"] == [2]  # floats are fingerprinted, never listed
    assert describe_setting((1, (2, 3), range(2))) == [1, [2, 3], [0, 1]]
    assert describe_setting({"a": 1}) == {"a": 1}
    maker = TokenClassLabels(torch.tensor([0, 1, 1]))
    assert describe_setting(maker) == maker.settings()
    assert describe_setting(object).startswith("<class")


def test_a_probe_that_does_not_store_an_argument_is_told_how_to_fix_it():
    class Forgetful(CopierProbe):
        def __init__(self, max_distance: int = 2, *, forgotten: int = 1) -> None:
            super().__init__(max_distance)

    with pytest.raises(TypeError, match=r"store each constructor argument.*missing: forgotten"):
        constructor_settings(Forgetful())
