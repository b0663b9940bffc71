"""Nulls and verdicts: label permutations, permutation p-values, Holm's correction, the holds rule."""

from __future__ import annotations

import math

import pytest
import torch

from mechprobe import records
from probes.core.errors import ConfigError, InputError
from probes.stats.findings import Finding, adjust_family
from probes.stats.nulls import holm_adjust, label_permutations, permutation_p_value


def test_label_permutations_keep_sizes_and_unlabelled_entries():
    labels = torch.tensor([0, -1, 1, 1, 2, -1, 0, 2, 2])
    permuted = label_permutations(labels, 50, seed=1)
    assert permuted.shape == (50, 9)
    assert bool((permuted[:, labels < 0] == -1).all())
    for row in permuted:
        assert torch.equal(torch.bincount(row[row >= 0]), torch.bincount(labels[labels >= 0]))
    assert len({tuple(r.tolist()) for r in permuted}) > 10  # really shuffled
    assert torch.equal(permuted, label_permutations(labels, 50, seed=1))  # seeded
    with pytest.raises(InputError, match="at least 2 labelled"):
        label_permutations(torch.tensor([0, -1]), 5, seed=0)
    with pytest.raises(ConfigError):
        label_permutations(labels, 0, seed=0)


def test_permutation_p_value_counts_the_observation_and_ignores_nan():
    null = torch.tensor([0.1, 0.5, 0.9, float("nan")])
    assert float(permutation_p_value(torch.tensor(0.6), null)) == pytest.approx(2 / 4)
    assert float(permutation_p_value(torch.tensor(1.0), null)) == pytest.approx(1 / 4)
    assert float(permutation_p_value(torch.tensor(0.0), null, alternative="less")) == pytest.approx(1 / 4)
    assert math.isnan(float(permutation_p_value(torch.tensor(float("nan")), null)))


def test_holm_matches_the_hand_computed_procedure():
    assert holm_adjust([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    adjusted = holm_adjust([0.001, float("nan"), 0.2])
    assert adjusted[0] == pytest.approx(0.002) and math.isnan(adjusted[1]) and adjusted[2] == pytest.approx(0.2)


def _finding(**changes):
    base = dict(statistic="s", value=0.5, ci=(0.4, 0.6), null_kind="chance", null_value=0.05, p_value=0.001,
                min_effect=0.1)
    return Finding(**{**base, **changes})


def test_holds_needs_the_null_the_control_and_the_effect():
    assert _finding().holds
    assert not _finding(p_value=0.02).holds                       # p
    assert not _finding(ci=(0.04, 0.6)).holds                     # interval reaches the null
    assert not _finding().with_control(0.45, (0.4, 0.5)).holds    # interval reaches the control
    assert not _finding(value=0.14, ci=(0.13, 0.15)).holds        # effect 0.09 < 0.1
    assert _finding().with_control(0.1, (0.05, 0.15)).holds
    assert not _finding(value=float("nan")).holds
    ratio = _finding(value=1.2, ci=(1.15, 1.25), null_value=1.0, effect="ratio", min_effect=1.1)
    assert ratio.holds and not ratio.with_control(1.12, (1.1, 1.14)).holds  # 1.2 / 1.12 < 1.1


def test_family_adjustment_can_take_a_finding_below_the_line():
    family = adjust_family({"a": _finding(p_value=0.004), "b": _finding(p_value=0.004), "c": _finding(p_value=0.004)})
    assert all(f.p_adjusted == pytest.approx(0.012) for f in family.values())
    assert not any(f.holds for f in family.values())
    entry = records.dump(family["a"])
    assert entry["p_adjusted"] == pytest.approx(0.012) and entry["control_value"] is None and entry["holds"] is False
    with pytest.raises(ConfigError, match="effect"):
        _finding(effect="percent")


def test_a_null_draw_equal_to_the_observed_value_up_to_rounding_is_a_tie():
    """A rank correlation of 1 computed two ways (1.0 and 0.9999999999999998) must count as reaching it."""
    from probes.stats.nulls import permutation_p_value

    null = torch.tensor([0.9999999999999998, 0.5, -0.5, 1.0])
    assert float(permutation_p_value(torch.tensor(1.0), null)) == pytest.approx(3 / 5)
    assert float(permutation_p_value(torch.tensor(-1.0), -null, alternative="less")) == pytest.approx(3 / 5)
    assert float(permutation_p_value(torch.tensor(1.0), torch.tensor([0.999]))) == pytest.approx(1 / 2)


def _verdict(value: float, ci: tuple[float, float], p: float = 0.001, **kwargs) -> Finding:
    return Finding("gap", value, ci, "none", 0.0, p, min_effect=0.1, **kwargs)


def test_three_verdicts_from_hand_made_intervals():
    """Threshold 0 + 0.1: an interval wholly below it is absent, one straddling it inconclusive, whatever p says."""
    assert _verdict(0.3, (0.2, 0.4)).verdict == "holds"
    assert _verdict(0.03, (0.01, 0.05)).verdict == "absent"  # beats the null (p, low > 0) but is too small
    assert _verdict(0.03, (-0.02, 0.08), p=0.4).verdict == "absent"
    assert _verdict(0.08, (-0.1, 0.26), p=0.2).verdict == "inconclusive"
    assert _verdict(0.3, (0.2, 0.4), p=0.05).verdict == "inconclusive"  # above the threshold, p not small enough
    assert _verdict(0.3, (float("nan"), float("nan"))).verdict == "inconclusive"  # one unit: no interval
    ratio = Finding("ratio", 1.1, (1.05, 1.15), "perm", 1.0, 0.001, min_effect=1.2, effect="ratio")
    assert ratio.threshold == pytest.approx(1.2) and ratio.verdict == "absent"
    control = _verdict(0.5, (0.45, 0.55)).with_control(0.5, (0.4, 0.6))  # the control does as much
    assert control.threshold == pytest.approx(0.6) and control.verdict == "absent"


def test_units_to_settle_an_inconclusive_finding_at_the_observed_spread():
    # half-width 0.18 around 0.08; the threshold 0.1 is 0.02 away: (0.18 / 0.02)^2 = 81 times the units
    finding = _verdict(0.08, (-0.1, 0.26), p=0.2, n_units=10)
    assert finding.units_to_settle == 810
    wide = _verdict(0.4, (-0.05, 0.85), p=0.001, n_units=8)  # half-width 0.45, 0.3 above the threshold
    assert wide.verdict == "inconclusive" and wide.units_to_settle == math.ceil(8 * (0.45 / 0.3) ** 2)
    assert _verdict(0.03, (0.01, 0.05), n_units=10).units_to_settle is None  # absent: settled
    assert _verdict(0.08, (-0.1, 0.26), p=0.2).units_to_settle is None  # units unknown


def test_the_verdict_is_written_for_readers_and_skipped_on_load():
    finding = _verdict(0.08, (-0.1, 0.26), p=0.2, n_units=10, null_draws=20, null_stop="stopped after 20")
    document = records.dump(finding)
    assert document["verdict"] == "inconclusive" and document["units_to_settle"] == 810
    assert document["null_draws"] == 20 and document["holds"] is False
    assert records.load(Finding, document) == finding
    old = {k: v for k, v in document.items() if k not in ("n_units", "null_draws", "null_stop")}
    assert records.load(Finding, old).n_units is None  # a summary written before these fields still loads
