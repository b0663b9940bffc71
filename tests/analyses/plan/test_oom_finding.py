"""Where issue 44's out-of-memory comes from (the probe suite on the Llama-3.2-1B shape at 32k on a 139 GB H200).

The ledger cannot see it on the route it meters: through the CUDA branch, with the reductions taken, the suite's
peak is the bare forward's (test_ledger_must_show.py). The route is chosen from values, which ``meta`` has not: once
per model, :func:`probes.core.reductions_check.reductions_match_hook_pattern` compares the reductions with the
bridge's ``hook_pattern`` on 48 tokens, and where they differ the runner uses ``hook_pattern``. Up to 622b158 the
comparison was in bf16 with a tolerance of 1e-2, and on random bf16 weights of the 1B shape the two differed by up
to 0.019 from layer 3 on (the eager reference's own bf16 rounding; SmolLM2's shape stays under 0.004), so the suite
fell back to whole patterns: [1, 32, T, T] float32, 128 GiB each at 32k. This test shows the fallback's cost on the
ledger; tests/probes/core/test_half_precision_check.py, on real CPU weights, that the check now passes on this
attention shape (half-precision models are compared in float32)."""

from __future__ import annotations

from analyses.plan.estimate import GPUS, estimate
from analyses.plan.routes import run_route
from analyses.plan.shapes import meta_models


def test_the_suites_hook_pattern_fallback_does_not_fit_an_h200_at_32k_on_the_1b_shape():
    models = meta_models("llama-3.2-1b", n_pos=32768, n_layers=1)
    fallback = run_route(models, "suite-patterns", 32768)
    assert not estimate(fallback, GPUS["h200"]).fits
    largest = fallback.largest[0]
    assert largest.shape == (1, 32, 32768, 32768) and largest.dtype == "float32" and largest.nbytes == 2**37
    assert any("transformer_lens/model_bridge/" in frame for frame in largest.stack)  # the bridge's eager attention
    assert fallback.layers[0].route == "eager pattern"
