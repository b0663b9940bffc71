"""The head means of ``method="mean"`` on long sequences come from the fused attention kernel (no ``[T, T]`` pattern)
and equal the means through the model's own attention."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.causal import means
from probes.core.model_info import pattern_hook
from tests.random_checkpoints import make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("kind", ["llama", "gpt_neox"])
def test_means_from_the_fused_kernel_equal_the_means_from_whole_patterns(tmp_path, monkeypatch, kind):
    model = probes.load_model(make_random_checkpoint(kind, tmp_path / kind, seed=4))
    tokens = torch.randint(3, 3000, (2, 40), generator=torch.Generator().manual_seed(0))
    whole = means.head_output_means(model, (0, 1), [tokens])
    fired = []
    for layer in range(2):
        model.hook_dict[pattern_hook(layer)].add_hook(lambda tensor, hook: fired.append(hook.name))
    monkeypatch.setattr(means, "MAX_PATTERN_BYTES", 0)  # every batch "long"
    try:
        fused = means.head_output_means(model, (0, 1), [tokens])
    finally:
        model.reset_hooks()
    assert fired == []  # no pattern made
    for a, b in zip(fused.sums, whole.sums):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
    assert torch.equal(fused.counts, whole.counts)
