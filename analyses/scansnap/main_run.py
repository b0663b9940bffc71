"""The Scan and Snap main run: the Y/Z model trained on the co-occurrence data with its support composition
recorded at every step, and the probes every run of :mod:`analyses.scansnap` reads from it (key-token attention
of each fact's query, co-occurrence ordering, evaluation loss). :mod:`analyses.scansnap.experiment` builds the
result and figures from it, :mod:`analyses.scansnap.findings` the findings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from analyses.scansnap.config import ScanSnapConfig
from analyses.scansnap.result import STATISTICS
from mechprobe import forward
from mechprobe.forward import model_device
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, entropy_nats
from probes.core.model_kind import as_hooked_model
from probes.core.runner import run_probes
from probes.dynamics.scan_order import ScanOrder, scan_order
from probes.dynamics.snap import RateSnap, detect_snap_by_rate
from probes.text.cooccurrence import cooccurrence_ordering
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZTransformer
from toymodels.scansnap.training import query_logits, train_on_cooccurrence
from toymodels.training import History

LOSS_TARGET = 0.05
"""The loss level whose first crossing the main run reports (``first_step_below_loss_target``); drawn on the loss
plot."""

EVAL_SEED_OFFSET = 1_000_003
"""The evaluation sets are drawn from ``seed + EVAL_SEED_OFFSET``, apart from the training stream."""


# -- probing ---------------------------------------------------------------------------------------
def probe_fact(model: nn.Module, data: CooccurrenceData, fact: int, tokens: torch.Tensor, *,
               batch_size: int = 128) -> KeyTokenAttention:
    """Key-token attention of the fact's query token (query row -1) over the given sequences."""
    probe = KeyTokenAttentionProbe([int(data.fact_last[fact])], query_position="last")
    (result,) = run_probes(as_hooked_model(model), [probe], tokens.split(batch_size), data=f"cooccurrence fact {fact}",
                           progress=False)
    return result


def fact_statistics(result: KeyTokenAttention, data: CooccurrenceData, fact: int) -> dict[str, float]:
    """Masses, entropies and co-occurrence ordering of one fact from its probe result (keys: ``result.STATISTICS``)."""
    query = int(data.fact_last[fact])
    distinct = data.distinct_tokens[fact]
    known = data.context_probs[fact][None].float()
    ordering = cooccurrence_ordering(result, known, keys=distinct.tolist())
    corpus = cooccurrence_ordering(result, None, keys=distinct.tolist())
    by_mass = cooccurrence_ordering(result, known, keys=distinct.tolist(), measure="mass")
    return {
        "distinct_mass": result.key_mass(query, distinct),
        "common_mass": result.key_mass(query, data.common_tokens) if len(data.common_tokens) else 0.0,
        "entropy": result.token_entropy(query, distinct),
        "entropy_all": result.token_entropy(query, data.support(fact)),
        "cooccurrence_spearman": float(ordering.spearman[0, 0, 0]),
        "cooccurrence_kendall": float(ordering.kendall[0, 0, 0]),
        "cooccurrence_spearman_corpus": float(corpus.spearman[0, 0, 0]),
        "cooccurrence_spearman_mass": float(by_mass.spearman[0, 0, 0]),
    }


def average_statistics(results: list[KeyTokenAttention], data: CooccurrenceData) -> dict[str, float]:
    """``fact_statistics`` averaged over facts (``results[f]`` probed on fact ``f``'s sequences)."""
    rows = [fact_statistics(result, data, f) for f, result in enumerate(results)]
    return {key: sum(r[key] for r in rows) / len(rows) for key in STATISTICS}


def eval_loss(model: nn.Module, data: CooccurrenceData, eval_sets: list[torch.Tensor]) -> float:
    """Query-token cross-entropy averaged over facts (``eval_sets[f]``: fact ``f``'s sequences).

    The sequences are moved to the model's device.
    """
    device = model_device(model)
    with forward.measuring(model):
        losses = [F.cross_entropy(query_logits(model, tokens.to(device)),
                                  data.fact_next[f].expand(len(tokens)).to(device))
                  for f, tokens in enumerate(eval_sets)]
    return float(torch.stack(losses).mean())


def expected_attention(model: YZTransformer, data: CooccurrenceData) -> torch.Tensor:
    """The Y/Z model's long-context composition [fact d_vocab] of every fact, on the CPU."""
    return model.expected_attention(data.fact_last, data.context_probs).cpu()


def eval_sets(config: ScanSnapConfig, data: CooccurrenceData) -> list[torch.Tensor]:
    """``config.eval_sequences`` fixed sequences per fact, drawn apart from the training stream."""
    generator = torch.Generator().manual_seed(config.seed + EVAL_SEED_OFFSET)
    return [data.sample(config.eval_sequences, generator, fact=f)[0] for f in range(data.n_facts)]


@dataclass(frozen=True)
class MainRun:
    """The trained Y/Z model, what was recorded while training it, and its summary numbers.

    ``trajectory[f][i]``: the composition over fact ``f``'s support (common, then distinct tokens) at
    ``steps[i]`` (step 0: initialisation); ``numbers``: the :class:`ScanSnapResult` fields it measures.
    """

    model: YZTransformer
    data: CooccurrenceData
    history: History
    steps: list[int]
    trajectory: list[list[torch.Tensor]]
    snaps: tuple[RateSnap, ...]
    scan_orders: tuple[ScanOrder, ...]
    numbers: dict[str, Any]


def main_run(config: ScanSnapConfig, *, progress: bool) -> MainRun:
    """Train the Y/Z model, recording the support composition of every fact at every step."""
    data = CooccurrenceData(config.data)
    model = YZTransformer(config.model_config(), device=config.device)
    evaluation = eval_sets(config, data)
    supports = [data.support(f) for f in range(data.n_facts)]
    trajectory: list[list[torch.Tensor]] = [[] for _ in range(data.n_facts)]

    def record(step: int, trained: nn.Module, history: Any) -> None:  # trained is model
        expected = expected_attention(model, data)
        for f in range(data.n_facts):
            trajectory[f].append(expected[f, supports[f]].float())

    record(0, model, None)
    history = train_on_cooccurrence(model, data, config.training(), callbacks=[record], progress=progress)
    steps = [0, *history.steps]
    snaps = tuple(detect_snap_by_rate(torch.stack(trajectory[f]), steps, rate=config.snap_rate,
                                      patience=config.snap_patience) for f in range(data.n_facts))
    n_common = len(data.common_tokens)
    orders = tuple(scan_order(torch.stack(trajectory[f])[:, n_common:],
                              data.context_probs[f, data.distinct_tokens[f]], steps, tolerance=config.scan_tolerance)
                   for f in range(data.n_facts))
    losses = history.values["loss"]
    below = [s for s, loss in zip(history.steps, losses) if loss < LOSS_TARGET]
    expected = expected_attention(model, data)
    expected_entropy = entropy_nats(torch.gather(expected, 1, data.distinct_tokens)).mean()
    results = [probe_fact(model, data, f, evaluation[f]) for f in range(data.n_facts)]
    deviation = max(float((r.mass[0, 0, 0, supports[f]] - expected[f, supports[f]]).abs().max())
                    for f, r in enumerate(results))
    numbers = {
        "final_loss": eval_loss(model, data, evaluation),
        **average_statistics(results, data),
        "probe_vs_expected_max_abs": deviation,
        "snap_step": max(s.step for s in snaps),
        "snapped": all(s.snapped for s in snaps),
        "scan_order_spearman": sum(o.spearman for o in orders) / len(orders),
        "scan_order_kendall": sum(o.kendall for o in orders) / len(orders),
        "initial_loss": losses[0],
        "log_vocab": math.log(data.d_vocab),
        "loss_at_step_10": losses[min(9, len(losses) - 1)],
        "first_step_below_loss_target": below[0] if below else None,
        "entropy_expected": float(expected_entropy),
        "entropy_uniform_distinct": float(entropy_nats(torch.gather(data.context_probs, 1,
                                                                    data.distinct_tokens)).mean()),
    }
    return MainRun(model, data, history, steps, trajectory, snaps, orders, numbers)
