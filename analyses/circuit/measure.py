"""``mechprobe circuit``'s measurement: senders and receivers (named, or the top heads of a head score chosen on the
even batches), every (sender, receiver) pair with the receiver in a later layer through each input asked for,
path-patched on the odd batches beside random edges of the same shape, on the model and on its random-weight
control (the same edges), with each edge's verdict and the weight-only composition screen's rank correlation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from analyses.cli_checks import check_block_fits, check_head_count, check_pattern_targets
from mechprobe import validation
from probes import ModelInfo, head_scores, repeated_random_tokens
from probes.causal import (
    EDGE_INPUTS,
    CompositionScores,
    EdgeEffect,
    check_heads,
    edge_effect,
    repeated_half,
    screen_rank_correlation,
)
from probes.causal.ablation import check_method
from probes.core.errors import ConfigError, InputError
from probes.core.model_kind import HookedModel
from probes.stats.findings import Finding

Heads = tuple[tuple[int, int], ...]


FLAGS = {"seq_len": "--seq-len", "batches": "--batches", "batch_size": "--batch-size", "n_draws": "--draws"}
"""The ``mechprobe circuit`` flag of each setting that has one (its errors name the flag)."""


@dataclass(frozen=True)
class CircuitSettings:
    """Senders: ``senders`` or the ``sender_top`` ``(kind, k)`` heads; receivers likewise; ``inputs`` of the
    receiver each edge runs through; ``method`` replacing the sender; ``batches`` odd batches of ``batch_size``
    rows of ``[BOS] X X`` (``|X| = seq_len``; as many even ones choose top heads); ``n_draws`` random edges."""

    senders: Heads | None = None
    sender_top: tuple[str, int] | None = ("previous_token", 1)
    receivers: Heads | None = None
    receiver_top: tuple[str, int] | None = ("induction", 1)
    inputs: tuple[str, ...] = ("k",)
    method: str = "mean"
    seq_len: int = 20
    batches: int = 4
    batch_size: int = 4
    n_draws: int = 100
    seed: int = 0
    n_boot: int = 1000
    max_rows: int = 256

    def __post_init__(self) -> None:
        check_method(self.method)
        for role in ("sender", "receiver"):
            named, top = getattr(self, f"{role}s"), getattr(self, f"{role}_top")
            if (named is None) == (top is None):
                raise ConfigError(f"Name the {role}s with exactly one of --{role}s (16.0,17.2) or --{role}-top "
                                  f"(KIND:K).")
        if not self.inputs or any(kind not in EDGE_INPUTS for kind in self.inputs) or len(set(self.inputs)) != len(
                self.inputs):
            raise ConfigError(f"--inputs must name distinct receiver inputs among k, q, v (e.g. k,q); got "
                              f"{','.join(self.inputs)!r}.")
        for name, low in (("seq_len", 2), ("batches", 2), ("batch_size", 2 if self.method == "resample" else 1),
                          ("n_draws", 0), ("n_boot", 1), ("max_rows", 1)):  # named by their flags where they have one
            validation.integer(FLAGS.get(name, name), getattr(self, name), low)
        validation.seed("--seed", self.seed)


def protocol_batches(info: ModelInfo, settings: CircuitSettings) -> list:
    """``2 * batches`` batches of ``[BOS] X X`` from ``seed``: even ones choose top heads, odd ones are measured."""
    check_block_fits(FLAGS["seq_len"], settings.seq_len, info)
    generator = torch.Generator().manual_seed(settings.seed)
    return [repeated_random_tokens(info, seq_len=settings.seq_len, n_sequences=settings.batch_size,
                                   generator=generator) for _ in range(2 * settings.batches)]


def choose_heads(model: HookedModel, settings: CircuitSettings, made: list) -> tuple[Heads, Heads, dict[str, Any]]:
    """The senders and receivers (top heads chosen on the even batches) and how they were chosen."""
    info = ModelInfo.of(model)
    chosen: dict[str, Any] = {}
    picked = {}
    tops = {role: getattr(settings, f"{role}_top") for role in ("sender", "receiver")}
    kinds = tuple(dict.fromkeys(kind for kind, _ in (top for top in tops.values() if top is not None)))
    scores = head_scores(model, made[0::2], kinds=kinds, batch_size=settings.batch_size) if kinds else None
    for role, top in tops.items():
        if top is None or scores is None:
            picked[role] = check_heads(getattr(settings, f"{role}s"), info)
            chosen[role] = {"named": [list(head) for head in picked[role]]}
            continue
        kind, k = top
        check_head_count(f"--{role}-top", f"{kind}:{k}", k, info)
        check_pattern_targets(f"--{role}-top", kind, info, settings.seq_len)
        best = scores.top_heads(kind, k)
        picked[role] = tuple((layer, head) for layer, head, _ in best)
        chosen[role] = {"by": kind, "k": k, "chosen_on": "even batches",
                        "heads": [[layer, head] for layer, head, _ in best], "scores": [s for _, _, s in best]}
    return picked["sender"], picked["receiver"], chosen


def edge_pairs(senders: Heads, receivers: Heads) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Every (sender, receiver) with the receiver in a later layer; :class:`InputError` when there is none."""
    pairs = [(s, r) for s in senders for r in receivers if s[0] < r[0]]
    if not pairs:
        raise InputError(f"No receiver {list(receivers)} lies in a layer after a sender {list(senders)}, so there is "
                         f"no edge to measure. Name receivers in later layers (--receivers) or take more top heads.")
    return pairs


def measure_edges(model: HookedModel, settings: CircuitSettings, pairs: list, made: list, *, label: str = ""
                  ) -> list[EdgeEffect]:
    """Every pair through every input of ``settings`` on the odd batches of ``made``."""
    return [edge_effect(model, sender, receiver, made[1::2], slice_fn=repeated_half(settings.seq_len), input=kind,
                        method=settings.method, n_draws=settings.n_draws, seed=settings.seed, n_boot=settings.n_boot,
                        max_rows=settings.max_rows,
                        data=f"repeated random tokens{label} (seq_len={settings.seq_len}, odd batches of "
                             f"{settings.batches}x{settings.batch_size}, seed={settings.seed})")
            for sender, receiver in pairs for kind in settings.inputs]


def edge_findings(measured: list[EdgeEffect], control: list[EdgeEffect] | None) -> dict[str, Finding]:
    """``"{edge} / {effect}"`` -> its :class:`Finding`, against the control's same edge when there is one."""
    findings = {}
    for i, edge in enumerate(measured):
        for effect in edge.effects:
            findings[f"{edge.name} / {effect}"] = edge.finding(effect, None if control is None else control[i])
    return findings


def screen_correlations(composition: CompositionScores, measured: list[EdgeEffect]) -> dict[str, float]:
    """Per edge and effect: Spearman's rho of the composition score of the edge's input with the patched effect,
    over the edge and its null's draws (the distinct edges measured)."""
    out = {}
    for edge in measured:
        edges = torch.cat([torch.tensor([[*edge.sender, *edge.receiver]]), edge.null_edges.long()])
        for i, effect in enumerate(edge.effects):
            effects = torch.cat([edge.value[None, i], edge.null[:, i]])
            out[f"{edge.name} / {effect}"] = screen_rank_correlation(composition, edge.input, edges, effects)
    return out
