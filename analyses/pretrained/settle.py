"""Settle a pretrained model's inconclusive findings: rounds of fresh text, decided on confidence sequences.

After the first pass (:func:`analyses.pretrained.measure.probe_pretrained`) a finding it left *inconclusive* is
monitored: rounds of units it has not seen (text batches after the first pass's, or new ``[BOS] X X`` batches) are
measured with only the probes the open findings need, and after every round each open finding's value, bootstrap
interval and confidence sequence are computed on all the fresh units so far. It stops when the sequence settles it
(:func:`analyses.pretrained.settled.sequence_verdict`); the whole stops when every monitored finding is settled or
a budget is spent (:class:`~analyses.pretrained.settled.SettleConfig`).

The first pass is the pilot and decides nothing here: its best heads (chosen on its even batches), its null and
control values (so the threshold is fixed before any round) and the size of the rounds
(:func:`probes.stats.power.units_for_power` times :func:`~analyses.pretrained.settled.sequence_cost`) come from
it, and where each sequence is tightest is set from it too, which is allowed because the sequence runs on text the
pilot never read. A finding the first pass decided keeps its fixed-sample verdict (one planned look), so its error
rate is that look's; a monitored finding's is at most the sequence's ``alpha`` whatever the number of rounds.

The co-occurrence ordering's units are ranked query tokens, not batches: each round spends query tokens no pass
has used on the round's text (:mod:`analyses.pretrained.settle_ordering`), and its round size, wanted in query
tokens, is turned into text batches by the batches per ranked query token measured so far (the first pass's before
any round). It shares the text batches (one forward pass) with the topic findings open in the same round.

The head ablations' units are sequences: fresh ``[BOS] X X`` rows for the two copying ablations, fresh rows of text
for the topic one, on which each round measures the first pass's heads alone against the first pass's null and
control (:mod:`analyses.pretrained.settle_ablation`); the topic ablation's rows are rows of the same fresh batches
the text findings read (each reads every batch once), so the corpus is read once and neither starves the other.

Not monitored (it says why in ``stop``): the embedding gap (its units are the vocabulary's labelled tokens, which
more text does not add).
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from analyses.pretrained.held_out import TOPIC_UNIT_KEYS, topic_ratio
from analyses.pretrained.measure import PretrainedConfig, PretrainedRun
from analyses.pretrained.settle_ablation import (
    ABLATION_UNIT_KEYS,
    AblationSpec,
    SharedText,
    ablation_statistic,
    ablation_units,
    fresh_causal_protocol,
    richest_rows,
)
from analyses.pretrained.settle_ordering import (
    ORDERING_UNIT_KEYS,
    OrderingSetup,
    ordering_mean,
    ordering_probe,
    ordering_units,
    round_tokens,
)
from analyses.pretrained.settled import (
    CORPUS_SPENT,
    SequenceLook,
    SettleConfig,
    SettledFinding,
    sequence_cost,
    sequence_verdict,
)
from probes import HeadScoreProbe, ModelInfo, TokenBatch, feed_probes
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.attention.topic_attention import TopicAttentionProbe
from probes.core.errors import InputError
from probes.core.model_kind import HookedModel
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_interval
from probes.stats.confidence_sequence import sequence_from_interval
from probes.stats.findings import Finding, threshold_distance
from probes.stats.power import units_for_power
from probes.text.text_batches import text_token_batches

log = logging.getLogger(__name__)

TEXT, PROTOCOL, CAUSAL_PROTOCOL, TEXT_ROWS = "text", "protocol", "causal protocol", "text rows"
MONITORED = {  # finding: (source of its units, the units' name, the kind of probe or measurement it reads)
    "induction_protocol": (PROTOCOL, "[BOS] X X batches", "induction"),
    "induction_text": (TEXT, "text batches", "induction"),
    "previous_token_text": (TEXT, "text batches", "previous_token"),
    "topic_attention_mean": (TEXT, "text batches", "topic"),
    "topic_attention_best_head": (TEXT, "text batches", "topic"),
    "cooccurrence_ordering": (TEXT, "ranked query tokens", "ordering"),
    "induction_heads_causal": (CAUSAL_PROTOCOL, "[BOS] X X sequences", "ablation"),
    "previous_token_causal": (CAUSAL_PROTOCOL, "[BOS] X X sequences", "ablation"),
    "topic_heads_causal": (TEXT_ROWS, "rows of text", "ablation"),
}
NOT_MONITORED = {
    "embedding_topic_similarity": "not monitored: its units are the vocabulary's topic-labelled tokens, which more "
                                  "text does not add",
}


def _statistic(kind: str, head: tuple[int, int] | None) -> Callable[[Mapping[str, Tensor]], Tensor]:
    """The finding's statistic on summed unit state with a leading draw axis."""
    if kind == "ordering":
        return ordering_mean
    if kind == "topic":
        if head is None:
            return lambda s: topic_ratio(s).flatten(1).nanmean(1)
        return lambda s: topic_ratio(s)[:, head[0], head[1]]
    if head is None:
        raise InputError(f"The {kind} finding has no chosen head to settle.")
    return lambda s: s[f"{kind}/mass"][:, head[0], head[1]] / s[f"{kind}/rows_with_target"]


def _unit_keys(kind: str) -> tuple[str, ...]:
    if kind == "ordering":
        return ORDERING_UNIT_KEYS
    if kind == "ablation":
        return ABLATION_UNIT_KEYS
    return TOPIC_UNIT_KEYS if kind == "topic" else (f"{kind}/mass", f"{kind}/rows_with_target")


@dataclass
class _Open:
    """A monitored finding during the rounds: its pilot, its units so far and its looks."""

    name: str
    first: Finding
    head: tuple[int, int] | None
    tuned_at: int
    units: list[dict[str, Tensor]] = field(default_factory=list)
    looks: list[SequenceLook] = field(default_factory=list)
    rounds: int = 0
    tokens: int = 0
    batches: int = 0
    batches_per_unit: float = 1.0  # the ordering's: text batches per ranked query token (batch units: 1)
    used: set[int] = field(default_factory=set)  # the ordering's query tokens spent so far
    stopped: str = ""  # why it stopped before settling, where it did for a reason of its own
    ablation: AblationSpec | None = None  # a causal finding's heads, slices and signs
    verdict: str = "inconclusive"
    ci: tuple[float, float] = (float("nan"), float("nan"))

    @property
    def open(self) -> bool:
        return self.verdict == "inconclusive" and not self.stopped

    @property
    def source(self) -> str:
        return MONITORED[self.name][0]

    @property
    def kind(self) -> str:
        return MONITORED[self.name][2]

    @property
    def n(self) -> int:
        return sum(int(next(iter(u.values())).shape[0]) for u in self.units)

    def target(self, cost: float) -> int | None:
        """Units the sequence needs for 80% power at the threshold, from the last look (the pilot before any)."""
        ci, n = (self.ci, self.n) if self.looks else (self.first.ci, self.first.n_units)
        needed = units_for_power(ci, n, threshold_distance(self.first.reference, self.first.min_effect,
                                                           self.first.effect))
        return None if needed is None else math.ceil(cost * needed)

    def wanted_batches(self, cost: float, min_units: int) -> int:
        """Batches of the source the next round should read for this finding: its power's units (at least the
        ``min_units`` a sequence is read from) less those it has, in batches."""
        units = max((self.target(cost) or 0) - self.n, min_units - self.n, 0)
        return math.ceil(units * self.batches_per_unit)

    def add_round(self, units: dict[str, Tensor], batches: int, tokens: int) -> None:
        self.units.append(units)
        self.rounds += 1
        self.batches += batches
        self.tokens += tokens
        if self.kind == "ordering" and self.n:  # the yield measured so far replaces the first pass's
            self.batches_per_unit = self.batches / self.n

    def look(self, config: SettleConfig, n_boot: int, seed: int) -> None:
        units = {k: torch.cat([u[k] for u in self.units]) for k in self.units[0]}
        n = self.n
        if n < 2:
            return
        statistic = _statistic(self.kind, self.head) if self.ablation is None else ablation_statistic(
            self.ablation.signs)
        value, low, high = bootstrap_interval(units, statistic, n_boot=n_boot, seed=seed)
        self.ci = (float(low), float(high))
        seq_low, seq_high = sequence_from_interval(float(value), self.ci, n, tuned_at=self.tuned_at, alpha=config.alpha)
        self.looks.append(SequenceLook(n, float(value), seq_low, seq_high))
        if n >= config.min_units:
            self.verdict = sequence_verdict(seq_low, seq_high, self.first.threshold, self.first.null_value,
                                            self.first.control_value)


def _measure(model: HookedModel, batches: Sequence[TokenBatch], kinds: set[str], labels: Tensor | None, *,
             ordering: _Open | None = None, setup: OrderingSetup | None = None, seed: int,
             progress: bool) -> dict[str, Tensor]:
    """Per-batch state of the probes that ``kinds`` need (head-score kinds and ``topic``), one pass; with
    ``ordering`` (the open ordering finding) its probe rides the same pass and its units (per query token) are
    returned too, its query tokens added to ``ordering.used``."""
    head_kinds = tuple(sorted(kinds - {"topic", "ordering"}))
    probes_list: list[Any] = [HeadScoreProbe(head_kinds)] if head_kinds else []
    if labels is None:
        if kinds & {"topic", "ordering"}:
            raise InputError("Settling a topic or ordering finding needs the token topic labels (labels=...).")
    elif "topic" in kinds:
        probes_list.append(TopicAttentionProbe(labels))
    recorded = len(probes_list)
    layer_head = None
    if ordering is not None and labels is not None:
        setup = setup or OrderingSetup()
        layer_head = ordering.head
        if layer_head is None:
            raise InputError("The co-occurrence ordering finding has no chosen head to settle.")
        wanted = max(math.ceil(len(batches) / ordering.batches_per_unit), setup.n_keys)
        queries, keys = round_tokens(batches, labels, ordering.used, wanted, setup.n_keys)
        ordering.used.update(queries)
        if queries:
            probes_list.append(ordering_probe(queries, keys, layer_head[0]))
    keep = {key for kind in kinds for key in _unit_keys(kind)}
    recorder = BatchStateRecorder(keys=lambda key: key in keep)
    if probes_list:  # none where the ordering alone is open and the text held no fresh query token
        feed_probes(model, probes_list, batches, data="settling rounds", seed=seed, progress=progress,
                    on_batch=(lambda i, ps: recorder(i, ps[:recorded])) if recorded else None)
    per_unit: dict[str, Tensor] = {}
    for j in range(recorded):
        per_unit.update(recorder.per_unit(j))
    if layer_head is not None:
        per_unit.update(ordering_units(probes_list[recorded].compute(), layer_head[1]) if len(probes_list) > recorded
                        else {key: torch.zeros(0, dtype=torch.float64) for key in ORDERING_UNIT_KEYS})
    return per_unit


def settle_findings(model: HookedModel, first: Mapping[str, Finding], heads: Mapping[str, tuple[int, int] | None],
                    supplies: Mapping[str, Iterator[TokenBatch]], tokens_per_unit: Mapping[str, float],
                    config: SettleConfig, *, labels: Tensor | None = None, monitor: Sequence[str] | None = None,
                    ordering: OrderingSetup | None = None, ablations: Mapping[str, AblationSpec] | None = None,
                    n_boot: int = 1000, seed: int = 0,
                    progress: bool = False, clock: Callable[[], float] = time.perf_counter
                    ) -> dict[str, SettledFinding]:
    """Rounds of fresh units from ``supplies`` (``"text"``, ``"protocol"``: iterators of batches no earlier pass
    read) for the findings in ``monitor`` (default: the monitored ones ``first`` left inconclusive), each decided on
    its confidence sequence (module docstring); one :class:`SettledFinding` per finding of ``first``.
    ``heads[name]``: the head the first pass chose for it (None for a statistic over all heads);
    ``tokens_per_unit``: the pilot's tokens per batch of each supply (what the budget in tokens buys);
    ``ordering``: the first pass's query tokens and yield, for the co-occurrence ordering's rounds;
    ``ablations``: each causal finding's heads and slices as the first pass measured it (a causal finding without
    one is not monitored).

    Example: ``settle_findings(model, run.findings, heads, {"protocol": batches}, {"protocol": 404},
    SettleConfig(enabled=True), monitor=["induction_protocol"])``.
    """
    names = [n for n in first if n in MONITORED and first[n].verdict == "inconclusive"] if monitor is None else monitor
    unknown = [n for n in names if n not in MONITORED or n not in first]
    if unknown:
        raise InputError(f"Cannot settle {unknown}: only {', '.join(MONITORED)} are monitored, and each needs its "
                         f"first-pass finding.")
    cost = sequence_cost(config.alpha)
    opened: list[_Open] = []
    for name in names:
        if MONITORED[name][0] not in supplies:
            continue
        spec = (ablations or {}).get(name)
        if MONITORED[name][2] == "ablation" and spec is None:
            continue
        pilot = _Open(name, first[name], heads.get(name), config.min_units, ablation=spec)
        if pilot.kind == "ordering":
            ordering = ordering or OrderingSetup()
            pilot.batches_per_unit, pilot.used = ordering.batches_per_unit, set(ordering.used_queries)
        planned = pilot.target(cost) or config.min_units
        tokens_each = tokens_per_unit[pilot.source] * pilot.batches_per_unit
        cap = max(config.min_units, int(config.max_tokens // max(tokens_each, 1.0)))
        pilot.tuned_at = min(max(planned, config.min_units), cap)
        opened.append(pilot)
    start, tokens_used, rounds, why = clock(), 0, 0, "every monitored finding settled"
    seconds_per_unit: dict[str, float] = {}
    while any(o.open for o in opened):
        if rounds >= config.max_rounds:
            why = f"stopped after {config.max_rounds} rounds (settle.max_rounds)"
            break
        rounds += 1
        progressed = False
        for source in sorted({o.source for o in opened if o.open}):
            open_here = [o for o in opened if o.source == source and o.open]
            wanted = max(o.wanted_batches(cost, config.min_units) for o in open_here)
            size = min(max(wanted, 1), config.max_round_units, max(max(o.batches for o in open_here), config.min_units))
            by_tokens = int((config.max_tokens - tokens_used) // max(tokens_per_unit[source], 1.0))
            left = config.budget_minutes * 60 - (clock() - start)
            by_time = int(left // max(seconds_per_unit[source], 1e-9)) if source in seconds_per_unit else size
            if min(size, by_tokens, by_time) < 1:
                why = (f"the --max-tokens budget ({config.max_tokens:,} tokens) is spent" if by_tokens < 1 else
                       f"the --budget-minutes budget ({config.budget_minutes:g} min) is spent")
                continue
            size = min(size, by_tokens, by_time)
            batches = list(itertools.islice(supplies[source], size))
            if not batches:
                why = f"the {source} ran out: {CORPUS_SPENT}"
                continue
            began = clock()
            order = next((o for o in open_here if o.kind == "ordering"), None)
            spent = None if order is None else len(order.used)
            if all(o.ablation is not None for o in open_here):  # each ablation its own heads, on the same rows
                measured = {o.name: ablation_units(model, o.ablation, batches, seed=seed) for o in open_here
                            if o.ablation is not None}
            else:
                per_unit = _measure(model, batches, {o.kind for o in open_here}, labels, ordering=order,
                                    setup=ordering, seed=seed, progress=progress)
                measured = {o.name: {k: per_unit[k] for k in _unit_keys(o.kind)} for o in open_here}
            seconds_per_unit[source] = (clock() - began) / len(batches)
            tokens = sum(int(b.valid.sum()) for b in batches)
            tokens_used += tokens
            for o in open_here:
                o.add_round(measured[o.name], len(batches), tokens)
                o.look(config, n_boot, seed)
            if order is not None and len(order.used) == spent and order.open:
                order.stopped = ("the text ran out of query tokens: every topic-labelled token of the fresh text "
                                 "was already a query")
            progressed = True
            log.info("settling round %d (%s): %d units, %s", rounds, source, len(batches),
                     ", ".join(f"{o.name} {o.verdict}" for o in open_here))
        if not progressed:
            break
    by_name = {o.name: o for o in opened}
    return {name: _settled(name, finding, by_name.get(name), why, cost, config.min_units, tokens_per_unit)
            for name, finding in first.items()}


def _settled(name: str, finding: Finding, monitored: _Open | None, why: str, cost: float, min_units: int,
             tokens_per_unit: Mapping[str, float]) -> SettledFinding:
    if monitored is None:
        reason = ("decided at the first pass (fixed-sample verdict kept)" if finding.verdict != "inconclusive"
                  else NOT_MONITORED.get(name, "not monitored: no fresh units of its kind were given"))
        return SettledFinding(name, MONITORED.get(name, ("", "units", ""))[1], finding.verdict, finding.verdict,
                              finding.threshold, 0, 0, 0, reason)
    unit = MONITORED[name][1]
    settled = monitored.verdict != "inconclusive"
    # the units its power asks for, and at least the units from which a sequence is read
    needed = max(monitored.target(cost) or 0, min_units)
    more = None if settled or needed <= monitored.n else needed - monitored.n
    per_unit = (monitored.tokens / monitored.n if monitored.n
                else tokens_per_unit[monitored.source] * monitored.batches_per_unit)
    stop = (f"settled after {monitored.n} {unit}" if settled else monitored.stopped or why)
    return SettledFinding(name, unit, monitored.verdict, finding.verdict, finding.threshold, monitored.n,
                          monitored.rounds, monitored.tokens, stop, more,
                          None if more is None else math.ceil(more * per_unit), monitored.tuned_at,
                          tuple(monitored.looks))


def _fresh_protocol(info: ModelInfo, config: PretrainedConfig) -> Iterator[TokenBatch]:
    """``[BOS] X X`` batches after the first pass's (:func:`analyses.pretrained.measure.protocol_batches`): the same
    generator, drawn on past the batches it used."""
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(config.protocol_batches):
        repeated_random_tokens(info, seq_len=config.protocol_seq_len, n_sequences=config.protocol_batch_size,
                               generator=generator)
    while True:
        yield repeated_random_tokens(info, seq_len=config.protocol_seq_len, n_sequences=config.protocol_batch_size,
                                     generator=generator)


def fresh_text(documents: Sequence[Any], more_documents: Iterable[Any], tokenizer: Any, info: ModelInfo,
               pretrained: PretrainedConfig) -> Iterator[TokenBatch]:
    """The text batches no pass has read: ``documents``' batches after the first pass's ``max_batches`` (the same
    documents, batched as it batched them), then ``more_documents``' (windows never mix documents, so the chain
    changes no batch of the first corpus)."""
    text = text_token_batches(itertools.chain(documents, more_documents), tokenizer, info, seq_len=pretrained.seq_len,
                              batch_size=pretrained.batch_size)
    return itertools.islice(text, pretrained.max_batches, None)


def settle_run(model: HookedModel, run: PretrainedRun, documents: Sequence[Any], config: SettleConfig, *,
               more_documents: Iterable[Any] = (), monitor: Sequence[str] | None = None,
               progress: bool = False) -> dict[str, SettledFinding]:
    """Settle ``run``'s findings on ``model`` (the model it measured): text batches after the first pass's
    ``max_batches`` of ``documents`` (the same documents, in the same order), then of ``more_documents`` (later
    corpora, read lazily and once), ``[BOS] X X`` batches after its protocol batches, and for the head ablations
    ``[BOS] X X`` rows after their first pass's and rows of that same text (:func:`settle_findings`).

    Example: ``run.settled = settle_run(model, run, documents, SettleConfig(enabled=True, budget_minutes=5))``.
    """
    if run.config is None:
        raise InputError("The run records no PretrainedConfig (probe it with probe_pretrained), so the text it read "
                         "is unknown; settling needs it to read only fresh text.")
    pretrained = run.config
    info = ModelInfo.of(model)
    supplies: dict[str, Iterator[TokenBatch]] = {PROTOCOL: _fresh_protocol(info, pretrained)}
    tokens_per_unit = {PROTOCOL: float(pretrained.protocol_batch_size * (2 * pretrained.protocol_seq_len + 1))}
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is not None:
        text = SharedText(fresh_text(documents, more_documents, tokenizer, info, pretrained))
        supplies[TEXT] = text.reader()
        tokens_per_unit[TEXT] = run.n_tokens / pretrained.max_batches
    heads = {name: held.head for name, held in run.measured.held_out.items()}
    causal = pretrained.causal
    ablations = {name: AblationSpec.of(name, measured.heads, causal, run.token_map.labels)
                 for name, measured in run.measured.causal.items()}
    if ablations:
        supplies[CAUSAL_PROTOCOL] = fresh_causal_protocol(info, causal, pretrained.seed)
        tokens_per_unit[CAUSAL_PROTOCOL] = float(2 * causal.seq_len + 1)
        topic = run.measured.causal.get("topic_heads_causal")
        if TEXT in supplies and topic is not None:  # rows of the same fresh batches: the corpus is read once
            odd_rows = max(1, (pretrained.max_batches // 2) * pretrained.batch_size)
            supplies[TEXT_ROWS] = richest_rows(text.reader(), run.token_map.labels, causal,
                                               keep=min(1.0, topic.units / odd_rows))
            tokens_per_unit[TEXT_ROWS] = float(causal.text_len)
    ordered = run.findings.get("cooccurrence_ordering")
    ordering = OrderingSetup(  # the first pass measured its query tokens on its odd batches
        tuple(int(t) for t in run.measured.ordering.query_tokens), pretrained.n_pair_tokens,
        (pretrained.max_batches // 2) / max(1, (ordered.n_units if ordered is not None else None) or 1))
    log.info("settling %s after the first pass's %d protocol and %d text batches", run.model,
             pretrained.protocol_batches, pretrained.max_batches)
    return settle_findings(model, run.findings, heads, supplies, tokens_per_unit, config,
                           labels=run.token_map.labels, monitor=monitor, ordering=ordering, ablations=ablations,
                           n_boot=pretrained.n_boot, seed=pretrained.seed, progress=progress)
