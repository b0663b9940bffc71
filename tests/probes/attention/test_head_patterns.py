"""Named and custom head patterns: nested-loop references, custom functions, fixed matrices, bad input."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.head_detector import compute_head_attention_similarity_score

import probes
from probes import HEAD_PATTERNS, ConfigError, HeadPattern, InputError, head_pattern
from tests.hooked_models import OracleModel
from tests.probes.attention.test_head_scores import probe_on, random_case


def reference_targets(name: str, tokens: torch.Tensor, valid: torch.Tensor, b: int, q: int) -> list[int]:
    """Straight from the definitions in probes/attention/head_patterns.py, one query at a time."""
    n = tokens.shape[1]
    if not valid[b, q]:
        return []
    keys = [k for k in range(n) if valid[b, k]]
    if name == "self":
        return [k for k in keys if k == q]
    if name == "first_token":
        return keys[:1]
    kind, distance = name.split(":")
    distance = int(distance)
    if kind == "offset":
        return [k for k in keys if k == q - distance]
    return [k for k in keys if k - distance >= 0 and k - distance < q and valid[b, k - distance]
            and tokens[b, k - distance] == tokens[b, q]]


@pytest.mark.parametrize("name", ["self", "first_token", "offset:1", "offset:3", "offset:-2", "induction:1",
                                  "induction:2"])
def test_named_patterns_match_a_loop_reference(name):
    tokens, valid, _patterns, _info = random_case(4, n_pos=10)
    mask = head_pattern(name).mask(tokens, valid)
    for b in range(tokens.shape[0]):
        for q in range(tokens.shape[1]):
            assert mask[b, q].nonzero().flatten().tolist() == reference_targets(name, tokens, valid, b, q), (b, q)


def test_builtin_names_are_the_default_kinds():
    tokens, valid, _, _ = random_case(2)
    assert torch.equal(head_pattern("induction:1").mask(tokens, valid), HEAD_PATTERNS["induction"].mask(tokens, valid))
    assert torch.equal(head_pattern("offset:1").mask(tokens, valid),
                       HEAD_PATTERNS["previous_token"].mask(tokens, valid))


def test_custom_pattern_scores_like_a_builtin_with_the_same_targets():
    """A user function equal to previous_token gives exactly the previous_token scores, split or not."""
    tokens, valid, patterns, info = random_case(6, n_batch=4)
    mine = HeadPattern("my_previous", lambda tok, val: torch.ones(tok.shape[1], tok.shape[1]).tril(-1).triu(-1)
                       .bool().expand(tok.shape[0], -1, -1))
    result = probe_on(patterns, tokens, valid, info, kinds=("previous_token", mine), split=2)
    torch.testing.assert_close(result.scores["my_previous"], result.scores["previous_token"], rtol=0, atol=0)
    assert result.chance["my_previous"] == result.chance["previous_token"]
    assert result.provenance.settings["kinds"] == ["previous_token", "my_previous"]


def test_a_planted_head_is_found_by_its_custom_pattern():
    """OracleModel's head 3 attends uniformly over k <= q: a 'uniform causal' target set scores it 1."""
    model = OracleModel()
    everything = HeadPattern("all_visible", lambda tok, val: torch.ones(tok.shape[1], tok.shape[1]).tril().bool()
                             .expand(tok.shape[0], -1, -1))
    scores = probes.head_scores(model, torch.randint(0, 8, (4, 16), generator=torch.Generator().manual_seed(0)),
                                kinds=[everything, "self"])
    assert scores.scores["all_visible"][:, 3].tolist() == pytest.approx([1.0] * model.cfg.n_layers)
    assert scores.scores["all_visible"][:, 0].max() == pytest.approx(1.0)  # previous-token is also a visible key


def test_fixed_matrix_matches_detect_head_rescaled():
    tokens, _, patterns, info = random_case(11, n_batch=1, n_pos=16, n_layers=1, n_heads=1, vocab=5)
    valid = torch.ones_like(tokens, dtype=torch.bool)
    matrix = (torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.7).tril().float()
    result = probe_on(patterns, tokens, valid, info, kinds=(HeadPattern.from_matrix("fixed", matrix),))
    theirs = compute_head_attention_similarity_score(patterns[0][0, 0], matrix, exclude_bos=False,
                                                     exclude_current_token=False, error_measure="mul")
    rescaled = float(result.scores["fixed"][0, 0]) * result.rows_with_target["fixed"] / 16
    assert rescaled == pytest.approx(theirs, abs=1e-6)


def test_bad_patterns_say_what_to_do():
    tokens, valid, patterns, info = random_case(1)
    with pytest.raises(ConfigError, match="Unknown head pattern 'offset:x'"):
        head_pattern("offset:x")
    with pytest.raises(ConfigError, match="induction:D"):
        head_pattern("induction:0")
    with pytest.raises(ConfigError, match="name must be letters"):
        HeadPattern("a/b", lambda t, v: t)
    with pytest.raises(ConfigError, match="distinct patterns"):
        probes.HeadScoreProbe(["self", HeadPattern("self", lambda t, v: t)])
    with pytest.raises(InputError, match=r"returned \(3, 12\); it must return a mask"):
        probe_on(patterns, tokens, valid, info, kinds=(HeadPattern("flat", lambda t, v: v),))
    with pytest.raises(InputError, match="return a boolean mask"):
        probe_on(patterns, tokens, valid, info,
                 kinds=(HeadPattern("soft", lambda t, v: torch.rand(*t.shape, t.shape[1])),))
    with pytest.raises(InputError, match="Give sequences of length 5"):
        probe_on(patterns, tokens, valid, info, kinds=(HeadPattern.from_matrix("m", torch.eye(5)),))


def test_a_user_defined_two_back_pattern_scores_a_planted_two_back_head_one():
    """The issue's example: "attend to the token two back" as a user function finds the planted head."""
    tokens, valid, patterns, info = random_case(9, n_batch=3, n_pos=14, n_layers=2, n_heads=3)
    n = tokens.shape[1]
    two_back = torch.zeros(n, n)
    two_back[2:, :-2] = torch.eye(n - 2)
    two_back[:2, :2] = torch.eye(2)  # the first two positions have no token two back: they attend to themselves
    patterns[1][:, 2] = two_back  # plant it at L1H2
    mine = HeadPattern("two_back", lambda tok, val: torch.ones(tok.shape[1], tok.shape[1], dtype=torch.bool)
                       .tril(-2).triu(-2).expand(tok.shape[0], -1, -1))
    valid = torch.ones_like(valid)
    result = probe_on(patterns, tokens, valid, info, kinds=(mine,))
    assert float(result.scores["two_back"][1, 2]) == pytest.approx(1.0)
    assert result.top_heads("two_back", 1)[0][:2] == (1, 2)
    assert float(result.scores["two_back"][0].max()) < 0.9  # the random heads do not
