"""Settling (analyses.pretrained.settle) on a hand-made model whose heads attend by rule: a planted induction head
settles as "holds", a uniform head as "absent", each decided on its confidence sequence over fresh batches; the
budgets stop the rounds and the unsettled finding says what it still needs."""

from __future__ import annotations

import itertools

import pytest
import torch

import probes
from analyses.pretrained.settle import settle_findings
from analyses.pretrained.settled import SettleConfig, SettledFinding, sequence_cost, sequence_verdict
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import Finding
from tests.hooked_models import OracleModel

SEQ_LEN, ROWS = 20, 2
TOKENS = ROWS * 2 * SEQ_LEN  # valid tokens of a batch: the oracle has no BOS


def _supply(model, seed=0):
    info = probes.ModelInfo.of(model)
    generator = torch.Generator().manual_seed(seed)
    while True:
        yield probes.repeated_random_tokens(info, seq_len=SEQ_LEN, n_sequences=ROWS, generator=generator)


def _pilot(null_value=0.035):
    """A first pass that left the induction score inconclusive: a wide interval straddling the threshold."""
    return {"induction_protocol": Finding("induction", 0.2, (0.0, 0.4), "uniform attention", null_value, 0.02, 0.1,
                                          n_units=4)}


def _settle(model, head, config, **kwargs):
    return settle_findings(model, _pilot(), {"induction_protocol": head}, {"protocol": _supply(model)},
                           {"protocol": TOKENS}, config, n_boot=200, **kwargs)["induction_protocol"]


def test_a_planted_induction_head_settles_as_holding_and_a_uniform_head_as_absent():
    model = OracleModel()
    config = SettleConfig(enabled=True)
    assert _pilot()["induction_protocol"].verdict == "inconclusive"
    planted = _settle(model, (0, 1), config)  # head 1: all its mass on the induction target
    assert planted.verdict == "holds" and planted.first_pass == "inconclusive"
    assert planted.units == config.min_units and planted.rounds == 1 and planted.tokens == 20 * TOKENS
    assert planted.looks[-1].value == pytest.approx(1.0) and planted.looks[-1].low > planted.threshold
    assert planted.stop == "settled after 20 [BOS] X X batches" and planted.needs_units is None
    uniform = _settle(model, (1, 3), config)  # head 3: uniform over the keys, so about chance
    assert uniform.verdict == "absent" and uniform.looks[-1].high < uniform.threshold
    assert "settled after 20" in uniform.cell()


def test_the_budgets_stop_the_rounds_and_say_what_is_still_needed():
    model = OracleModel()
    # ten batches' worth of tokens: below the 20 units a sequence is read from
    short = _settle(model, (0, 1), SettleConfig(enabled=True, max_tokens=10 * TOKENS))
    assert short.verdict == "inconclusive" and short.units == 10
    assert "--max-tokens budget" in short.stop and short.needs_units is not None and short.needs_tokens is not None
    assert "unsettled after 10" in short.cell()
    # a clock that jumps a minute per reading: the first round runs, no second one fits in 1.5 minutes
    ticks = itertools.count(0, 60)
    slow = _settle(model, (0, 1), SettleConfig(enabled=True, budget_minutes=1.5, min_units=30, max_round_units=10),
                   clock=lambda: float(next(ticks)))
    assert slow.rounds == 1 and slow.units == 10 and "--budget-minutes budget (1.5 min)" in slow.stop


def test_a_finding_decided_at_the_first_pass_is_not_monitored():
    model = OracleModel()
    decided = {"induction_protocol": Finding("induction", 0.9, (0.85, 0.95), "uniform attention", 0.035, 0.001, 0.1,
                                             n_units=4),
               "embedding_topic_similarity": Finding("gap", 0.0, (-0.1, 0.1), "labels permuted", 0.0, 0.5, 0.02,
                                                     n_units=600)}
    result = settle_findings(model, decided, {}, {"protocol": _supply(model)}, {"protocol": TOKENS},
                             SettleConfig(enabled=True))
    assert result["induction_protocol"] == SettledFinding(
        "induction_protocol", "[BOS] X X batches", "holds", "holds", decided["induction_protocol"].threshold, 0, 0, 0,
        "decided at the first pass (fixed-sample verdict kept)")
    assert result["embedding_topic_similarity"].stop.startswith("not monitored: its units are the vocabulary")
    with pytest.raises(InputError, match="only induction_protocol"):
        settle_findings(model, decided, {}, {}, {}, SettleConfig(), monitor=["embedding_topic_similarity"])


def test_the_sequence_verdict_and_the_settings():
    assert sequence_verdict(0.5, 0.9, 0.4, 0.1, 0.2) == "holds"
    assert sequence_verdict(0.15, 0.9, 0.4, 0.1, 0.2) == "inconclusive"
    assert sequence_verdict(0.3, 0.35, 0.4, 0.1, 0.2) == "absent"
    assert sequence_verdict(0.5, 0.9, 0.4, 0.1, 0.6) == "inconclusive"  # above the threshold, not above the control
    assert sequence_verdict(float("nan"), 0.9, 0.4, 0.1, None) == "inconclusive"
    assert sequence_cost() == pytest.approx(1.5486**2, rel=1e-3)
    for bad, match in ((dict(budget_minutes=0), "budget-minutes"), (dict(max_tokens=0), "max-tokens"),
                       (dict(alpha=1.0), "alpha"), (dict(enabled="yes"), "enabled")):
        with pytest.raises(ConfigError, match=match):
            SettleConfig(**bad)
