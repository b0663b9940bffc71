"""Sequential Monte Carlo p-values: hand-made sequences with known stopping draws, uniform (valid) under a null, and
the fixed-count decision on the same draws."""

from __future__ import annotations

import pytest
import torch

from probes.core.errors import ConfigError, InputError
from probes.stats.nulls import permutation_p_value
from probes.stats.sequential import SequentialRule, fewest_draws, sequential_null


def _from(values: torch.Tensor):
    calls = []

    def draw(start: int, stop: int) -> torch.Tensor:
        calls.append((start, stop))
        return values[start:stop]

    return draw, calls


@pytest.mark.parametrize(("max_draws", "alpha", "hits"), [(100, 0.01, 1), (150, 0.01, 2), (200, 0.01, 2),
                                                          (1000, 0.01, 10), (99, 0.05, 5), (20, 0.01, 1),
                                                          (250, 0.01, 3), (50, 0.05, 3), (450, 0.01, 5)])
def test_an_entry_stops_at_the_hits_after_which_p_cannot_reach_alpha(max_draws, alpha, hits):
    rule = SequentialRule(max_draws, alpha)
    assert rule.stop_hits == hits
    assert (1 + hits) / (1 + max_draws) >= alpha  # the fixed-count p can no longer pass
    assert hits / max_draws >= alpha  # nor the stopped p, h / n_h with n_h <= max_draws
    assert hits == 1 or (hits - 1) / max_draws < alpha  # the fewest hits that guarantee both


def test_two_hits_in_250_draws_do_not_stop_the_null_where_the_fixed_count_p_fails():
    """alpha * max_draws = 2.5: the stop needs ceil(2.5) = 3 hits. Two hits (draws 210 and 240) leave the fixed-count
    p at 3 / 251 = 0.0120, a fail at 0.01; stopping at the second hit (rounding 2.5 down to 2) would give
    2 / 240 = 0.0083, a pass the fixed count never gives."""
    values = torch.zeros(250)
    values[[209, 239]] = 2.0
    draw, _ = _from(values)
    result = sequential_null(torch.tensor(1.0), draw, SequentialRule(250, 0.01, group=10))
    assert not bool(result.stopped) and result.n_drawn == 250 and int(result.used) == 250
    assert float(result.p_value) == pytest.approx(3 / 251)
    assert float(result.p_value) >= 0.01 and float(permutation_p_value(torch.tensor(1.0), values)) >= 0.01
    values[244] = 2.0  # a third hit at draw 245: the decision is known there
    result = sequential_null(torch.tensor(1.0), _from(values)[0], SequentialRule(250, 0.01, group=10))
    assert bool(result.stopped) and int(result.used) == 245 and float(result.p_value) == pytest.approx(3 / 245)


def test_a_hand_made_sequence_stops_in_the_group_of_its_first_hit():
    values = torch.zeros(100)
    values[6] = 5.0  # draw 7 reaches the observed 1.0
    draw, calls = _from(values)
    result = sequential_null(torch.tensor(1.0), draw, SequentialRule(100, 0.01, group=10))
    assert calls == [(0, 10)]
    assert result.n_drawn == 10 and int(result.used) == 7 and bool(result.stopped)
    assert float(result.p_value) == pytest.approx(1 / 7)
    assert "stopped after 10 of 100 draws" in result.why()


def test_an_effect_no_draw_reaches_uses_every_draw_and_the_fixed_count_p():
    draw, calls = _from(torch.zeros(200))
    result = sequential_null(torch.tensor(1.0), draw, SequentialRule(200, 0.01, group=64))
    assert calls == [(0, 64), (64, 128), (128, 192), (192, 200)]
    assert float(result.p_value) == pytest.approx(1 / 201) and not bool(result.stopped)
    assert result.why() == "all 200 draws: p could still fall below the level until the last"


def test_growing_groups_and_a_first_group_measured_beside_the_observed_value():
    draw, calls = _from(torch.zeros(1000))
    rule = SequentialRule(1000, 0.01, group=10, growth=10.0)
    result = sequential_null(torch.tensor(1.0), draw, rule, first=torch.zeros(10))
    assert calls == [(10, 110), (110, 1000)]  # 10 (given), 100, then the rest
    assert result.n_drawn == 1000 and float(result.p_value) == pytest.approx(1 / 1001)
    values = torch.zeros(1000)
    values[[3, 15, 40, 41, 42, 43, 44, 45, 46, 47]] = 2.0  # the 10th hit (ceil(0.01 * 1000)) at draw 48
    draw, calls = _from(values)
    result = sequential_null(torch.tensor(1.0), draw, rule, first=values[:10])
    assert calls == [(10, 110)] and int(result.used) == 48 and float(result.p_value) == pytest.approx(10 / 48)
    with pytest.raises(ConfigError, match="growth"):
        SequentialRule(100, growth=0.5)


def test_several_entries_draw_until_each_is_settled_and_keep_their_own_stopping_draw():
    values = torch.zeros(100, 3)
    values[2, 0] = 9.0  # entry 0: its hit at draw 3
    values[25, 1] = 9.0  # entry 1: at draw 26
    draw, _ = _from(values)  # entry 2 never reached
    result = sequential_null(torch.tensor([1.0, 1.0, 1.0]), draw, SequentialRule(100, 0.01, group=10))
    assert result.n_drawn == 100 and result.used.tolist() == [3, 26, 100]
    assert result.p_value.tolist() == pytest.approx([1 / 3, 1 / 26, 1 / 101])


def test_p_values_are_uniform_under_the_null():
    """4,000 independent nulls at once: observed and draws exchangeable, so P(p <= u) <= u for every u."""
    g = torch.Generator().manual_seed(0)
    n = 4000
    values = torch.randn(60, n, generator=g, dtype=torch.float64)
    observed = torch.randn(n, generator=g, dtype=torch.float64)
    result = sequential_null(observed, lambda a, b: values[a:b], SequentialRule(60, 0.05, group=5))
    assert 0.4 < float(result.stopped.double().mean()) < 1.0  # many stop early, some draw all
    for u in (0.02, 0.05, 0.1, 0.3, 0.6):
        share = float((result.p_value <= u).double().mean())
        assert share <= u + 3 * (u * (1 - u) / n) ** 0.5, u
    assert float((result.p_value <= 0.3).double().mean()) > 0.25  # not conservative to uselessness


@pytest.mark.parametrize("max_draws", [200, 250])  # alpha * max_draws 2 and 2.5: 2 and 3 hits stop an entry
def test_the_decision_at_alpha_is_the_fixed_count_decision_on_the_same_draws(max_draws):
    g = torch.Generator().manual_seed(1)
    n = 3000
    values = torch.randn(max_draws, n, generator=g, dtype=torch.float64)
    observed = torch.randn(n, generator=g, dtype=torch.float64) + torch.linspace(0, 4, n, dtype=torch.float64)
    result = sequential_null(observed, lambda a, b: values[a:b], SequentialRule(max_draws, 0.01, group=20))
    fixed = permutation_p_value(observed, values)
    assert torch.equal(result.p_value < 0.01, fixed < 0.01)
    kept = ~result.stopped
    torch.testing.assert_close(result.p_value[kept], fixed[kept])
    assert bool((result.p_value[result.stopped] >= 0.01).all()) and bool((fixed[result.stopped] >= 0.01).all())
    assert result.n_drawn == max_draws  # the strong effects draw every time
    hits = (values >= observed).sum(0)
    assert int((hits == 2).sum()) > 10  # on the edge: stopped at their 2nd hit, they would get 2 / n_h < 0.01


def test_a_lower_tail_and_nan_entries():
    values = torch.ones(50)
    nan = sequential_null(torch.tensor(float("nan")), _from(values)[0], SequentialRule(50, 0.01))
    assert torch.isnan(nan.p_value) and nan.n_drawn == 0  # nothing to decide: nothing drawn
    values = torch.full((50,), 5.0)
    values[[1, 6, 7]] = 1.0  # below the observed 2.0 at draws 2, 7 and 8
    below = sequential_null(torch.tensor(2.0), _from(values)[0], SequentialRule(50, 0.05), alternative="less")
    # ceil(0.05 * 50 - 1e-12) = 3 hits needed: the third at draw 8, p = 3 / 8 (2 hits would stop at 7: 2 / 7)
    assert below.n_drawn == 10 and int(below.used) == 8 and float(below.p_value) == pytest.approx(3 / 8)


def test_bad_rules_and_draws_are_refused():
    with pytest.raises(ConfigError, match="alpha must lie in"):
        SequentialRule(100, 1.5)
    with pytest.raises(ConfigError, match="max_draws"):
        SequentialRule(0)
    with pytest.raises(InputError, match=r"must return 10 draws of shape \(2,\)"):
        sequential_null(torch.zeros(2), lambda a, b: torch.zeros(b - a), SequentialRule(100))
    with pytest.raises(ConfigError, match="alternative"):
        sequential_null(torch.zeros(()), lambda a, b: torch.zeros(b - a), SequentialRule(100), alternative="both")


def test_a_null_too_small_to_reach_its_level_is_flagged(caplog):
    with caplog.at_level("WARNING", logger="probes.stats.sequential"):
        result = sequential_null(torch.tensor(1.0), lambda a, b: torch.zeros(b - a), SequentialRule(20, alpha=0.01))
        assert "cannot give a p-value below 0.0476" in caplog.text and "draw at least 100" in caplog.text
        assert float(result.p_value) == pytest.approx(1 / 21)  # the smallest p 20 draws give, above the level
        caplog.clear()
        sequential_null(torch.tensor(1.0), lambda a, b: torch.zeros(b - a), SequentialRule(99, alpha=0.01))
        assert "cannot give a p-value below 0.01," in caplog.text  # 1/100 is the level itself, not below it
        caplog.clear()
        sequential_null(torch.tensor(1.0), lambda a, b: torch.zeros(b - a), SequentialRule(100, alpha=0.01))
        assert caplog.text == ""


@pytest.mark.parametrize(("alpha", "fewest"), [(0.01, 100), (0.05, 20), (0.03, 33), (0.5, 2), (0.3, 3)])
def test_fewest_draws_is_the_first_count_whose_smallest_p_lies_below_the_level(alpha, fewest):
    assert 1 / (1 + fewest) < alpha <= 1 / fewest
    assert fewest_draws(alpha) == fewest
