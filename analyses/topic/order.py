"""Li, Li & Risteski's two stages as an order of events on the topic toy: "W_V moves before W_K/W_Q"
(``value_before_key_query``; the finding's rules: :mod:`analyses.toy_orders`).

The model is the ``two_stage`` stage's (one-hot frozen embeddings, everything else trained with plain SGD), trained
with :func:`~toymodels.topic.training.record_weight_displacement` every ``record_every`` steps. The curves are how
far each group of weights has moved from initialisation, relative to its size there:

- ``value_displacement``: ``||W_V(t) - W_V(0)|| / ||W_V(0)||``;
- ``key_query_displacement``: the same for W_K and W_Q together (both matrices' displacements in one Frobenius
  norm). Taken together because the claim is about the attention's parameters as one group; taken as parameters,
  not as the product ``W_Q^T W_K`` the scores read, so that both curves are the same kind of quantity: from the
  small initialisation (``init_std`` 0.01) the product moves as the square of its factors' displacement, so its
  event would come late by construction and favour the claim.

The division by the initial size does not move an event (the half-way rule is unchanged by scaling a curve); it
only puts the two curves on a readable scale. Each event is where its curve crosses half-way to its held peak
(:func:`probes.dynamics.change_point.curve_event`); the order is the W_K/W_Q event's step minus W_V's. Control:
the same model with learning rate 0 (its weights read at the same recorded steps): no displacement, no event.
Measured on the fast preset (400 steps), seeds 0-2: W_V's event at steps 80-82, W_K/W_Q's at 229-276.

Example: ``value_before_key_query(history, config).value`` (steps).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from analyses.curve_series import CurveSeries
from analyses.topic.config import TopicExperimentConfig
from analyses.toy_orders import events_text, min_effect, order_finding
from probes.dynamics.change_point import curve_event
from probes.dynamics.event_orders import ExactOrder
from probes.stats.findings import Finding
from toymodels.topic.model import TopicModel
from toymodels.topic.training import MaskedLMData, record_weight_displacement, train_topic_model
from toymodels.training import History

ORDER = "value_before_key_query"
CURVES = {"value_displacement": "w_v_displacement", "key_query_displacement": "w_kq_displacement"}
"""The order's curves and the history columns that hold them."""
STAGED_VARIANT: Mapping[str, str] = MappingProxyType({"embedding": "one_hot_frozen"})
"""The two-stage model: one-hot frozen embeddings, W_K, W_Q, W_V and the decoder trained."""
STATISTIC = ("W_K/W_Q event step minus W_V event step (two-stage topic toy, plain SGD; each event where the "
             "weights' displacement from initialisation crosses half-way to its held peak)")
SELECTION = "no search: the toy's only attention layer"


def displacement_curves(history: History) -> tuple[tuple[int, ...], dict[str, list[float]]]:
    """The recorded steps (with step 0, where nothing has moved) and the two displacement curves of a history
    trained with :func:`~toymodels.topic.training.record_weight_displacement`."""
    column = history.column(CURVES["value_displacement"])
    recorded = [i for i, value in enumerate(column) if value == value]
    steps = (0, *(history.steps[i] for i in recorded))
    return steps, {curve: [0.0, *(history.column(name)[i] for i in recorded)] for curve, name in CURVES.items()}


def value_key_query_order(history: History) -> ExactOrder:
    """The events of the two curves and their order (module docstring)."""
    steps, curves = displacement_curves(history)
    value, key_query = (curve_event(curves[c], steps) for c in CURVES)
    return ExactOrder.of_events(("W_V", value), ("W_K/W_Q", key_query))


def value_before_key_query(history: History, config: TopicExperimentConfig) -> Finding:
    """The unadjusted per-seed finding of a two-stage history (module docstring)."""
    order = value_key_query_order(history)
    return order_finding([order], statistic=f"{STATISTIC}; events: {events_text([order])}",
                         min_effect=min_effect(config.two_stage.n_steps), selection=SELECTION)


def frozen_history(model: TopicModel, config: TopicExperimentConfig) -> History:
    """The displacement history of ``model`` trained with learning rate 0: read at the recorded steps of a
    two-stage run, it never moves."""
    history = History()
    record = record_weight_displacement(model, config.record_every)
    for step in range(1, config.two_stage.n_steps + 1):
        record(step, model, history)
    return history


def train_staged(config: TopicExperimentConfig, data: MaskedLMData) -> tuple[TopicModel, History]:
    """The two-stage model of ``config`` trained on ``data`` with its displacement recorded (no other callback)."""
    model = TopicModel(config.model_config(**STAGED_VARIANT), device=config.device)
    history = train_topic_model(model, data, config.training("two_stage"),
                                callbacks=[record_weight_displacement(model, config.record_every)])
    return model, history


def order_series(history: History, finding: Finding, name: str = "topic toy") -> CurveSeries:
    """The two displacement curves of a two-stage ``history`` with their events (filled when ``finding``, the
    order's, holds), for :func:`analyses.dynamics.figures.plot_series_together`."""
    steps, curves = displacement_curves(history)
    events: dict[str, tuple[tuple[float, float, bool], ...]] = {}
    for curve, values in curves.items():
        event = curve_event(values, steps)
        events[curve] = () if event.step != event.step else ((event.step, event.level, finding.holds),)
    return CurveSeries(name, steps, curves, events)
