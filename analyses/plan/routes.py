"""The routes the ledger meters: the project's own code on ``meta`` weights, taking the kernels it takes on CUDA.

Each route runs one pass over one batch of ``batch x n_pos`` token ids (real CPU tensors) under
:func:`probes.core.attention_rows.kernels_for` ``("cuda")`` (the attention reductions pick flash / memory-efficient
kernels), :func:`analyses.plan.cuda_sdpa.cuda_sdpa` (plain SDPA picks them too), :class:`~analyses.plan.twins.CpuTwins`
(data read on the CPU) and the :class:`~analyses.plan.meter.Meter` with a FLOP counter:

- ``bare``: the Hugging Face body (no LM head) with SDPA attention under ``torch.inference_mode``;
- ``bridge``: the TransformerBridge's forward (eager attention, logits);
- ``suite``: ``probes.run_probes`` with HeadScoreProbe, GeneralizedInductionProbe(3) and TopicAttentionProbe
  (10 topics), the default ``max_pattern_bytes``, after ``assume_reductions_match`` (the once-per-model check
  compares values, which ``meta`` has not);
- ``null``: mean ablation of 5 heads with the 200-draw random-head-set null as ``benchmarks/ablation_null_cost.py``
  runs it (``head_output_means`` then ``ablation_sums``, public API) on ``[BOS] X X``;
- ``edge``: the report's circuit edge (:mod:`analyses.pretrained.circuit_edge`): a sender's output mean-replaced in
  a receiver's keys (:func:`edge_heads`) beside 100 random edges measured on the receiver's score alone
  (``null_loss=False``), all drawn (an edge that holds needs them all), on ``[BOS] X X`` (``head_output_means`` then
  ``edge_sums``, public API);
- ``report-model``: the report's probes on one text batch: the suite above plus the topic probe's label
  permutation null (``n_permutations=100``); the report's ablations are the ``null`` route;
- ``suite-patterns``: the suite on ``hook_pattern`` (``max_pattern_bytes=None``): what it falls back to when the
  once-per-model check (:func:`probes.core.reductions_check.reductions_match_hook_pattern`) fails.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from analyses.plan.cuda_sdpa import cuda_sdpa
from analyses.plan.meter import Allocation, Meter, flop_counter
from analyses.plan.shapes import MetaModels
from analyses.plan.twins import CpuTwins

ROUTES = ("bare", "bridge", "suite", "null", "edge", "report-model", "suite-patterns")
N_TOPICS = 10
NULL_DRAWS = 200
NULL_HEADS = 5
EDGE_DRAWS = 100


@dataclass(frozen=True)
class LayerLedger:
    """One layer's calls: device operator calls, attention kernel calls by kind, and the route its attention took."""

    device_calls: int
    attention: dict[str, int]

    @property
    def route(self) -> str:
        """``flash``, ``efficient``, ``blocked eager``, ``eager pattern`` (several joined by ``+``), or ``none``."""
        return "+".join(sorted(self.attention)) or "none"


@dataclass(frozen=True)
class RouteLedger:
    """What one route cost on one shape and length (see :class:`~analyses.plan.meter.Meter` for each number)."""

    route: str
    model: str
    n_pos: int
    batch: int
    weight_bytes: int
    peak_bytes: int
    flops: int
    device_calls: int
    host_calls: int
    kernels: dict[tuple[int, int], int]
    layers: tuple[LayerLedger, ...]
    outside_calls: int
    largest: tuple[Allocation, ...]
    peak_live: tuple[Allocation, ...]
    assumed_reads: dict[str, int] = field(default_factory=dict)
    note: str = ""

    @property
    def calls_per_layer(self) -> float:
        return sum(layer.device_calls for layer in self.layers) / max(1, len(self.layers))

    def quadratic(self) -> list[Allocation]:
        """Allocations with two axes of at least ``n_pos`` (a whole ``[T, T]`` grid) among the largest kept."""
        return [a for a in self.largest if sum(size >= self.n_pos for size in a.shape) >= 2]


def draw_tokens(models: MetaModels, n_pos: int, batch: int, seed: int = 0) -> torch.Tensor:
    """``[batch n_pos]`` random token ids on the CPU, below the tokenizer's vocabulary and above the special ids."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(3, models.draw_vocab(), (batch, n_pos), generator=generator)


def _bare(models: MetaModels, tokens: torch.Tensor) -> None:
    with torch.inference_mode():
        models.bare(input_ids=tokens.to("meta"))


def _bridge(models: MetaModels, tokens: torch.Tensor) -> None:
    from mechprobe import forward

    with torch.inference_mode():
        forward.run(models.bridge, tokens)


def _topic_labels(models: MetaModels) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    labels = torch.randint(0, N_TOPICS, (int(models.config.vocab_size),), generator=generator)
    labels[:3] = -1
    return labels


def _suite(models: MetaModels, tokens: torch.Tensor, n_permutations: int = 0, patterns: bool = False) -> None:
    import probes
    from probes.core.runner import MAX_PATTERN_BYTES, assume_reductions_match

    assume_reductions_match(models.bridge)
    suite = [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3),
             probes.TopicAttentionProbe(_topic_labels(models), n_permutations=n_permutations)]
    probes.run_probes(models.bridge, suite, [tokens], progress=False,
                      max_pattern_bytes=None if patterns else MAX_PATTERN_BYTES)


def _report_model(models: MetaModels, tokens: torch.Tensor) -> None:
    _suite(models, tokens, n_permutations=100)


def null_heads(n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """The measured heads of the ``null`` route: ``NULL_HEADS`` distinct heads spread over the upper half of the
    layers (where induction heads sit), as the top induction heads of a trained model would be; at most
    ``n_heads - 1`` in a layer (a small model's upper half may hold fewer), so that the random head sets matched
    layer by layer are not the measured heads again."""
    heads: list[tuple[int, int]] = []
    upper = n_layers - n_layers // 2
    count = min(NULL_HEADS, upper * (n_heads - 1))
    for i in range(count):
        layer = n_layers // 2 + (i * upper) // count
        head = (3 * i) % n_heads
        while (layer, head) in heads:
            head = (head + 1) % n_heads
        heads.append((layer, head))
    return heads


def null_length(n_pos: int) -> int:
    """Tokens of the null route's ``[BOS] X X`` rows at a length of about ``n_pos``."""
    return 2 * ((n_pos - 1) // 2) + 1


def null_plan(info: Any, n_draws: int = NULL_DRAWS) -> Any:
    """The ``null`` route's :class:`~probes.causal.AblationPlan` (its heads: :func:`null_heads`)."""
    from probes.causal import AblationPlan

    return AblationPlan.build(info, null_heads(info.n_layers, info.n_heads), method="mean", n_draws=n_draws, seed=0)


def _null(models: MetaModels, tokens: torch.Tensor, n_draws: int = NULL_DRAWS) -> None:
    import probes
    from probes.causal import ablation_sums, head_output_means, repeated_half

    info = probes.ModelInfo.of(models.bridge)
    seq_len = (tokens.shape[1] - 1) // 2
    batch = probes.repeated_random_tokens(info, seq_len=seq_len, n_sequences=tokens.shape[0],
                                          generator=torch.Generator().manual_seed(0))
    plan = null_plan(info, n_draws)
    means = head_output_means(models.bridge, plan.layers, [batch])
    ablation_sums(models.bridge, plan, [batch], {"repeated_half": repeated_half(seq_len)}, means=means)


def edge_heads(n_layers: int, n_heads: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The ``edge`` route's sender and receiver: at the depths of the edge the report finds on SmolLM2-135M
    (L16H0 -> L18H6 of 30 layers), two layers apart where the model has them."""
    receiver = min(n_layers - 1, max(1, round(n_layers * 18 / 30)))
    sender = max(0, min(receiver - 1, round(n_layers * 16 / 30)))
    return (sender, 0), (receiver, min(6, n_heads - 1))


def edge_plan(info: Any) -> Any:
    """The ``edge`` route's :class:`~probes.causal.EdgePlan` (its heads: :func:`edge_heads`)."""
    from probes.causal import EdgePlan

    sender, receiver = edge_heads(info.n_layers, info.n_heads)
    return EdgePlan.build(info, sender, receiver, input="k", method="mean", n_draws=EDGE_DRAWS, seed=0,
                          null_loss=False)


NO_NULL = {"null": "no random head set matched layer by layer differs from the ablated heads, so the null would "
                   "equal the ablation",
           "edge": "no edge from one layer to a later one shares no head with the measured edge, so its null has "
                   "nothing to draw"}
"""Why a route's plan is refused at a shape (one head per layer; one layer, or too few for an edge's null)."""


def why_not(route: str, info: Any) -> str | None:
    """Why ``route`` cannot run at the shape ``info`` describes (its heads' plan is refused), or None. Builds the
    plan only: no forward pass."""
    from probes.core.errors import MechprobeError

    plans: dict[str, Callable[[Any], Any]] = {"null": null_plan, "edge": edge_plan}
    try:
        if route in plans:
            plans[route](info)
    except MechprobeError:
        return f"{info.n_layers} layer(s) of {info.n_heads} head(s): {NO_NULL[route]}"
    return None


def _edge(models: MetaModels, tokens: torch.Tensor) -> None:
    import probes
    from probes.causal import edge_sums, head_output_means, repeated_half

    info = probes.ModelInfo.of(models.bridge)
    seq_len = (tokens.shape[1] - 1) // 2
    batch = probes.repeated_random_tokens(info, seq_len=seq_len, n_sequences=tokens.shape[0],
                                          generator=torch.Generator().manual_seed(0))
    plan = edge_plan(info)
    means = head_output_means(models.bridge, plan.sender_layers, [batch])
    edge_sums(models.bridge, plan, [batch], repeated_half(seq_len), means=means)


RUNNERS: dict[str, Callable[[MetaModels, torch.Tensor], None]] = {
    "bare": _bare, "bridge": _bridge, "suite": _suite, "null": _null, "edge": _edge, "report-model": _report_model,
    "suite-patterns": lambda models, tokens: _suite(models, tokens, patterns=True)}


@contextlib.contextmanager
def cuda_route(meter: Meter, layers: Any, *, check_flops: bool = False) -> Iterator[tuple[Any, CpuTwins]]:
    """The modes of a metered pass that takes CUDA's kernels on ``meta``: yields (torch's FLOP counter when
    ``check_flops``, else None; the twins)."""
    from probes.core.attention_rows import kernels_for

    twins = CpuTwins()
    flops = flop_counter() if check_flops else contextlib.nullcontext()
    with kernels_for("cuda"), cuda_sdpa(), twins, flops, meter, meter.attribute_layers(layers):
        yield (flops if check_flops else None), twins


def run_route(models: MetaModels, route: str, n_pos: int, *, batch: int = 1,
              runner: Callable[[MetaModels, torch.Tensor], None] | None = None) -> RouteLedger:
    """Meter ``route`` on ``models`` at ``batch x n_pos`` tokens (``runner`` replaces the route's own code)."""
    tokens = draw_tokens(models, n_pos, batch)
    meter = Meter(n_pos=null_length(n_pos) if route in ("null", "edge") else n_pos)
    layers = models.bare.layers if route == "bare" else models.bridge.blocks
    with cuda_route(meter, layers) as (_, twins):
        (runner or RUNNERS[route])(models, tokens)
    per_layer = tuple(LayerLedger(sum(meter.calls[i].device.values()) if i in meter.calls else 0,
                                  dict(meter.calls[i].attention) if i in meter.calls else {})
                      for i in range(models.n_layers))
    outside = meter.calls.get(None)
    return RouteLedger(route, models.name, meter.n_pos or n_pos, batch, models.weight_bytes(), meter.peak_bytes,
                       meter.flops, meter.device_calls(), meter.host_calls(), dict(meter.kernels),
                       per_layer, 0 if outside is None else sum(outside.device.values()), tuple(meter.largest),
                       tuple(meter.peak_live), dict(twins.assumed))


def run_null(models: MetaModels, n_pos: int, *, batch: int = 1, n_draws: int = NULL_DRAWS) -> RouteLedger:
    """The ``null`` route with ``n_draws`` random head sets, metered with as few draws as show its grouped passes.

    Every grouped pass of the null carries the same number of head sets (``copies`` of the batch), read from the
    rows of the largest forward of a run with a few draws. The ledger then meters one full pass (``copies - 1``
    draws: the measured heads fill the first copy) and two, and adds ``passes - 1`` times their difference (the
    checks, means and clean pass are in both runs, the difference is one pass); the last pass of ``n_draws`` may
    hold fewer sets and is counted whole. The peak is the larger run's (it holds full passes)."""
    rows: list[int] = []

    def count(module: Any, args: tuple, kwargs: dict) -> None:
        tokens = args[0] if args else kwargs.get("input")
        if isinstance(tokens, torch.Tensor):
            rows.append(int(tokens.shape[0]))

    def metered(draws: int) -> RouteLedger:
        rows.clear()
        handle = models.bridge.embed.register_forward_pre_hook(count, with_kwargs=True)  # every pass embeds
        try:
            return run_route(models, "null", n_pos, batch=batch, runner=lambda m, t: _null(m, t, n_draws=draws))
        finally:
            handle.remove()

    draws = min(3, n_draws)
    while True:
        found = {draws: metered(draws)}
        copies = max(rows) // batch
        if copies < draws + 1 or draws >= n_draws:
            break
        draws = min(n_draws, 4 * (draws + 1) - 1)
    if 2 * copies - 1 >= n_draws:
        return found[n_draws] if n_draws in found else metered(n_draws)
    one, two = (found[d] if d in found else metered(d) for d in (copies - 1, 2 * copies - 1))
    passes = -(-(n_draws + 1) // copies)
    return _extrapolated(one, two, passes - 1, f"{n_draws} draws from metered runs of {copies - 1} and "
                                              f"{2 * copies - 1} ({copies} head sets per pass, {passes} passes)")


def _extrapolated(base: RouteLedger, more: RouteLedger, factor: float, note: str) -> RouteLedger:
    """``base + factor * (more - base)`` for every count; the peak and largest tensors of the larger run."""
    def grow(a: float, b: float) -> int:
        return round(a + factor * (b - a))

    kernels = {key: grow(base.kernels.get(key, 0), more.kernels.get(key, 0))
               for key in {*base.kernels, *more.kernels}}
    layers = tuple(LayerLedger(grow(a.device_calls, b.device_calls),
                               {k: grow(a.attention.get(k, 0), b.attention.get(k, 0))
                                for k in {*a.attention, *b.attention}})
                   for a, b in zip(base.layers, more.layers))
    top = more if more.peak_bytes >= base.peak_bytes else base
    return RouteLedger(more.route, more.model, more.n_pos, more.batch, more.weight_bytes, top.peak_bytes,
                       grow(base.flops, more.flops), grow(base.device_calls, more.device_calls),
                       grow(base.host_calls, more.host_calls), {k: v for k, v in kernels.items() if v > 0}, layers,
                       grow(base.outside_calls, more.outside_calls), top.largest, top.peak_live, more.assumed_reads,
                       note)


def run(models: MetaModels, route: str, n_pos: int, *, batch: int = 1) -> RouteLedger:
    """Meter ``route`` (the null through :func:`run_null`)."""
    return run_null(models, n_pos, batch=batch) if route == "null" else run_route(models, route, n_pos, batch=batch)
