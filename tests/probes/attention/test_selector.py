"""Selector probes: the model's own subset weights from its hook, and model-agnostic parent-subset attention."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.attention.selector import ParentSubsetAttentionProbe, SelectorWeightProbe, distance_subsets
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.result import results_close
from tests.probes.attention.test_generalized_induction import TrigramRuleModel, hand_parent_mask
from toymodels.induction import SUBSET_WEIGHTS_HOOK, SimplifiedInductionConfig, SimplifiedInductionModel


def test_selector_share_reads_the_models_normalised_subset_weights():
    model = SimplifiedInductionModel(SimplifiedInductionConfig(n_states=3, n_heads=3, max_subset=2))
    with torch.no_grad():
        model.c.copy_(torch.tensor([1.0, 0.0, 0.0, 3.0, 1.0, 1.0]))
    tokens = torch.randint(0, 3, (5, 12), generator=torch.Generator().manual_seed(0))
    (shares,) = probes.run_probes(model, [SelectorWeightProbe(SUBSET_WEIGHTS_HOOK, model.subset_labels)],
                                  [tokens[:2], tokens[2:]], progress=False)
    assert shares.as_dict() == pytest.approx({"{0}": 1 / 12, "{1}": 0, "{2}": 0, "{0,1}": 9 / 12,
                                              "{0,2}": 1 / 12, "{1,2}": 1 / 12}, abs=1e-6)
    assert list(shares.to_dataframe()["subset"]) == model.subset_labels


def test_selector_weight_probe_rejects_mismatched_labels():
    model = SimplifiedInductionModel(SimplifiedInductionConfig())
    with pytest.raises(InputError, match="labels"):
        probes.run_probes(model, [SelectorWeightProbe(labels=["a"])], [torch.zeros(1, 5, dtype=torch.long)],
                          progress=False)


def reference(pattern, tokens, valid, subsets):
    n_batch, n_heads, n_pos, _ = pattern.shape
    scores = torch.zeros(len(subsets), n_heads, dtype=torch.float64)
    chance = torch.zeros(len(subsets), dtype=torch.float64)
    for i, subset in enumerate(subsets):
        mask = hand_parent_mask(tokens, valid, subset)
        rows = 0
        for b in range(n_batch):
            for q in range(n_pos):
                targets = [k for k in range(n_pos) if mask[b, q, k]]
                if not targets:
                    continue
                rows += 1
                chance[i] += len(targets) / (q + 1)
                for h in range(n_heads):
                    scores[i, h] += sum(float(pattern[b, h, q, k]) for k in targets)
        scores[i] /= rows
        chance[i] /= rows
    return scores, chance


def test_parent_subset_attention_matches_reference_and_finds_the_trigram_parents():
    model = TrigramRuleModel()
    gen = torch.Generator().manual_seed(4)
    tokens = torch.randint(0, 3, (4, 30), generator=gen)
    valid = torch.rand(4, 30, generator=gen) > 0.1
    probe = ParentSubsetAttentionProbe(1, max_distance=3, max_subset=2)
    (result,) = probes.run_probes(model, [probe], [TokenBatch(tokens, valid)], progress=False)
    _, cache = model.run_with_cache(tokens)
    scores, chance = reference(cache["blocks.1.attn.hook_pattern"], tokens, valid, distance_subsets(3, 2))
    assert torch.allclose(result.scores.double(), scores, atol=1e-6)
    assert torch.allclose(result.chance[:, 0].double(), chance, atol=1e-12)
    assert result.labels == ["{1}", "{2}", "{3}", "{1,2}", "{1,3}", "{2,3}"]
    assert result.best_subset(0) == [1, 2]  # the trigram head
    assert result.best_subset(1) == [1]  # the bigram induction head


def test_parent_subset_merge_equals_whole():
    model = TrigramRuleModel()
    tokens = torch.randint(0, 3, (4, 20), generator=torch.Generator().manual_seed(5))
    (whole,) = probes.run_probes(model, [ParentSubsetAttentionProbe(1)], [tokens], progress=False)
    a, b = ParentSubsetAttentionProbe(1), ParentSubsetAttentionProbe(1)
    probes.feed_probes(model, [a], [tokens[:2]], progress=False)
    probes.feed_probes(model, [b], [tokens[2:]], progress=False)
    assert results_close(a.merge(b).compute(), whole, atol=1e-6)  # float32 results


def test_bad_settings_raise():
    with pytest.raises(ConfigError, match="max_subset"):
        ParentSubsetAttentionProbe(1, max_distance=2, max_subset=3)
    with pytest.raises(ConfigError, match="layer"):
        probes.run_probes(TrigramRuleModel(), [ParentSubsetAttentionProbe(5)], [torch.zeros(1, 4, dtype=torch.long)],
                          progress=False)
