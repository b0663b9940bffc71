"""Phases of the in-context solution on the induction toy: planted predictors score their known gains over the
uniform, unigram and bigram baselines (a model that is the bigram predictor gains exactly 0 over it), the event is
where a gain passes 0 for good, and a series that passes the baselines in turn gives those events in that order
while a flat one at the uniform loss gives none."""

from __future__ import annotations

import math

import pytest
import torch

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.events import series_events
from analyses.dynamics.measure import CheckpointMeasure
from analyses.dynamics.toy_phases import baseline_sums, phase_points
from analyses.induction.findings import held_out_chains
from probes.dynamics.change_point import CurveUnits, change_point
from tests.analyses.dynamics.test_toy_series import small_toy
from toymodels.induction.data import in_context_ngram_probs

CONFIG = DynamicsConfig(n_batches=8, n_boot=1000)  # 1,000 draws: the smallest p-value, 1/1001, survives Holm


class NgramPredictor(torch.nn.Module):
    """A stand-in model whose logits are the log of the in-context ``n``-gram's probabilities (None: uniform;
    ``mix``: that share of the n-gram, the rest uniform; ``tilt``: the uniform share tilted toward state 0, as a
    model at initialisation predicts a little worse than uniform)."""

    def __init__(self, n: int | None, n_states: int, alpha: float, mix: float = 1.0, tilt: float = 0.0) -> None:
        super().__init__()
        self.n, self.n_states, self.alpha, self.mix, self.tilt = n, n_states, alpha, mix, tilt
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        uniform = torch.full((*tokens.shape, self.n_states), 1.0 / self.n_states, dtype=torch.float64)
        uniform[..., 0] += self.tilt
        uniform /= uniform.sum(-1, keepdim=True)
        if self.n is None:
            return uniform.log()
        probs = in_context_ngram_probs(tokens, self.n, self.n_states, self.alpha)
        return (self.mix * probs + (1 - self.mix) * uniform).log()


@pytest.fixture(scope="module")
def chains():
    settings = small_toy()
    return settings, list(held_out_chains(settings)[:64, :-1].tensor_split(16))


def test_planted_predictors_gain_what_their_baselines_say(chains):
    settings, batches = chains
    data = settings.data
    gains = {n: phase_points(NgramPredictor(n, data.n_states, data.alpha), batches, settings, CONFIG)
             for n in (None, 1, 2, 3)}
    assert gains[None]["beats_uniform"].value == pytest.approx(0.0, abs=1e-9)
    assert gains[1]["beats_unigram"].value == pytest.approx(0.0, abs=1e-9)
    assert gains[2]["beats_bigram"].value == pytest.approx(0.0, abs=1e-9)
    assert gains[2]["beats_unigram"].value > 0.1 and gains[3]["beats_bigram"].value > 0.1
    assert gains[None]["beats_bigram"].value < gains[1]["beats_bigram"].value < 0  # worse than the bigram
    uniform_loss, count = baseline_sums(batches[0], settings, None)
    assert uniform_loss / count == pytest.approx(math.log(data.n_states))


def test_a_gain_passing_zero_has_its_event_there_and_a_gain_above_zero_from_the_start_has_none():
    steps = (0, 10, 100, 1000)
    rising = torch.tensor([[-0.2] * 4, [-0.1] * 4, [0.1] * 4, [0.3] * 4], dtype=torch.float64)
    point = change_point(CurveUnits(rising, torch.ones_like(rising)), steps, n_boot=100, crossing=0.0)
    assert point.bracket == (10.0, 100.0)
    assert point.step == pytest.approx(math.expm1((math.log1p(10) + math.log1p(100)) / 2))  # half-way in log
    above = rising + 0.3
    assert math.isnan(change_point(CurveUnits(above, torch.ones_like(above)), steps, n_boot=100, crossing=0.0).step)
    below = rising - 0.4
    assert math.isnan(change_point(CurveUnits(below, torch.ones_like(below)), steps, n_boot=100, crossing=0.0).step)


def measures_of(models, settings, batches) -> list[CheckpointMeasure]:
    return [CheckpointMeasure(step, None, f"step_{step}", phase_points(model, batches, settings, CONFIG), 0.0)
            for step, model in models]


def test_a_series_passing_the_baselines_in_turn_gives_their_events_in_order_and_a_flat_one_none(chains):
    settings, batches = chains
    data = settings.data
    # about uniform; half the unigram (beats uniform only); 0.7 of the bigram (beats the unigram, not the bigram);
    # nearly the optimal trigram (beats all three)
    ladder = [(0, None, 1.0), (10, None, 1.0), (30, 1, 0.5), (60, 2, 0.5), (100, 2, 0.7), (300, 3, 0.97),
              (1000, 3, 0.97)]
    series = [(step, NgramPredictor(n, data.n_states, data.alpha, mix=mix, tilt=0.1 if n is None else 0.0))
              for step, n, mix in ladder]
    events = series_events(measures_of(series, settings, batches), CONFIG)
    steps = {curve: events.events[curve].change.step for curve in ("beats_uniform", "beats_unigram", "beats_bigram")}
    assert all(events.events[curve].holds for curve in steps)
    assert 10 < steps["beats_uniform"] <= 30 < steps["beats_unigram"] <= 60 < 100 < steps["beats_bigram"] <= 300
    assert events.orders["beats_unigram_before_beats_bigram"].holds
    flat = [(step, NgramPredictor(None, data.n_states, data.alpha, tilt=0.1)) for step, _, _ in ladder]
    assert not any(event.holds for event in series_events(measures_of(flat, settings, batches), CONFIG).events.values())
