"""Toy findings over seeds: the mean, the Student-t interval over seeds and the holds rule, on hand-made findings."""

from __future__ import annotations

import math

import pytest
from scipy.stats import t as student_t

from analyses.toy_findings import (
    SeedFindings,
    ToyFinding,
    aggregate_seeds,
    judge_against_init,
    seed_findings_of,
)
from mechprobe import records
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import Finding


def _finding(value: float, *, null: float = 0.1, p: float = 0.001, effect: str = "difference",
             min_effect: float = 0.1) -> Finding:
    return Finding("score of the best head", value, (value - 0.02, value + 0.02), "uniform attention", null, p,
                   min_effect, effect)  # type: ignore[arg-type]


def _seeds(values: list[float], init: list[float], **kwargs) -> list[SeedFindings]:
    return [judge_against_init({"score": _finding(v, **kwargs)}, {"score": _finding(c, **kwargs)}, seed)
            for seed, (v, c) in enumerate(zip(values, init))]


def test_mean_and_student_t_interval_over_seeds():
    values = [0.70, 0.80, 0.75, 0.90, 0.85]
    finding = aggregate_seeds("induction", _seeds(values, [0.12, 0.13, 0.11, 0.12, 0.12]))["score"]
    mean = sum(values) / 5
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / 4)
    half = student_t.ppf(0.975, 4) * sd / math.sqrt(5)
    assert finding.value == pytest.approx(mean)
    assert finding.ci == pytest.approx((mean - half, mean + half))
    assert finding.control_value == pytest.approx(0.12)
    assert finding.held == 5 and finding.holds
    assert finding.seeds == (0, 1, 2, 3, 4)


def test_the_interval_must_clear_the_control_upper_end_and_the_threshold():
    # mean 0.3, but the seeds scatter so widely that the interval's lower end is below null + 0.1
    scattered = aggregate_seeds("topic", _seeds([0.05, 0.55, 0.1, 0.6, 0.2], [0.1] * 5))["score"]
    assert scattered.value > 0.2 and not scattered.holds
    # tight, but only 0.05 above the control: under the 0.1 threshold
    close = aggregate_seeds("topic", _seeds([0.30, 0.31, 0.30, 0.31, 0.30], [0.25, 0.26, 0.25, 0.26, 0.25]))["score"]
    assert close.ci[0] > close.control_ci[1] and not close.holds
    # a ratio threshold: 1.5 / 1.2 = 1.25 clears x1.1; 1.25 / 1.2 does not
    ratio = aggregate_seeds("topic", _seeds([1.5] * 3, [1.0] * 3, null=1.2, effect="ratio", min_effect=1.1))["score"]
    assert ratio.holds and ratio.reference == pytest.approx(1.2)
    small = aggregate_seeds("topic", _seeds([1.25] * 3, [1.0] * 3, null=1.2, effect="ratio", min_effect=1.1))["score"]
    assert not small.holds


def test_the_initialised_toy_is_judged_against_its_null_only_and_one_seed_is_that_seed():
    seeds = _seeds([0.8, 0.82, 0.81], [0.1, 0.11, 0.09])
    finding = aggregate_seeds("induction", seeds)["score"]
    control = finding.control_finding()
    assert control.control_value is None and control.reference == pytest.approx(0.1) and not control.holds
    single = aggregate_seeds("induction", seeds[:1])["score"]
    assert single.value == 0.8 and single.ci == seeds[0].findings["score"].ci
    assert single.holds == seeds[0].findings["score"].holds
    # a missing value (NaN) never holds
    missing = aggregate_seeds("induction", _seeds([0.8, float("nan"), 0.8], [0.1] * 3))["score"]
    assert not missing.holds and math.isnan(missing.value)


def test_round_trip_and_the_seeds_come_back():
    findings = aggregate_seeds("scansnap", _seeds([0.7, 0.8], [0.0, 0.0]))
    document = records.strict_json(records.to_json(findings))
    assert document["score"]["seeds"] == [0, 1] and document["score"]["held"] == 2
    assert {"statistic", "value", "ci", "null_value", "control_value", "per_seed", "holds"} <= set(document["score"])
    assert document["score"]["per_seed"][0]["holds"] is True
    assert records.load(dict[str, ToyFinding], document) == findings
    assert [s.seed for s in seed_findings_of(findings)] == [0, 1]
    assert aggregate_seeds("scansnap", seed_findings_of(findings)) == findings


def test_bad_seed_lists_are_refused():
    with pytest.raises(ConfigError, match="at least one seed"):
        aggregate_seeds("topic", [])
    seeds = _seeds([0.7, 0.8], [0.0, 0.0])
    with pytest.raises(ConfigError, match="repeat"):
        aggregate_seeds("topic", [seeds[0], seeds[0]])
    with pytest.raises(InputError, match="same statistics"):
        SeedFindings(0, {"a": _finding(0.5)}, {})
    with pytest.raises(InputError, match="the ToyFinding has no 'toy'"):
        records.load(ToyFinding, {"value": 1.0})
