"""The induction toy's copier ablation: the parents' copiers carry the trained toy's n-gram prediction, a
non-parent head nothing; ablated, the toy predicts the running state frequencies, not the no-context loss
``log S``; the sign-flip test reproduces the exact sign-flip distribution."""

from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch

from analyses.induction.causal import (
    causal_batches,
    causal_finding,
    copier_ablation,
    distance_mass,
    no_context_loss,
    parent_copiers,
    running_frequency_loss,
)
from analyses.induction.config import PRESETS
from analyses.induction.findings import build_model, held_out_chains, seed_findings
from probes.core.errors import ConfigError
from probes.stats.nulls import sign_flip_p_value
from toymodels.induction.data import sample_markov_icl
from toymodels.induction.training import train_simplified

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

FAST = PRESETS["fast"]
ON = "Chen et al.'s simplified two-layer model"


def _trained(seed: int):
    """The fast preset's toy trained at ``seed`` and its (selection, ablation) batches of held-out chains."""
    config = dataclasses.replace(FAST, seed=seed)
    model = build_model(config)
    train_simplified(model, sample_markov_icl(config.data, config.n_train, config.seed).tokens, config.training(),
                     progress=False)
    return config, model, causal_batches(held_out_chains(config)[: config.probe_sequences, :-1])


@pytest.fixture(scope="module")
def seed0():
    return _trained(0)


def test_the_parents_copiers_are_found_and_ablating_a_non_parent_instead_does_not_hold(seed0):
    config, model, (select, ablate) = seed0
    mass = distance_mass(model, select, 2)
    assert mass[0, 0] > 0.9 and mass[1, 1] > 0.9  # L0H0 copies distance 1, L0H1 distance 2 (planted, then trained)
    assert parent_copiers(mass, 2) == ((0, 1), (2,))
    running = running_frequency_loss(torch.cat(ablate), config.simplified.eps)
    assert causal_finding(copier_ablation(model, ablate, (0, 1), (2,)), config, on=ON, running=running).holds
    # the roles swapped: the non-parent L0H2 tested against the parent L0H0 changes nothing and does not hold
    swapped = causal_finding(copier_ablation(model, ablate, (2,), (0,)), config, on=ON, running=running)
    assert swapped.value == pytest.approx(0.0, abs=1e-6) and swapped.null_value > 0.3
    assert swapped.p_value > 0.99 and not swapped.holds


def test_copier_ablation_reaches_the_running_frequency_level_not_the_no_context_loss():
    """Issue 24's must-show asks for the no-context loss within 10%. That loss is log 3 = 1.099 (the marginal of
    every position is uniform: symmetric Dirichlet kernels, uniform first states); the ablated toy still counts
    the states in its context, so it lands on the running-frequency loss (0.74-0.86 nats), 22-33% below log 3,
    on every seed the report trains: the must-show does not hold on this toy."""
    log_states = no_context_loss(FAST.data)
    assert log_states == pytest.approx(math.log(3))
    for seed in range(5):
        config, model, (_select, ablate) = _trained(seed)
        ablation = copier_ablation(model, ablate, (0, 1), (2,))
        ablated, clean = ablation.mean(ablation.parents_ablated), ablation.mean(ablation.clean)
        assert ablated == pytest.approx(running_frequency_loss(torch.cat(ablate), config.simplified.eps), abs=1e-6)
        assert ablation.mean(ablation.others_ablated) == pytest.approx(clean, abs=1e-6)
        assert ablated - clean > 0.3
        assert 0.2 < (log_states - ablated) / log_states < 0.35, seed


def test_sign_flips_reproduce_the_exact_distribution():
    # 4 positive units: 1 sign pattern in 16 reaches the observed sum
    assert sign_flip_p_value(torch.ones(4), seed=0) == pytest.approx(1 / 16, abs=0.01)
    assert sign_flip_p_value(torch.ones(16), seed=0) < 3e-4  # exactly 2 ** -16; 1 / 10001 at the least
    assert sign_flip_p_value(torch.zeros(8), seed=0) == 1.0  # no difference: every flip ties
    # one large negative unit among small positive ones: the sum is negative, so most flips reach it
    assert sign_flip_p_value(torch.tensor([1.0, 1.0, 1.0, -10.0]), seed=0) > 0.5


def test_a_toy_with_no_head_left_over_for_the_null_is_refused():
    two_heads = dataclasses.replace(FAST, simplified=dataclasses.replace(FAST.simplified, n_heads=2))
    with pytest.raises(ConfigError, match=re.escape("simplified.n_heads=3 or more")):
        seed_findings(two_heads, 0)
