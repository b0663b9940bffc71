"""Issue 44's must-show, on the ledger: at 32,768 tokens on the Llama-3.2-1B and SmolLM2-135M shapes, through the
CUDA branch (meta weights, ``kernels_for("cuda")``), the probe suite and the 200-draw ablation null against the bare
SDPA forward: peak <= 1.5x, no tensor that grows with T x T, FLOPs <= 2x (the null: <= 20x, issue 44 deliver 4),
device operator calls per layer <= 2x.

The fast cases run the shapes with 4 layers (the per-layer ratios
and peaks do not depend on depth); the slow ones the whole shapes.
"""

from __future__ import annotations

import pytest

from analyses.plan.routes import RouteLedger, run
from analyses.plan.shapes import meta_models

N_POS = 32768
SHAPES = ("llama-3.2-1b", "smollm2-135m")
_cache: dict[tuple[str, int | None], dict[str, RouteLedger]] = {}


def ledgers(shape: str, n_layers: int | None, routes: tuple[str, ...]) -> dict[str, RouteLedger]:
    """The routes' ledgers (``bare`` always), each metered once per session."""
    found = _cache.setdefault((shape, n_layers), {})
    missing = [route for route in ("bare", *routes) if route not in found]
    if missing:
        models = meta_models(shape, n_pos=N_POS, n_layers=n_layers)
        found.update({route: run(models, route, N_POS) for route in missing})
    return found


def peak_ratio(found: dict[str, RouteLedger], route: str) -> float:
    return found[route].peak_bytes / found["bare"].peak_bytes


CLAIMS = {
    "suite peak <= 1.5x bare": lambda f: peak_ratio(f, "suite") <= 1.5,
    "null peak <= 1.5x bare": lambda f: peak_ratio(f, "null") <= 1.5,
    "suite makes no T x T tensor": lambda f: f["suite"].quadratic() == [],
    "null makes no T x T tensor": lambda f: f["null"].quadratic() == [],
    "suite FLOPs <= 2x bare": lambda f: f["suite"].flops <= 2 * f["bare"].flops,
    "suite calls per layer <= 2x bare": lambda f: f["suite"].calls_per_layer <= 2 * f["bare"].calls_per_layer,
}


def cases(claims: dict, *, shapes: tuple[str, ...] = SHAPES) -> list:
    """One case per shape and claim; the null's cases slow (metering its passes at 32k takes 20-50 s: thousands of
    small loss chunks, each a few operator calls)."""
    return [pytest.param(shape, claim, id=f"{shape}: {claim}",
                         marks=[pytest.mark.slow] if claim.startswith("null") else [])
            for shape in shapes for claim in claims]


def routes_of(claim: str) -> tuple[str, ...]:
    return tuple(route for route in ("suite", "null") if route in claim)


@pytest.mark.parametrize(("shape", "claim"), cases(CLAIMS))
def test_must_show_at_32k_with_4_layers(shape, claim):
    found = ledgers(shape, 4, routes_of(claim))
    assert all(layer.route == "flash" for layer in found["bare"].layers)  # the CUDA branch, not the math path
    assert CLAIMS[claim](found), _summary(found)


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "claim"), cases({claim: CLAIMS[claim] for claim in CLAIMS
                                                    if claim.startswith("suite")}))
def test_must_show_at_32k_on_the_whole_shape(shape, claim):
    """The suite's claims on every layer of both shapes (the null's depth claim is the RESULTS table's: its FLOPs
    have a floor above 20x, see probes/causal)."""
    found = ledgers(shape, None, routes_of(claim))
    assert CLAIMS[claim](found), _summary(found)


def _summary(found: dict[str, RouteLedger]) -> str:
    return "; ".join(f"{route}: peak {ledger.peak_bytes / 2**30:.2f} GiB, {ledger.flops / 1e12:.1f} TFLOP, "
                     f"{ledger.calls_per_layer:.0f} calls/layer, largest "
                     f"{ledger.largest[0].describe() if ledger.largest else '-'}" for route, ledger in found.items())
