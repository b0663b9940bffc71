"""The Scan and Snap toy's findings (Tian et al. 2023) in the schema of the pretrained ones, judged against the
toy at initialisation.

``cooccurrence_ordering`` (the pretrained finding of :mod:`analyses.pretrained.findings`, measured on the Y/Z
toy): the probe of the pretrained models, ``KeyTokenAttentionProbe(query_tokens=the facts' last tokens,
key_tokens=every fact's distinct tokens, query_position="last", distance_matched=True)``, reads the model's only
head (L0H0, no search) on the held-out evaluation sequences of every fact (drawn apart from the training stream).
The statistic is the Spearman, per query token, of distance-matched attention with co-occurrence over the keys
the query saw (its fact's distinct tokens: the paper's claim is about them), averaged over the query tokens.

- Co-occurrence is what the probe counts in the probed sequences, as for pretrained models: the null
  (:func:`probes.text.cooccurrence.ordering_null`, counts shuffled among each query's keys) permutes exactly
  these counts, and at the ``fast`` preset's 128 sequences per fact they rank the distinct tokens as
  ``P(l | m, n)`` does.
- Distance matching in a model without positions: every query row is the last of ``seq_len`` tokens, so every
  row sees the same keys (the probe's scaling by the visible-key count is one constant: there is no
  causal-prefix length to remove), and attention cannot depend on distance, so the matched value is a key's
  per-occurrence attention divided by the mean per-occurrence attention of the query's tracked keys (its facts'
  distinct tokens) at the same distances: the ranks of per-occurrence attention, up to the sampling noise of
  those per-distance means (seed 0: 0.5405 matched vs 0.5387 per occurrence over the mean, rarest token).
- Interval: 95% percentile bootstrap over ``N_UNITS`` batches of held-out sequences (each holds an equal share
  of every fact's sequences), each resample's summed probe state computed as the probe computes its own (every
  resample at once): with two facts a bootstrap over query tokens would be degenerate.

``scan_order`` (the paper's own claim, toy only): attention on the distinct tokens is dropped "following the
order of low to high co-occurrence". Per fact, the step at which each distinct token's attention peaks
(:func:`probes.dynamics.scan_order.scan_order` on the composition recorded at every step of the main run),
rank-correlated with ``P(l | m, n)``; the mean over facts. Null: the same statistic with ``P(l | m, n)`` permuted
among each fact's distinct tokens (``N_PERMUTATIONS`` draws, one-sided p-value); interval: 95% percentile
bootstrap over each fact's distinct tokens.

``scansnap_attention_causal`` (toy only): the loss the trained model loses when its attention is made uniform
over the context (a hook on ``blocks.0.attn.hook_attn_scores`` sets every score but the query's own, -inf, to
0: what ``Z = 0`` gives), on the held-out sequences: value = mean cross-entropy of the query's next token with
uniform attention minus as trained (nats per sequence); interval: 95% percentile bootstrap over the
``N_UNITS`` batches of ``cooccurrence_ordering``; null: no change, p from 10,000 random sign flips of the
batches' changes (:func:`analyses.toy_causal.paired_loss_change`); it holds at least 0.1 nats (the
pretrained head ablations' threshold) above the larger of the null and the control. It does not hold on the
fast preset: uniform attention raises the loss from 2e-5 to 0.0015-0.0024 nats (seeds 0-4), a change far
below 0.1 though clear of the null (p = 1e-4). With two facts whose distinct tokens never overlap, the
uniformly pooled context already names the fact and the decoder ``Y`` has grown large enough that the snap
only widens a margin that was already decisive: attention's snap is real (``cooccurrence_ordering``,
``scan_order``) but the toy's predictions do not rest on it.

``scan_before_snap`` (the paper's own claim, toy only): per fact, the snap step minus the scan step (where the
composition's total-variation distance from its start crosses half-way to its peak), mean over facts
(:mod:`analyses.scansnap.order`; the rules of every toy order: :mod:`analyses.toy_orders`). Its control, the
composition with attention frozen, neither scans nor snaps: 0, no order.

Controls. The toy at initialisation (same seed, same evaluation sequences); its trajectory, a dynamics
statistic's control, is that of the same training with attention frozen at initialisation (eta_Z = 0): ``Z``
keeps its initial value, so the composition recorded at every step is the initial one (Y does not enter it).
With the paper's ``Y = Z = 0`` the controls are ties: uniform attention (every distance-matched value 1, and
nothing for ``scansnap_attention_causal`` to change: 0 with p = 1) and every peak at step 0. A query or fact
whose attention (peak steps) or co-occurrence is tied across its keys has no ordering: its Spearman, undefined,
counts as 0, in the value, every bootstrap draw and every null draw, so the controls are 0 with a null of 0 and
p = 1 rather than NaN.

Example::

    findings = seed_findings(PRESETS["fast"], 1)
    findings.findings["scan_order"].holds, findings.control["scan_order"].value   # True, 0.0
    findings.findings["scansnap_attention_causal"].value   # 0.0024 nats: uniform attention costs almost nothing
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypedDict

import torch
import torch.nn.functional as F
from torch import Tensor

from analyses.pretrained.findings import finding_from_spec
from analyses.pretrained.held_out import MIN_RANKED_KEYS
from analyses.scansnap.config import ScanSnapConfig
from analyses.scansnap.main_run import MainRun, eval_sets, main_run
from analyses.scansnap.order import ORDER, frozen_attention_trajectory, scan_before_snap, scan_snap_orders
from analyses.torch_threads import torch_threads
from analyses.toy_causal import paired_loss_change
from analyses.toy_findings import SeedFindings, judge_against_init
from mechprobe import forward
from mechprobe.forward import model_device
from probes import feed_probes
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, distance_matched_ratio
from probes.dynamics.event_orders import ScanSnapOrder
from probes.dynamics.scan_order import ScanOrder, scan_order
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_draws, percentile_interval
from probes.stats.findings import Finding
from probes.stats.nulls import permutation_p_value
from probes.text.cooccurrence import (
    cooccurrence_ordering,
    cooccurring_spearman,
    ordering_null,
    ranked_matched,
    spearman,
)
from toymodels.errors import ToyConfigError
from toymodels.scansnap.data import CooccurrenceData
from toymodels.scansnap.model import YZTransformer

FINDINGS = ("cooccurrence_ordering", "scan_order", "scansnap_attention_causal", ORDER)
N_PERMUTATIONS = 1000
N_BOOT = 1000
N_UNITS = 16
"""Bootstrap units of ``cooccurrence_ordering``: the held-out sequences cut into this many batches."""

ORDERING_STATISTIC = ("Spearman of distance-matched attention with co-occurrence, mean over the facts' last tokens "
                      "(Y/Z toy, held-out sequences; no positions: distance matching rescales per-occurrence "
                      "attention by the same-distance mean, ranks unchanged up to noise; 95% CI: bootstrap over "
                      f"{N_UNITS} batches of sequences)")
ORDERING_SELECTION = "no search: the model's only head (L0H0)"
class FindingSpec(TypedDict):
    """What a toy finding states besides its numbers (the fields of :class:`probes.stats.findings.Finding`)."""

    statistic: str
    null_kind: str
    effect: Literal["difference", "ratio"]
    min_effect: float
    selection: str


SCAN_ORDER_SPEC: FindingSpec = {
    "statistic": ("Spearman of the step at which each distinct token's attention peaks with its co-occurrence "
                  "P(l | m, n), mean over facts (Y/Z toy, over training; 95% CI: bootstrap over each fact's "
                  "distinct tokens)"),
    "null_kind": "co-occurrence permuted among each fact's distinct tokens",
    "effect": "difference",
    "min_effect": 0.1,
    "selection": "no search: every distinct token of every fact",
}

CAUSAL_SPEC: FindingSpec = {
    "statistic": ("loss change (nats per held-out sequence, the query's next token) with attention made uniform over "
                  "the context (Z frozen to 0 by a hook on blocks.0.attn.hook_attn_scores) minus as trained (Y/Z toy; "
                  f"95% CI: bootstrap over {N_UNITS} batches of sequences)"),
    "null_kind": "no change (sign flips of uniform - trained loss per batch of held-out sequences)",
    "effect": "difference",
    "min_effect": 0.1,  # nats, the pretrained head ablations' threshold
    "selection": "no search: the model's only head (L0H0), its attention made uniform over the context",
}


def _no_order_is_zero(rho: Tensor) -> Tensor:
    """Spearman values with the undefined ones (tied attention, peaks or co-occurrence) as 0: no ordering."""
    return torch.nan_to_num(rho.double(), nan=0.0)


def _ranked_spearman(attention: KeyTokenAttention) -> Tensor:
    """Spearman of distance-matched attention with the counted co-occurrence [query] of the query tokens with
    ``MIN_RANKED_KEYS`` or more keys (NaN where undefined)."""
    ordering = cooccurrence_ordering(attention, measure="distance_matched")
    return ordering.spearman[0, 0, ordering.n_keys >= MIN_RANKED_KEYS].double()


def _ordering_value(attention: KeyTokenAttention) -> Tensor:
    """The statistic: the mean of :func:`_ranked_spearman` with the undefined ones as 0."""
    return _no_order_is_zero(_ranked_spearman(attention)).mean()


def _ordering_draws(state: Mapping[str, Tensor]) -> Tensor:
    """:func:`_ordering_value` of every bootstrap resample at once: ``state`` is the probe's summed state with a
    leading resample axis on every entry; each draw's value equals the probe's ``compute()`` of that draw's state
    put through :func:`_ordering_value`."""
    matched = ranked_matched(distance_matched_ratio(state)[..., 0, 0, :, :])  # draw query key
    # ranked by the float32 counts of KeyTokenAttention.occurrences; the statistic keeps the float32 Spearman
    rho, n_keys = cooccurring_spearman(matched, state["occurrences"].float())
    ranked = n_keys >= MIN_RANKED_KEYS
    # the mean over each draw's ranked queries with the others added as 0: float32 values summed in float64 are
    # exact unless their magnitudes span some 2^29, so neither the zeros nor the order of the sum move a bit
    return torch.where(ranked, _no_order_is_zero(rho.float()), 0.0).sum(-1) / ranked.sum(-1)


def held_out_units(evaluation: Sequence[Tensor]) -> list[Tensor]:
    """``N_UNITS`` batches of held-out sequences (fewer if the facts have fewer), each holding an equal share of
    every fact's sequences (``evaluation[f]``: fact ``f``'s sequences)."""
    n_units = min(N_UNITS, *(len(tokens) for tokens in evaluation))
    return [torch.cat(parts) for parts in zip(*(tokens.tensor_split(n_units) for tokens in evaluation))]


def ordering_probe(data: CooccurrenceData) -> KeyTokenAttentionProbe:
    """The probe of ``cooccurrence_ordering``: attention of the facts' last tokens (the queries, at the last
    position) on every fact's distinct tokens, distance-matched."""
    return KeyTokenAttentionProbe(data.last_tokens.tolist(), data.distinct_tokens.flatten().tolist(),
                                  query_position="last", distance_matched=True)


def ordering_finding(model: YZTransformer, data: CooccurrenceData, evaluation: Sequence[Tensor],
                     seed: int) -> Finding:
    """``cooccurrence_ordering`` of ``model`` on the held-out sequences (module docstring), unadjusted."""
    if data.config.num_distinct < MIN_RANKED_KEYS:
        raise ToyConfigError(f"The findings rank each fact's {data.config.num_distinct} distinct tokens by "
                             f"co-occurrence, as for pretrained models, and need at least {MIN_RANKED_KEYS}; set "
                             f"data.num_distinct={MIN_RANKED_KEYS} or more.")
    probe = ordering_probe(data)
    recorder = BatchStateRecorder()
    feed_probes(model, [probe], held_out_units(evaluation), data="held-out co-occurrence sequences", seed=seed,
                progress=False, on_batch=recorder)
    attention = probe.compute()
    value = _ordering_value(attention)
    _, draws = bootstrap_draws(recorder.per_unit(0), _ordering_draws, n_boot=N_BOOT, seed=seed)
    low, high = percentile_interval(draws)
    # ordering_null averages over the queries with a defined Spearman; the statistic counts the others as 0
    rho = _ranked_spearman(attention)
    null = ordering_null(attention, min_keys=MIN_RANKED_KEYS, n_permutations=N_PERMUTATIONS, seed=seed)[:, 0, 0]
    null = _no_order_is_zero(null * int(torch.isfinite(rho).sum()) / len(rho))
    p_value = permutation_p_value(value, null)  # ties within rounding count as reaching the value
    return finding_from_spec("cooccurrence_ordering", float(value), (float(low), float(high)), float(null.mean()),
                             float(p_value), statistic=ORDERING_STATISTIC, selection=ORDERING_SELECTION)


def _scan_order_statistic(peaks: Sequence[Tensor], cooccurrence: Sequence[Tensor]) -> Tensor:
    """Mean over facts of Spearman(peak steps, co-occurrence) along the last axis (undefined: 0)."""
    return torch.stack([_no_order_is_zero(spearman(p, c)) for p, c in zip(peaks, cooccurrence)]).mean(0)


def scan_order_finding(orders: Sequence[ScanOrder], seed: int) -> Finding:
    """``scan_order`` from each fact's :class:`ScanOrder` (module docstring), unadjusted."""
    peaks = [torch.tensor(order.peak_steps, dtype=torch.float64) for order in orders]
    cooccurrence = [torch.tensor(order.cooccurrence, dtype=torch.float64) for order in orders]
    value = _scan_order_statistic(peaks, cooccurrence)
    generator = torch.Generator().manual_seed(seed)
    shuffled = [c[torch.rand(N_PERMUTATIONS, len(c), generator=generator).argsort(1)] for c in cooccurrence]
    null = _scan_order_statistic([p.expand(N_PERMUTATIONS, -1) for p in peaks], shuffled)
    tokens = [torch.randint(len(p), (N_BOOT, len(p)), generator=generator) for p in peaks]
    draws = _scan_order_statistic([p[i] for p, i in zip(peaks, tokens)], [c[i] for c, i in zip(cooccurrence, tokens)])
    low, high = percentile_interval(draws)
    spec = SCAN_ORDER_SPEC
    return Finding(spec["statistic"], float(value), (float(low), float(high)), spec["null_kind"], float(null.mean()),
                   float(permutation_p_value(value, null)), spec["min_effect"], spec["effect"],
                   selection=spec["selection"])


def frozen_attention_orders(model: YZTransformer, data: CooccurrenceData, steps: Sequence[int],
                            tolerance: float) -> tuple[ScanOrder, ...]:
    """The scan order of every fact in the same training with attention frozen at ``model``'s (eta_Z = 0):
    ``Z`` never moves, so the composition recorded at each of ``steps`` is the current one."""
    composition = model.expected_attention(data.fact_last, data.context_probs).cpu().float()
    return tuple(scan_order(composition[f, data.distinct_tokens[f]].expand(len(steps), -1),
                            data.context_probs[f, data.distinct_tokens[f]], steps, tolerance=tolerance)
                 for f in range(data.n_facts))


def _uniform_scores(scores: Tensor, hook: Any) -> Tensor:
    """Every score 0 but the query's own key (-inf: excluded): uniform attention over the context."""
    return torch.where(torch.isfinite(scores), torch.zeros_like(scores), scores)


def query_losses(model: YZTransformer, tokens: Tensor, label: Tensor, *, uniform: bool) -> Tensor:
    """Cross-entropy (nats) of ``label`` at the query (the last position) of each of ``tokens`` [sequence], with the
    trained attention or (``uniform``) attention made uniform over the context."""
    hooks: list[tuple[str | Callable[..., Any], Callable[..., Any]]] = (
        [("blocks.0.attn.hook_attn_scores", _uniform_scores)] if uniform else [])
    logits = forward.run(model, tokens, fwd_hooks=hooks)[:, -1]
    return F.cross_entropy(logits.double(), label.expand(len(tokens)), reduction="none").cpu()


def attention_causal_finding(model: YZTransformer, data: CooccurrenceData, evaluation: Sequence[Tensor],
                             seed: int) -> Finding:
    """``scansnap_attention_causal`` of ``model`` on the held-out sequences (module docstring), unadjusted."""
    device = model_device(model)
    n_units = min(N_UNITS, *(len(tokens) for tokens in evaluation))

    def per_unit(values: Sequence[Tensor]) -> Tensor:  # each unit an equal share of every fact's sequences
        return torch.stack([torch.cat(parts).sum() for parts in zip(*(v.tensor_split(n_units) for v in values))])

    def losses(uniform: bool) -> Tensor:
        return per_unit([query_losses(model, tokens.to(device), data.fact_next[f].to(device), uniform=uniform)
                         for f, tokens in enumerate(evaluation)])

    count = per_unit([torch.ones(len(tokens), dtype=torch.float64) for tokens in evaluation])
    clean, uniform = losses(False), losses(True)
    change = paired_loss_change(count, clean, uniform, seed=seed)
    spec = CAUSAL_SPEC
    total = float(count.sum())
    statistic = (f"{spec['statistic']}; loss as trained {float(clean.sum()) / total:.3g}, uniform "
                 f"{float(uniform.sum()) / total:.3g}")
    return Finding(statistic, change.value, change.ci, spec["null_kind"], change.null_value, change.p_value,
                   spec["min_effect"], spec["effect"], selection=spec["selection"])


def measure(model: YZTransformer, orders: Sequence[ScanOrder], scan_snaps: Sequence[ScanSnapOrder],
            data: CooccurrenceData, evaluation: Sequence[Tensor], config: ScanSnapConfig) -> dict[str, Finding]:
    """The findings of one toy (unadjusted): ``model`` probed on ``evaluation``, ``orders`` (scan orders) and
    ``scan_snaps`` (scan and snap per fact) its training's, at ``config.seed``."""
    seed = config.seed
    return {"cooccurrence_ordering": ordering_finding(model, data, evaluation, seed),
            "scan_order": scan_order_finding(orders, seed),
            "scansnap_attention_causal": attention_causal_finding(model, data, evaluation, seed),
            ORDER: scan_before_snap(scan_snaps, config)}


def main_run_findings(config: ScanSnapConfig, main: MainRun, evaluation: Sequence[Tensor]) -> SeedFindings:
    """The findings of ``config.seed``'s main run (its trained model, scan orders and scan and snap) against the same
    toy at initialisation, both probed on ``evaluation`` (the run's held-out sequences per fact)."""
    initial = YZTransformer(config.model_config(), device=config.device)
    trained = measure(main.model, main.scan_orders, scan_snap_orders(main.trajectory, main.steps, config),
                      main.data, evaluation, config)
    frozen = scan_snap_orders(frozen_attention_trajectory(initial, main.data, main.steps), main.steps, config)
    init = measure(initial, frozen_attention_orders(initial, main.data, main.steps, config.scan_tolerance), frozen,
                   main.data, evaluation, config)
    return judge_against_init(trained, init, config.seed)


def seed_findings(config: ScanSnapConfig, seed: int) -> SeedFindings:
    """Train the Y/Z model of ``config`` at ``seed`` (no figures, no files, no progress, ``config.threads``
    torch threads) and return its findings against itself at initialisation (:func:`main_run_findings`)."""
    config = dataclasses.replace(config, seed=seed)
    with torch_threads(config.threads):
        main = main_run(config, progress=False)
        return main_run_findings(config, main, eval_sets(config, main.data))
