"""Planted truth through the whole pipeline: a folder series in which a previous-token head appears at step 10 and
an induction head at step 100 (the planted HookedTransformer of tests/probes/test_tl_checkpoint.py, its heads'
queries and keys redrawn before they form). Both events hold, inside the steps where they were planted, and
"previous-token before induction" holds with an interval above 0; read backwards, the order does not hold."""

from __future__ import annotations

import pytest
import torch

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.run import run_dynamics
from tests.probes.test_tl_checkpoint import planted_config, planted_state_dict

pytestmark = pytest.mark.usefixtures("one_thread")
CONFIG = DynamicsConfig(seq_len=10, n_batches=8, batch_size=8, n_boot=1000)  # p >= 1/1001, times 5 (Holm)


def redrawn(state: dict[str, torch.Tensor], layers: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """``state`` with the queries and keys of ``layers`` drawn at random: those heads have not formed yet."""
    state = dict(state)
    generator = torch.Generator().manual_seed(9)
    for layer in layers:
        for name in ("W_Q", "W_K"):
            key = f"blocks.{layer}.attn.{name}"
            state[key] = torch.randn(state[key].shape, generator=generator) * 0.3
    return state


def save_series(folder, states: dict[int, dict[str, torch.Tensor]]):
    folder.mkdir()
    for step, state in states.items():
        torch.save({"config": planted_config(), "state_dict": state}, folder / f"step_{step}.pt")
    return folder


def test_planted_previous_token_then_induction_events_and_their_order(tmp_path):
    planted = planted_state_dict()
    series = save_series(tmp_path / "series", {0: redrawn(planted, (0, 1)), 3: redrawn(planted, (0, 1)),
                                                10: redrawn(planted, (1,)), 30: redrawn(planted, (1,)),
                                                100: planted, 1000: planted})
    summary = run_dynamics(series, tmp_path / "out", CONFIG, progress=False)
    events = summary.events.events
    assert events["previous_token"].holds and events["induction"].holds
    assert 3 < events["previous_token"].change.step < 10 and 30 < events["induction"].change.step < 100
    order = summary.events.orders["previous_token_before_induction"]
    assert order.holds and order.ci[0] > 0
    assert events["previous_token"].change.bracket == (3, 10) and events["induction"].change.bracket == (30, 100)
    assert order.ci[0] <= 30 - 10 and order.ci[1] >= 100 - 3  # no narrower than the checkpoints allow


def test_the_order_read_backwards_does_not_hold(tmp_path):
    planted = planted_state_dict()
    # induction's queries and keys in place first, the previous-token head later: induction cannot work until the
    # previous-token head forms, so both curves rise together at step 100 and no order holds
    series = save_series(tmp_path / "series", {0: redrawn(planted, (0, 1)), 10: redrawn(planted, (0,)),
                                                100: planted, 1000: planted})
    summary = run_dynamics(series, tmp_path / "out", CONFIG, progress=False)
    assert not summary.events.orders["previous_token_before_induction"].holds
