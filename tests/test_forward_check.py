"""The choke-point check itself (tests/forward_check.py): it catches a forward that bypasses mechprobe.forward, and
the path that crashed `report --device cuda` (issue 35: passage_patterns -> capture) goes through it."""

from __future__ import annotations

import pytest
import torch

from analyses.pretrained.passages import passage_patterns
from mechprobe import forward
from tests import forward_check
from tests.random_checkpoints import make_random_checkpoint

ROOT = forward_check.ROOT


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    import probes

    return probes.load_model(str(make_random_checkpoint("gpt_neox", tmp_path_factory.mktemp("neox"))))


def _project_function(source: str, name: str, filename: str):
    """A function whose code claims to live in the project's ``filename`` (as a bypass in the library would)."""
    scope: dict = {"torch": torch}
    exec(compile(source, str(ROOT / filename), "exec"), scope)
    return scope[name]


def test_a_forward_outside_the_choke_point_is_caught(model):
    tokens = torch.tensor([[1, 2, 3, 4]])
    bypass = _project_function("def measure(model, tokens):\n    with torch.no_grad():\n        return model(tokens)\n",
                               "measure", "probes/somewhere.py")
    through = _project_function("def measure(model, tokens, run):\n    return run(model, tokens)\n",
                                "measure", "probes/elsewhere.py")
    through(model, tokens, forward.run)
    assert forward_check.bypasses == []
    bypass(model, tokens)
    found, forward_check.bypasses[:] = list(forward_check.bypasses), []
    assert len(found) == 1 and "probes/somewhere.py:3 (measure)" in found[0]


def test_training_forwards_and_the_tests_own_calls_are_not_bypasses(model):
    tokens = torch.tensor([[1, 2, 3, 4]])
    train_step = _project_function("def step(model, tokens):\n    return model(tokens).sum()\n", "step",
                                   "toymodels/somewhere.py")
    model.train()
    try:
        train_step(model, tokens).backward()  # train mode, autograd on: a training step, not a measurement
    finally:
        model.eval()
    with torch.no_grad():
        model(tokens)  # a test's own reference forward
    assert forward_check.bypasses == []


def test_passage_patterns_go_through_the_choke_point(model):
    """Before issue 35, capture() ran the model itself with the tokens where the caller left them: on a GPU model
    the report's passage view crashed on CPU tokens. The autouse check fails this test if any forward bypasses."""
    patterns = passage_patterns(model, torch.tensor([[5, 6, 7, 5, 6, 7]]), {"head": (1, 0)})
    assert forward_check.bypasses == []
    rows = patterns.patterns["head"]
    assert len(rows) == 6 and all(abs(sum(row) - 1) < 1e-5 for row in rows)
