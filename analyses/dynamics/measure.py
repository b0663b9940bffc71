"""The probes of one checkpoint of a series: head scores and in-context loss, each with its interval, null and
per-batch sums (the units the change-point bootstrap resamples).

The data are the induction protocol's ``[BOS] X X`` batches (``X`` random non-special tokens, seeded by
``config.seed``, the same at every checkpoint): the even batches choose each head score's best head, the odd
batches measure it (:func:`analyses.pretrained.held_out.held_out_head_score`: bootstrap interval over batches,
uniform-attention chance as the null). On the odd batches also:

- ``repeat_loss_gain``: the next-token loss (nats/token) on the first copy of ``X`` minus on the repeated copy,
  over the ``seq_len - 1`` predictions of each copy that copying could help (``X[1:]``): 0 for a model that does
  not use the context, ``log(d_vocab)``-sized for a perfect copier; null 0;
- ``repeated_half_loss``: the loss on the repeated copy alone (the number Olsson et al. plot);
- ``context_loss_gain`` (when text batches are given): the loss at early positions of natural text minus at late
  positions (Olsson et al.'s in-context learning score), null 0;
- ``topic_attention`` and ``cooccurrence_ordering`` (when the text probes' data are given): the report's text
  probes, :mod:`analyses.dynamics.text_measure`.

Example: ``measure_checkpoint(model, checkpoint, DynamicsConfig()).curves["induction"].value``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.curve_point import CurvePoint, mean_point
from analyses.dynamics.text_measure import TEXT_CURVES, TextProbeData, text_points
from analyses.pretrained.held_out import halves, held_out_head_score
from mechprobe import forward
from probes import HeadScoreProbe, ModelInfo, TokenBatch, feed_probes, repeated_random_tokens
from probes.core.checkpoint_series import Checkpoint
from probes.core.model_kind import HookedModel
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_draws, percentile_interval
from probes.stats.nulls import permutation_p_value

HEAD_CURVES = ("previous_token", "induction", "duplicate_token")
LOSS_CURVES = ("repeat_loss_gain", "repeated_half_loss", "context_loss_gain")
# the induction toy's series (analyses.dynamics.toy_measure; the phases: analyses.dynamics.toy_phases)
TOY_CURVES = ("copier", "classifier", "beats_uniform", "beats_unigram", "beats_bigram")


@dataclass(frozen=True)
class CheckpointMeasure:
    """Every curve of one checkpoint, where it came from and how long it took (``seconds``)."""

    step: int
    tokens: int | None
    spec: str
    curves: dict[str, CurvePoint]
    seconds: float


def protocol_batches(info: ModelInfo, config: DynamicsConfig) -> list[TokenBatch]:
    """The ``[BOS] X X`` batches every checkpoint is measured on (seeded by ``config.seed``)."""
    generator = torch.Generator().manual_seed(config.seed)
    return [repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=config.batch_size, generator=generator)
            for _ in range(config.n_batches)]


def _position_losses(model: HookedModel, batch: TokenBatch) -> Tensor:
    """``loss[b, q]``: the next-token loss of predicting ``tokens[b, q + 1]`` at ``q`` (NaN at the last position)."""
    logits = forward.run(model, batch.tokens)
    logits = logits.float().cpu() if isinstance(logits, Tensor) else logits.logits.float().cpu()
    tokens = batch.tokens.cpu()
    nll = logits[:, :-1].logsumexp(-1) - logits[:, :-1].gather(-1, tokens[:, 1:, None])[..., 0]
    return torch.cat([nll.double(), torch.full((tokens.shape[0], 1), math.nan, dtype=torch.float64)], 1)


def _sums(loss: Tensor, mask: Tensor) -> tuple[float, float]:
    return float(loss[mask].sum()), float(mask.sum())


def difference_point(first: list[tuple[float, float]], second: list[tuple[float, float]], *, n_boot: int,
                      seed: int) -> CurvePoint:
    """``mean(first) - mean(second)`` over batches (each a (sum, count) per batch), bootstrap CI, null 0."""
    units = {"a": torch.tensor([s for s, _ in first]), "na": torch.tensor([n for _, n in first]),
             "b": torch.tensor([s for s, _ in second]), "nb": torch.tensor([n for _, n in second])}
    estimate, draws = bootstrap_draws(units, lambda s: s["a"] / s["na"] - s["b"] / s["nb"], n_boot=n_boot, seed=seed)
    low, high = percentile_interval(draws)
    return CurvePoint(float(estimate), (float(low), float(high)), 0.0,
                      float(permutation_p_value(torch.tensor(0.0), draws, alternative="less")),
                      tuple(units["a"].tolist()), tuple(units["na"].tolist()),
                      tuple(units["b"].tolist()), tuple(units["nb"].tolist()))


def _mean_point(parts: list[tuple[float, float]], *, n_boot: int, seed: int) -> CurvePoint:
    """A plain mean over batches with its bootstrap CI (no null: a descriptive curve, NaN null and p)."""
    return mean_point(torch.tensor([s for s, _ in parts]), torch.tensor([n for _, n in parts]), n_boot=n_boot,
                      seed=seed)


def loss_points(model: HookedModel, batches: Sequence[TokenBatch], config: DynamicsConfig) -> dict[str, CurvePoint]:
    """``repeat_loss_gain`` and ``repeated_half_loss`` on ``[BOS] X X`` batches (module docstring)."""
    first, second = [], []
    for batch in batches:
        loss = _position_losses(model, batch)
        n_pos, length = batch.tokens.shape[1], config.seq_len
        positions = torch.arange(n_pos)
        in_first = (positions >= n_pos - 2 * length) & (positions < n_pos - length - 1)
        in_second = (positions >= n_pos - length) & (positions < n_pos - 1)
        first.append(_sums(loss, in_first.expand_as(loss)))
        second.append(_sums(loss, in_second.expand_as(loss)))
    return {"repeat_loss_gain": difference_point(first, second, n_boot=config.n_boot, seed=config.seed),
            "repeated_half_loss": _mean_point(second, n_boot=config.n_boot, seed=config.seed)}


def context_loss_point(model: HookedModel, batches: Sequence[TokenBatch], config: DynamicsConfig) -> CurvePoint:
    """``context_loss_gain``: mean loss at early text positions minus at late ones (``config.early`` and
    ``config.late`` are ``[start, stop)`` position ranges; only valid positions with a valid next token count)."""
    early, late = [], []
    for batch in batches:
        loss = _position_losses(model, batch)
        valid = batch.valid.cpu().bool()
        counted = valid & valid.roll(-1, 1) & torch.isfinite(loss)
        positions = torch.arange(loss.shape[1])[None].expand_as(loss)
        early.append(_sums(loss, counted & (positions >= config.early[0]) & (positions < config.early[1])))
        late.append(_sums(loss, counted & (positions >= config.late[0]) & (positions < config.late[1])))
    return difference_point(early, late, n_boot=config.n_boot, seed=config.seed)


def head_points(model: HookedModel, batches: Sequence[TokenBatch], config: DynamicsConfig, *, data: str
                ) -> dict[str, CurvePoint]:
    """Each head score's best head chosen on the even batches and measured on the odd ones (module docstring)."""
    selection_batches, measuring_batches = halves(batches)
    selection, measuring = HeadScoreProbe(HEAD_CURVES), HeadScoreProbe(HEAD_CURVES)
    recorder = BatchStateRecorder()
    feed_probes(model, [selection], selection_batches, data=data, seed=config.seed, progress=False)
    feed_probes(model, [measuring], measuring_batches, data=data, seed=config.seed, progress=False,
                on_batch=recorder)
    chosen = selection.compute()
    per_batch = recorder.per_unit(0)
    points = {}
    for kind in HEAD_CURVES:
        held = held_out_head_score(kind, chosen, per_batch, n_boot=config.n_boot, seed=config.seed)
        layer, head = held.chosen_head()
        points[kind] = CurvePoint(held.value, held.ci, held.null_value, held.p_value,
                                  tuple(per_batch[f"{kind}/mass"][:, layer, head].double().tolist()),
                                  tuple(per_batch[f"{kind}/rows_with_target"].double().tolist()), head=(layer, head))
    return points


def measure_checkpoint(model: HookedModel, checkpoint: Checkpoint, config: DynamicsConfig, *,
                       text_batches: Sequence[TokenBatch] = (), text: TextProbeData | None = None
                       ) -> CheckpointMeasure:
    """Every curve of ``model`` at ``checkpoint`` (module docstring); ``text_batches`` add ``context_loss_gain``,
    ``text`` the text probes' ``topic_attention`` and ``cooccurrence_ordering``
    (:mod:`analyses.dynamics.text_measure`)."""
    started = time.perf_counter()
    info = ModelInfo.of(model)
    batches = protocol_batches(info, config)
    data = f"repeated random tokens (seq_len={config.seq_len}, {config.n_batches}x{config.batch_size}, " \
           f"seed={config.seed})"
    curves = head_points(model, batches, config, data=data)
    curves.update(loss_points(model, halves(batches)[1], config))
    if text_batches:
        curves["context_loss_gain"] = context_loss_point(model, text_batches, config)
    if text is not None:
        curves.update(text_points(model, text, config))
    return CheckpointMeasure(checkpoint.step, checkpoint.tokens, checkpoint.spec, curves,
                             time.perf_counter() - started)


def curve_table(measures: Sequence[CheckpointMeasure]) -> Mapping[str, list[float]]:
    """Each curve's value per checkpoint (NaN where a checkpoint lacks it), for printing and plotting."""
    names = [n for n in (*HEAD_CURVES, *LOSS_CURVES, *TEXT_CURVES, *TOY_CURVES)
             if any(n in m.curves for m in measures)]
    return {n: [m.curves[n].value if n in m.curves else math.nan for m in measures] for n in names}
