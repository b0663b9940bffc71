"""Chi-square mutual-information parent criterion: Counter reference, known answers, the paper's selection."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import probes
from probes.errors import ConfigError, InputError
from probes.model_info import ModelInfo
from probes.parent_criterion import ParentCriterionProbe, chi_square_parent_criterion
from probes.result import results_close
from toymodels.markov_data import MarkovConfig, sample_markov_icl


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
    from tests.hooked_models import OracleModel, OracleConfig

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
