"""The toys' orders of events as findings: a known order holds per seed and over seeds, a reversed one is absent,
a frozen run (learning rate 0) has no event and so no order (0, p = 1); on the real topic toy (fast preset, one
seed) W_V's displacement from initialisation crosses half-way before W_K/W_Q's and the learning-rate-0 control
has neither event."""

from __future__ import annotations

import dataclasses
import math

import pytest

from analyses.topic.config import PRESETS
from analyses.topic.findings import topic_model
from analyses.topic.order import (
    STAGED_VARIANT,
    displacement_curves,
    frozen_history,
    train_staged,
    value_before_key_query,
    value_key_query_order,
)
from analyses.toy_findings import ToyFinding, judge_against_init
from analyses.toy_orders import min_effect, order_finding
from probes.dynamics.event_orders import ExactOrder
from toymodels.topic.training import MaskedLMData
from toymodels.training import History

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py
NOTHING = (math.nan, math.nan)


def _order(earlier: float, later: float) -> ExactOrder:
    """Two events one recorded step (10) wide each."""
    return ExactOrder("a", "b", earlier, later, (earlier - 5, earlier + 5), (later - 5, later + 5))


def _seed(seed: int, earlier: float, later: float):
    trained = order_finding([_order(earlier, later)], statistic="b minus a", min_effect=20.0)
    frozen = order_finding([ExactOrder("a", "b", math.nan, math.nan, NOTHING, NOTHING)], statistic="b minus a",
                           min_effect=20.0)
    return judge_against_init({"order": trained}, {"order": frozen}, seed)


def test_a_known_order_holds_per_seed_and_over_seeds():
    seeds = [_seed(s, 80.0, 80.0 + gap) for s, gap in enumerate((180.0, 190.0, 150.0))]
    for one, gap in zip(seeds, (180.0, 190.0, 150.0)):
        finding = one.findings["order"]
        assert (finding.value, finding.ci, finding.p_value) == (gap, (gap - 10, gap + 10), 0.0)
        assert finding.holds and finding.control_value == 0.0
        assert (one.control["order"].value, one.control["order"].p_value) == (0.0, 1.0)  # no event: no order
        assert not one.control["order"].holds
    over = ToyFinding("toy", "order", (0, 1, 2), tuple(s.findings["order"] for s in seeds),
                      tuple(s.control["order"] for s in seeds))
    assert over.value == pytest.approx(520 / 3) and over.holds and over.held == 3 and over.reference == 0.0
    assert not over.control_finding().holds


def test_a_reversed_order_is_absent_and_an_unresolved_one_does_not_hold():
    seeds = [_seed(s, 200.0, 200.0 - gap) for s, gap in enumerate((100.0, 120.0, 90.0))]
    assert not any(one.findings["order"].holds for one in seeds)
    assert all(one.findings["order"].p_value == 1.0 for one in seeds)
    over = ToyFinding("toy", "order", (0, 1, 2), tuple(s.findings["order"] for s in seeds),
                      tuple(s.control["order"] for s in seeds))
    assert over.value < 0 and not over.holds and over.verdict == "absent"
    close = order_finding([_order(100.0, 105.0)], statistic="b minus a", min_effect=20.0)
    assert close.ci == (-5.0, 15.0) and close.p_value == 1.0 and not close.holds  # the grid cannot order them


def test_units_without_both_events_count_as_no_order():
    missing = ExactOrder("a", "b", 40.0, math.nan, (35.0, 45.0), NOTHING)
    finding = order_finding([_order(80.0, 260.0), missing], statistic="b minus a", min_effect=20.0)
    assert (finding.value, finding.ci, finding.p_value, finding.n_units) == (90.0, (85.0, 95.0), 1.0, 2)


def test_the_minimum_effect_is_a_twentieth_of_the_run():
    assert min_effect(400) == 20.0 and min_effect(100) == 5.0


def test_displacement_curves_start_at_zero_and_read_the_recorded_steps():
    history = History()
    for step, value, key_query in ((1, 0.1, 0.0), (10, 5.0, 0.1), (20, 10.0, 1.0), (30, 10.0, 3.0)):
        history.log(step, loss=1.0, w_v_displacement=value, w_kq_displacement=key_query)
    history.log(31, loss=1.0)  # a step without a record
    steps, curves = displacement_curves(history)
    assert steps == (0, 1, 10, 20, 30)
    assert curves == {"value_displacement": [0.0, 0.1, 5.0, 10.0, 10.0],
                      "key_query_displacement": [0.0, 0.0, 0.1, 1.0, 3.0]}
    order = value_key_query_order(history)
    assert order.earlier_bracket == (1.0, 10.0) and order.later_bracket == (20.0, 30.0) and order.interval[0] > 0


def test_the_fast_topic_toy_moves_w_v_before_w_kq_and_its_frozen_control_has_no_event():
    config = dataclasses.replace(PRESETS["fast"], seed=1)
    _, history = train_staged(config, MaskedLMData(config.lda, config.masking, config.data, seed=1))
    order = value_key_query_order(history)
    # measured on seeds 0-4: W_V at steps 80-82, W_K/W_Q at 229-280
    assert 60 < order.earlier_step < 100 and 200 < order.later_step < 320
    finding = value_before_key_query(history, config)
    assert finding.value == order.difference and finding.min_effect == 20.0 and finding.p_value == 0.0
    frozen = frozen_history(topic_model(config, **STAGED_VARIANT), config)
    _, curves = displacement_curves(frozen)
    assert set(curves["value_displacement"]) == set(curves["key_query_displacement"]) == {0.0}
    assert not value_key_query_order(frozen).observed
    judged = judge_against_init({"order": finding}, {"order": value_before_key_query(frozen, config)}, 1)
    assert judged.findings["order"].holds and judged.control["order"].value == 0.0
    assert not judged.control["order"].holds
