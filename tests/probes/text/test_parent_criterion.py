"""Chi-square mutual-information parent criterion: Counter reference, known answers, the paper's selection."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import probes
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.core.result import results_close
from probes.text.parent_criterion import (
    ParentCriterionProbe,
    chi_square_parent_criterion,
    modified_chi_square_mi,
    population_parent_criterion,
    stationary_distribution,
)
from toymodels.induction.data import MarkovConfig, sample_markov_icl


def reference(tokens: torch.Tensor, max_distance: int, subsets) -> tuple[list[float], list[float]]:
    raw, corrected = [0.0] * len(subsets), [0.0] * len(subsets)
    for seq in tokens.tolist():
        for i, subset in enumerate(subsets):
            pairs = [(tuple(seq[p - j] for j in subset), seq[p]) for p in range(max_distance, len(seq))]
            n = len(pairs)
            joint = Counter(pairs)
            pz = Counter(z for z, _ in pairs)
            px = Counter(x for _, x in pairs)
            mi = sum((c / n) ** 2 / ((pz[z] / n) * (px[x] / n)) for (z, x), c in joint.items()) - 1
            raw[i] += mi / len(tokens)
            corrected[i] += (mi - (len(pz) - 1) * (len(px) - 1) / n) / len(tokens)
    return raw, corrected


def test_matches_the_counter_reference():
    tokens = torch.randint(0, 4, (5, 30), generator=torch.Generator().manual_seed(0))
    result = chi_square_parent_criterion(tokens, 4, max_distance=3, max_subset=2)
    raw, corrected = reference(tokens, 3, [tuple(s) for s in result.subsets])
    assert result.chi2_mi.tolist() == pytest.approx(raw, abs=1e-5)
    assert result.corrected.tolist() == pytest.approx(corrected, abs=1e-5)


def test_deterministic_dependence_has_known_information():
    """When x_i is a bijective function of z (S ids used equally), I = S - 1 exactly."""
    alternating = torch.tensor([[0, 1] * 10])  # x_i determined by x_{i-1} and by x_{i-2}
    result = chi_square_parent_criterion(alternating, 2, max_distance=2, max_subset=1)
    assert result.as_dict(corrected=False) == pytest.approx({"{1}": 1.0, "{2}": 1.0})
    cycle = torch.tensor([[0, 1, 2] * 7])  # x_i = x_{i-1} + 1 mod 3
    result = chi_square_parent_criterion(cycle, 3, max_distance=1, max_subset=1)
    assert float(result.chi2_mi[0]) == pytest.approx(2.0)
    assert float(result.corrected[0]) == pytest.approx(2.0 - 4 / 20)


@pytest.mark.parametrize("order, expected", [(2, [1]), (3, [1, 2])])
def test_selects_the_true_parents_of_markov_chains(order, expected):
    data = MarkovConfig(n_states=3, order=order, seq_len=100, alpha=0.1)
    tokens = sample_markov_icl(data, 300, 0).tokens
    result = chi_square_parent_criterion(tokens, 3, max_distance=3, max_subset=2)
    assert result.selected == expected


def test_merge_of_halves_equals_whole_and_it_runs_beside_model_probes():
    tokens = sample_markov_icl(MarkovConfig(seq_len=40), 6, 1).tokens
    info = ModelInfo(name="data", n_layers=0, n_heads=0, n_ctx=41, d_vocab=3, causal=None, bos_token_id=None,
                     special_token_ids=())
    whole = chi_square_parent_criterion(tokens, 3)
    a, b = ParentCriterionProbe().bind(info), ParentCriterionProbe().bind(info)
    a.update({}, probes.as_token_batch(tokens[:3], info))
    b.update({}, probes.as_token_batch(tokens[3:], info))
    assert results_close(a.merge(b).compute(), whole, atol=1e-6)
    from tests.hooked_models import OracleConfig, OracleModel

    model = OracleModel(OracleConfig(d_vocab=3, n_ctx=64))
    (through_runner,) = probes.run_probes(model, [ParentCriterionProbe()], [tokens], progress=False)
    assert torch.allclose(through_runner.corrected, whole.corrected)


def test_bad_input_raises():
    with pytest.raises(ConfigError, match="max_subset"):
        ParentCriterionProbe(max_distance=1, max_subset=2)
    with pytest.raises(InputError, match="max_distance"):
        chi_square_parent_criterion(torch.zeros(2, 3, dtype=torch.long), 3, max_distance=3)
    with pytest.raises(ConfigError, match="d_vocab"):
        chi_square_parent_criterion(torch.zeros(2, 9, dtype=torch.long), 1)


# -- the population criterion (the paper's definition) -------------------------------------------
def test_stationary_distribution_two_states_closed_form_and_invariance():
    p, q = 0.1, 0.2
    chain = torch.tensor([[[1 - p, p], [q, 1 - q]]], dtype=torch.float64)
    assert stationary_distribution(chain)[0].tolist() == pytest.approx([q / (p + q), p / (p + q)], abs=1e-12)
    periodic = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]], dtype=torch.float64)  # period 2: the lazy chain converges
    assert stationary_distribution(periodic)[0].tolist() == pytest.approx([0.5, 0.5], abs=1e-12)
    torch.manual_seed(0)
    random = torch.distributions.Dirichlet(torch.full((6,), 0.5)).sample((4, 6)).double()
    mu = stationary_distribution(random)
    assert torch.allclose(mu.sum(-1), torch.ones(4, dtype=torch.float64))
    assert torch.allclose(torch.einsum("cs,cst->ct", mu, random), mu, atol=1e-10)  # mu P = mu


def test_modified_chi_square_mi_by_hand():
    """P = [[0.9, 0.1], [0.2, 0.8]], mu = (2/3, 1/3): per parent value sum_x P(x|z)^2 / mu(x) - 1 is
    0.245 and 0.98, so I = 2/3 0.245 + 1/3 0.98 = 0.49 (power 1) and 4/9 0.245 + 1/9 0.98 = 0.21778 (power 2)."""
    mu = torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    kernel = torch.tensor([[0.9, 0.1], [0.2, 0.8]], dtype=torch.float64)
    joint = (mu[:, None] * kernel)[None]
    assert float(modified_chi_square_mi(joint, power=1)) == pytest.approx(0.49, abs=1e-12)
    assert float(modified_chi_square_mi(joint, power=2)) == pytest.approx(0.98 / 4.5, abs=1e-12)
    result = population_parent_criterion(kernel[None], 2, 1, max_distance=1, max_subset=1, power=2)
    assert result.as_dict() == pytest.approx({"{}": 0.0, "{1}": 0.98 / 4.5}, abs=1e-9)


def test_population_criterion_of_deterministic_chains():
    """Alternating chain x_t = 1 - x_{t-1}: distances 1 and 2 each determine x (I = 1, modified 1/2).
    Copy of the oldest of two parents (x_t = x_{t-2}): distance 2 informs fully, distance 1 not at all
    (from the uniform start every 2-periodic pattern is equally likely), and the context rows follow
    the data's convention (oldest parent most significant)."""
    alternating = torch.tensor([[[0.0, 1.0], [1.0, 0.0]]])
    for power, value in ((1, 1.0), (2, 0.5)):
        result = population_parent_criterion(alternating, 2, 1, max_distance=2, max_subset=2, power=power)
        assert result.as_dict() == pytest.approx({"{}": 0.0, "{1}": value, "{2}": value, "{1,2}": value}, abs=1e-9)
    copy_oldest = torch.zeros(1, 4, 2)
    for context in range(4):
        copy_oldest[0, context, context // 2] = 1.0
    result = population_parent_criterion(copy_oldest, 2, 2, max_distance=2, max_subset=1, power=1)
    assert result.as_dict() == pytest.approx({"{}": 0.0, "{1}": 0.0, "{2}": 1.0}, abs=1e-9)
    assert result.selected == [2]


@pytest.mark.parametrize("order, expected", [(2, [1]), (3, [1, 2])])
def test_population_criterion_selects_the_true_parents_like_the_plug_in(order, expected):
    batch = sample_markov_icl(MarkovConfig(n_states=3, order=order, seq_len=100, alpha=0.1), 300, 0)
    result = population_parent_criterion(batch.kernels, 3, order - 1, max_distance=3, max_subset=2)
    assert result.selected == expected and result.power == 2 and result.n_chains == 300
    assert result.subsets[0] == [] and abs(float(result.values[0])) < 1e-8
    plain = population_parent_criterion(batch.kernels, 3, order - 1, max_distance=3, max_subset=2, power=1)
    assert bool((plain.values[1:] > result.values[1:]).all())  # mu(z)^2 <= mu(z): the modified value is smaller


def test_population_criterion_bad_input_raises():
    with pytest.raises(InputError, match="kernels"):
        population_parent_criterion(torch.ones(2, 4, 3) / 3, 3, 2)
    with pytest.raises(ConfigError, match="max_subset"):
        population_parent_criterion(torch.ones(2, 9, 3) / 3, 3, 2, max_distance=1, max_subset=2)
