"""Copier profile: nested-loop reference, a previous-token head's known answer, merge of halves."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.attention.copier import CopierProbe
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.result import results_close
from tests.hooked_models import OracleModel


def reference(patterns, valid, max_distance, min_query):
    n_layers, (n_batch, n_heads, n_pos, _) = len(patterns), patterns[0].shape
    mass = torch.zeros(n_layers, n_heads, max_distance + 1, dtype=torch.float64)
    beyond = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    n = 0
    for b in range(n_batch):
        for q in range(min_query, n_pos):
            if not valid[b, q]:
                continue
            n += 1
            for layer in range(n_layers):
                for h in range(n_heads):
                    for k in range(n_pos):
                        if not valid[b, k]:
                            continue
                        value = float(patterns[layer][b, h, q, k])
                        if 0 <= q - k <= max_distance:
                            mass[layer, h, q - k] += value
                        else:
                            beyond[layer, h] += value
    return mass / n, beyond / n


def test_previous_token_head_copies_distance_one_and_uniform_head_spreads():
    tokens = torch.randint(0, 50, (2, 20), generator=torch.Generator().manual_seed(0))
    (profile,) = probes.run_probes(OracleModel(), [CopierProbe(4)], [tokens], progress=False)
    assert profile.mass[0, 0].tolist() == pytest.approx([0, 1, 0, 0, 0], abs=1e-6)
    assert profile.copied_distance[0, 0] == 1
    # head 3 is uniform over k <= q: mass 1 / (q + 1) at each distance, averaged over q = 4 .. 19
    expected = sum(1 / (q + 1) for q in range(4, 20)) / 16
    assert profile.mass[0, 3].tolist() == pytest.approx([expected] * 5, abs=1e-6)
    assert float(profile.beyond[0, 3]) == pytest.approx(1 - 5 * expected, abs=1e-6)
    assert profile.n_queries == 2 * 16 and profile.min_query == 4


def test_matches_the_nested_loop_reference_with_invalid_positions():
    model = OracleModel()
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, 8, (3, 15), generator=gen)
    valid = torch.rand(3, 15, generator=gen) > 0.2
    (profile,) = probes.run_probes(model, [CopierProbe(3, min_query=1)], [TokenBatch(tokens, valid)], progress=False)
    _, cache = model.run_with_cache(tokens)
    patterns = [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(2)]
    mass, beyond = reference(patterns, valid, 3, 1)
    assert torch.allclose(profile.mass.double(), mass, atol=1e-6)
    assert torch.allclose(profile.beyond.double(), beyond, atol=1e-6)


def test_merge_of_halves_equals_the_whole_and_results_round_trip(tmp_path):
    model = OracleModel()
    tokens = torch.randint(0, 8, (4, 12), generator=torch.Generator().manual_seed(1))
    (whole,) = probes.run_probes(model, [CopierProbe(3)], [tokens[:2], tokens[2:]], progress=False)
    a, b = CopierProbe(3), CopierProbe(3)
    probes.feed_probes(model, [a], [tokens[:2]], progress=False)
    probes.feed_probes(model, [b], [tokens[2:]], progress=False)
    merged = a.merge(b).compute()
    assert results_close(merged, whole, atol=1e-6)  # float32 results
    merged.save(tmp_path / "c")
    assert results_close(probes.ProbeResult.load(tmp_path / "c"), merged)
    assert len(merged.to_dataframe()) == 2 * 4 * 4


def test_bad_settings_and_too_short_sequences_raise():
    with pytest.raises(ConfigError, match="max_distance"):
        CopierProbe(0)
    with pytest.raises(ConfigError, match="min_query"):
        CopierProbe(2, min_query=-1)
    probe = CopierProbe(8)
    probes.feed_probes(OracleModel(), [probe], [torch.zeros(1, 5, dtype=torch.long)], progress=False)
    with pytest.raises(InputError, match="min_query"):
        probe.compute()
