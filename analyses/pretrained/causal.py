"""The causal findings of a pretrained model: knock out the heads a probe names and measure what the model loses,
beside random head sets of the same size matched layer by layer (:mod:`probes.causal`).

Three ablations, each choosing its heads on data it does not measure on:

- ``induction_heads_causal``: the ``k`` best induction heads on the even protocol batches ([BOS] X X), mean-ablated
  on fresh repeated random sequences; statistic: the loss change on the repeated half.
- ``previous_token_causal``: the ``k`` best previous-token heads on the even text batches, mean-ablated on the same
  fresh repeated sequences (an induction circuit needs its previous-token heads); the same statistic.
- ``topic_heads_causal``: the ``k`` heads with the largest same- minus different-topic attention on the even text
  batches, mean-ablated on rows of the odd text batches (the rows with the most tokens whose topic already
  appeared: few tokens carry a topic, and those rows are ranked from the labels alone, before any model runs);
  statistic: the loss change on tokens whose LDA topic already appeared in the row minus the change on tokens
  whose topic did not. How many rows is set by power (:func:`topic_rows_for_power`): a pilot ablation of the
  chosen heads on the ``text_rows`` richest rows gives the statistic's spread per row, from which the rows an
  80%-power design needs at the 0.02-nat threshold follow (:func:`probes.stats.power.units_for_power`). Where
  that is within ``text_rows_max`` (and the rows there are), the ablation runs on that many rows; where it is not,
  more rows cannot buy the power, and the later rows are poorer in topic words (on SmolLM2, 24 rows gave a wider
  interval than 6), so the ablation stays on the pilot's rows and its data line says how many the design would
  need.

Each unit of the bootstrap is one sequence (one row per batch). The null is the same statistic for ``draws`` random
head sets (:class:`probes.causal.AblationPlan`), measured ten at a time and stopped once enough of them reached the
observed value that p cannot fall below 0.01 (:func:`probes.causal.null.ablation_with_null`: the decision is the one
all ``draws`` would give); the finding's null value is the 99th percentile of the draws measured and its p-value the
sequential Monte Carlo one (:mod:`probes.stats.sequential`). The three findings of a model are one family tested in
the fixed order above (:func:`probes.stats.nulls.fixed_sequence_adjust`): each at the full level while every earlier
one rejected, so 200 draws (p >= 1/201) can pass 0.01 without a Bonferroni factor. Thresholds
(:data:`analyses.pretrained.findings.THRESHOLDS_TEXT`): 0.1 nats per token above the larger of the null's 99th
percentile and the control for the two copying ablations, 0.02 nats for the topic contrast."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from analyses.pretrained.findings import CAUSAL_FINDINGS, finding_from_spec, min_effect_of
from mechprobe.validation import integer
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.attention.topic_attention import TopicAttention
from probes.causal import repeated_half
from probes.causal.ablation import ABLATION_METHODS
from probes.causal.means import check_z_hooks
from probes.causal.measured import measured_ablation
from probes.causal.null import signed_contrast
from probes.causal.slices import SliceFn
from probes.causal.topic_slices import topic_seen_slice, topic_unseen_slice
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, ModelError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.stats.findings import ALPHA, Finding
from probes.stats.nulls import fixed_sequence_adjust
from probes.stats.power import units_for_power


@dataclass(frozen=True)
class CausalConfig:
    """How the causal findings are measured: the ``k`` top heads per finding, ablated by ``method`` beside
    ``draws`` random head sets; ``sequences`` repeated random sequences of ``seq_len`` tokens per copy and
    ``text_rows`` to ``text_rows_max`` rows of the odd text batches (cut to ``text_len`` tokens; how many is set by
    the power a pilot on ``text_rows`` rows gives, :func:`topic_rows_for_power`); ``max_rows`` rows per forward
    pass.

    The defaults keep the report within minutes on 2 CPU cores: every draw costs up to one forward pass of the
    measured sequences (less when the ablated layers are high: the layers below are shared), so 100 draws (the
    fewest whose p-value, ``1 / (draws + 1)`` at best, can fall below 0.01) on a few short sequences. Use
    ``draws=200`` or more where time allows (``--set pretrained.causal.draws=200``; ``mechprobe ablate`` draws
    200 by default)."""

    enabled: bool = True
    k: int = 5
    draws: int = 100
    method: str = "mean"
    seq_len: int = 16
    sequences: int = 6
    text_rows: int = 6
    text_rows_max: int = 24
    text_len: int = 64
    max_rows: int = 256

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigError(f"causal.enabled must be true or false; got {self.enabled!r}.")
        if self.method not in ABLATION_METHODS:
            raise ConfigError(f"causal.method must be one of {', '.join(ABLATION_METHODS)}; got {self.method!r}.")
        for name, low in (("k", 1), ("draws", 100), ("seq_len", 4), ("sequences", 2), ("text_rows", 2),
                          ("text_len", 8), ("max_rows", 1)):
            integer(f"causal.{name}", getattr(self, name), low)
        integer("causal.text_rows_max", self.text_rows_max, self.text_rows)


@dataclass(frozen=True)
class CausalMeasurement:
    """One ablation: ``heads`` (chosen by ``chosen_by`` with ``selection_scores``), the statistic
    ``sum_s signs[s] * change[s]`` over ``slices`` with its 95% bootstrap interval over sequences, the same
    statistic for each of the null's random head sets (``null``), its 99th percentile and the p-value;
    ``clean_loss``/``n_tokens`` per slice."""

    name: str
    heads: tuple[tuple[int, int], ...]
    chosen_by: str
    selection_scores: tuple[float, ...]
    slices: tuple[str, ...]
    signs: tuple[float, ...]
    value: float
    ci: tuple[float, float]
    null: tuple[float, ...]
    null_q99: float
    p_value: float
    clean_loss: tuple[float, ...]
    n_tokens: tuple[int, ...]
    units: int
    method: str
    data: str
    null_stop: str = ""

    def finding(self) -> Finding:
        heads = ", ".join(f"L{layer}H{head}" for layer, head in self.heads)
        spec = finding_from_spec(self.name, self.value, self.ci, self.null_q99, self.p_value)
        return replace(spec, statistic=f"{spec.statistic.replace('mean-ablated', f'{self.method}-ablated')} "
                                       f"({heads})", null_draws=len(self.null), null_stop=self.null_stop,
                       n_units=self.units)


def measure_ablation(model: HookedModel, name: str, heads: Sequence[tuple[int, int]], batches: Sequence[TokenBatch],
                     slices: Mapping[str, SliceFn], signs: Sequence[float], config: CausalConfig, *, chosen_by: str,
                     selection_scores: Sequence[float], n_boot: int, seed: int, data: str) -> CausalMeasurement:
    """Ablate ``heads`` beside up to ``config.draws`` layer-matched random sets on ``batches`` (one sequence each),
    the draws stopped once the decision at the report's level is known (:func:`probes.causal.null.ablation_with_null`),
    and summarise the signed slice contrast (see :class:`CausalMeasurement`)."""
    measured = measured_ablation(model, heads, batches, slices=slices, statistic=signed_contrast(signs),
                                 method=config.method, n_draws=config.draws, seed=seed, n_boot=n_boot,
                                 max_rows=config.max_rows, stop_at=ALPHA)
    if measured.null is None:
        raise ConfigError("The causal findings need random head sets for their null; set causal.draws >= 100.")
    return CausalMeasurement(
        name=name, heads=tuple(measured.plan.heads), chosen_by=chosen_by,
        selection_scores=tuple(float(s) for s in selection_scores), slices=tuple(slices),
        signs=tuple(float(s) for s in signs), value=float(measured.value),
        ci=(float(measured.low), float(measured.high)), null=tuple(float(v) for v in measured.null_draws),
        null_q99=float(measured.null_q99),
        p_value=float(measured.p_value), clean_loss=tuple(float(v) for v in measured.clean_loss),
        n_tokens=tuple(int(n) for n in measured.n_tokens), units=int(measured.sums.count.shape[0]),
        method=config.method, data=data, null_stop=measured.null.why())


def single_rows(batches: Sequence[TokenBatch], n_rows: int, max_len: int,
                richest: SliceFn | None = None) -> list[TokenBatch]:
    """``n_rows`` rows of ``batches``, each its own batch, cut to ``max_len`` positions: the first ones, or with
    ``richest`` the rows where that slice marks the most positions (ties: the earlier row), richest first.
    Choosing rows by a slice of the data (which tokens carry a topic) does not look at any model."""
    rows = []
    for batch in batches:
        for i in range(batch.shape[0]):
            mask = None if batch.attention_mask is None else batch.attention_mask[i : i + 1, :max_len]
            rows.append(TokenBatch(batch.tokens[i : i + 1, :max_len], batch.valid[i : i + 1, :max_len], mask))
    if richest is None:
        return rows[:n_rows]
    counts = [int(richest(row).sum()) for row in rows]
    return [rows[i] for i in sorted(range(len(rows)), key=lambda i: (-counts[i], i))[:n_rows]]


@dataclass(frozen=True)
class RowsForPower:
    """How many rows the topic ablation measures: ``pilot`` rows gave an interval from which ``needed`` rows
    (None: no spread to estimate from) make an 80%-power design at the threshold; :attr:`chosen` is that (at least
    the pilot's) where it is at most ``cap`` (``text_rows_max``, or the rows there are), else the pilot's."""

    pilot: int
    needed: int | None
    cap: int

    @property
    def chosen(self) -> int:
        return self.pilot if self.needed is None or self.needed > self.cap else max(self.pilot, self.needed)

    def describe(self) -> str:
        if self.needed is None:
            return f"{self.chosen} rows (the pilot on {self.pilot} gave no spread to size the design from)"
        beyond = (f"; more than the {self.cap} allowed (causal.text_rows_max or the rows there are), so it stays "
                  f"on the pilot's: underpowered" if self.needed > self.cap else "")
        return (f"{self.chosen} rows (a pilot on {self.pilot} asked for {self.needed} for 80% power at the "
                f"threshold{beyond})")


def topic_rows_for_power(model: HookedModel, heads: Sequence[tuple[int, int]], ranked: Sequence[TokenBatch],
                         slices: Mapping[str, SliceFn], signs: Sequence[float], config: CausalConfig, *,
                         min_effect: float, n_boot: int, seed: int) -> RowsForPower:
    """Ablate ``heads`` alone (no random sets) on the first ``config.text_rows`` of ``ranked`` (the candidate rows,
    richest first) and size the design from the interval's spread (:func:`probes.stats.power.units_for_power`)."""
    pilot = list(ranked[: config.text_rows])
    measured = measured_ablation(model, heads, pilot, slices=slices, statistic=signed_contrast(signs),
                                 method=config.method, seed=seed, n_boot=n_boot, max_rows=config.max_rows)
    needed = units_for_power((float(measured.low), float(measured.high)), len(pilot), min_effect)
    return RowsForPower(len(pilot), needed, min(config.text_rows_max, len(ranked)))


def causal_unavailable(model: HookedModel, info: ModelInfo, config: CausalConfig) -> str:
    """Why the causal findings are not measured on ``model`` (``""`` when they are)."""
    if not config.enabled:
        return "not measured: causal.enabled is false"
    if not info.causal:
        return "not measured: the report's ablations read next-token loss, and this model is an encoder"
    try:
        check_z_hooks(model, range(info.n_layers))
    except ModelError as error:
        return f"not measured: {error}"
    return ""


def topic_gap_top_heads(topic: TopicAttention, k: int) -> list[tuple[int, int, float]]:
    """The ``k`` heads with the largest same- minus different-topic mean attention as ``(layer, head, gap)``
    (the gap, not the ratio, as :func:`~analyses.pretrained.held_out.held_out_topic` chooses its head)."""
    gap = torch.nan_to_num(topic.mean["same_topic"] - topic.mean["different_topic"], nan=float("-inf"))
    values, flat = gap.flatten().topk(min(k, gap.numel()))
    n_heads = gap.shape[1]
    return [(int(i) // n_heads, int(i) % n_heads, float(v)) for v, i in zip(values, flat)]


def finding_slices(name: str, config: CausalConfig, labels: Tensor) -> tuple[dict[str, SliceFn], tuple[float, ...]]:
    """The slices the causal finding ``name`` measures its loss change on, and the signs of its contrast: the
    repeated half of the protocol rows for the two copying ablations, topic-seen minus topic-unseen tokens for the
    topic one."""
    if name == "topic_heads_causal":
        return {"topic_seen": topic_seen_slice(labels), "topic_unseen": topic_unseen_slice(labels)}, (1.0, -1.0)
    return {"repeated_half": repeated_half(config.seq_len)}, (1.0,)


def causal_protocol(info: ModelInfo, config: CausalConfig, seed: int) -> list[TokenBatch]:
    """``config.sequences`` rows of [BOS] X X (|X| = ``config.seq_len``), one per batch, drawn from ``seed`` + 1
    (apart from the protocol batches the heads are chosen on)."""
    generator = torch.Generator().manual_seed(seed + 1)
    return [repeated_random_tokens(info, seq_len=config.seq_len, n_sequences=1, generator=generator)
            for _ in range(config.sequences)]


def measure_causal(model: HookedModel, *, induction: Sequence[tuple[int, int, float]],
                   previous_token: Sequence[tuple[int, int, float]], topic: Sequence[tuple[int, int, float]],
                   text_batches: Sequence[TokenBatch], labels: Tensor, config: CausalConfig, n_boot: int, seed: int
                   ) -> dict[str, CausalMeasurement]:
    """The three ablations of the module docstring; ``induction``/``previous_token``/``topic`` are the chosen
    ``(layer, head, score)`` top heads (chosen on other batches), ``text_batches`` the odd text batches."""
    info = ModelInfo.of(model)
    protocol = causal_protocol(info, config, seed)
    ranked = single_rows(text_batches, config.text_rows_max, config.text_len, richest=topic_seen_slice(labels))
    protocol_data = f"{config.sequences} repeated random sequences (seq_len={config.seq_len}, seed={seed + 1})"
    chosen = {"induction_heads_causal": (induction, "induction score on the even protocol batches"),
              "previous_token_causal": (previous_token, "previous-token score on the even text batches"),
              "topic_heads_causal": (topic, "same- minus different-topic attention on the even text batches")}
    out = {}
    for name in CAUSAL_FINDINGS:
        top, chosen_by = chosen[name]
        heads, scores = [(layer, h) for layer, h, _ in top], [s for _, _, s in top]
        slices, signs = finding_slices(name, config, labels)
        if name == "topic_heads_causal":
            rows = topic_rows_for_power(model, heads, ranked, slices, signs, config,
                                        min_effect=min_effect_of(name),
                                        n_boot=n_boot, seed=seed)
            batches = ranked[: rows.chosen]
            data = (f"the {rows.describe()} of the odd text batches with the most tokens whose topic already "
                    f"appeared (first {config.text_len} tokens of each)")
        else:
            batches, data = protocol, protocol_data
        out[name] = measure_ablation(model, name, heads, batches, slices, signs, config, chosen_by=chosen_by,
                                     selection_scores=scores, n_boot=n_boot, seed=seed, data=data)
    return out


def causal_family(measured: Mapping[str, CausalMeasurement], control: Mapping[str, CausalMeasurement] | None
                  ) -> tuple[dict[str, Finding], dict[str, Finding]]:
    """``(findings, control_findings)`` of the causal family: each finding beside the control's value, p-values
    adjusted by the fixed-sequence procedure in :data:`CAUSAL_FINDINGS` order."""
    def family(findings: dict[str, Finding]) -> dict[str, Finding]:
        names = [n for n in CAUSAL_FINDINGS if n in findings]
        adjusted = fixed_sequence_adjust([findings[n].p_value for n in names])
        return {n: replace(findings[n], p_adjusted=p) for n, p in zip(names, adjusted)}

    control_findings = family({n: m.finding() for n, m in control.items()}) if control else {}
    own = {n: m.finding() for n, m in measured.items()}
    if control_findings:
        own = {n: f.with_control(control_findings[n].value, control_findings[n].ci) if n in control_findings else f
               for n, f in own.items()}
    return family(own), control_findings
