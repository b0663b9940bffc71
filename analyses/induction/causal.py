"""Causal evidence on the induction toy: knock out the layer-1 copiers of the chain's parents and measure the loss.

``previous_token_causal`` (the pretrained finding of that name, measured on Chen et al.'s toy): the held-out
chains are cut into :data:`CAUSAL_UNITS` batches. On the even batches, for each parent distance
``d = 1 .. order - 1`` the layer-1 head with the most attention at distance ``d`` (``blocks.0.attn.hook_pattern``,
rows ``t >= d``; each head picked once) is that parent's copier; as many of the remaining layer-1 heads, those
with the least attention at the parent distances first, are the non-parent heads (fewer when fewer remain:
with Chen et al.'s 3 heads and 2 parents, one). On the odd batches both sets are ablated at
``blocks.0.attn.hook_z`` (:class:`probes.causal.AblationPlan`; one clean pass, one pass per set) and the
next-token loss is summed over every position that has a next token:

- value: the mean loss change (nats/token, ablated - clean) with the parent copiers ablated; interval: a 95%
  percentile bootstrap over the batches;
- null: the same change with the non-parent heads ablated; p-value: one-sided, from 10,000 random
  sign flips of the per-batch differences (parents ablated - non-parents ablated)
  (:func:`probes.stats.nulls.sign_flip_p_value`), so the finding holds when the parents matter more than other
  heads, by at least the pretrained threshold (0.1 nats/token above the larger of the null and the toy at
  initialisation).

Chen et al.'s models (simplified, full) are zero-ablated, not mean-ablated as the pretrained suite does: their
layer 2 reads the copiers through inner products of L2-normalised key and query features, so a zero key
feature removes every selector term that contains the head (the head carries no information to the
classifier), whereas a mean feature is not a unit vector and keeps a query-dependent term. The standard
TransformerLens model (residual stream, LayerNorm) is mean-ablated, as pretrained models are: zeroing its heads
moves even the untrained model's loss (0.17 nats for two random heads at seed 0, enough for its control to
"hold"), the heads' means do not (-0.03). On the simplified model, once the selector has put its weight on the
parent subset (``{0,1}``: 1 - 1e-7 on the fast preset), ablating the parent copiers leaves the classifier
attending uniformly over the keys, so it predicts the running frequency of each state
(:func:`running_frequency_loss`, the classifier's own ``eps`` mixture): equal to it within 1e-8 nats on seeds
0-4 of the fast preset.

No-context loss (:func:`no_context_loss`): ``log(n_states)``. Every sequence draws its own Dirichlet
transition kernel, symmetric in the states, and starts with uniform states, so without the sequence every
state is equally likely at every position (the marginal is uniform): the best predictor that ignores the
context scores exactly ``log S``. The ablated toy does not reach it: the running frequencies still use the
sequence (sparse kernels, ``alpha = 0.1``, give chains whose state frequencies are far from uniform). On the
fast preset (seeds 0-4, the ablated half of the chains) the parent-ablated loss is 0.74-0.86 nats, 22-33%
below ``log 3 = 1.099``, and equal to the running-frequency loss; the non-parent ablation moves the loss by less
than 1e-8 nats (the selector gives the subsets with head 2 weights below 1e-7).

On the standard preset (4 heads, seed 0) the finding does not hold: L0H0 and L0H2 both copy distance 1, so
the null (the least copier-like remaining heads, L0H3 and L0H0) holds a copier too, and ablating it costs more
(0.71 nats) than ablating the chosen copiers L0H2, L0H1 (0.27).

The paired loss change and its sign-flip test (:func:`analyses.toy_causal.paired_loss_change`) are shared with the
topic and Scan and Snap toys' causal findings.

Example::

    finding = previous_token_causal(model, chains, config, on="Chen et al.'s simplified two-layer model")
    finding.value, finding.null_value
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from analyses.induction.config import InductionExperimentConfig
from analyses.pretrained.findings import finding_from_spec
from analyses.pretrained.held_out import halves
from analyses.toy_causal import paired_loss_change
from mechprobe.forward import model_device
from probes import ModelInfo
from probes.causal import AblationPlan, ablation_sums, head_output_means, predicted_positions
from probes.causal.head_sets import head_mask
from probes.core.batch import as_token_batch
from probes.core.errors import ConfigError
from probes.core.model_kind import as_hooked_model
from probes.core.runner import capture
from probes.stats.findings import Finding
from toymodels.induction.data import MarkovConfig

CAUSAL_UNITS = 32  # batches of held-out chains: 16 choose the copiers, 16 (the bootstrap units) are ablated
PATTERN_HOOK = "blocks.0.attn.hook_pattern"
NULL_KIND = "the same change with as many non-parent layer-1 heads ablated (sign flips over batches)"
SELECTION = ("parent copiers chosen on the even batches (the layer-1 head with the most attention at each parent "
             "distance), ablated on the odd batches")


# -- the induction toy --------------------------------------------------------------------------------
def no_context_loss(data: MarkovConfig) -> float:
    """``log(n_states)``: the loss of the best predictor that ignores the sequence (module docstring)."""
    return math.log(data.n_states)


def running_frequency_loss(chains: Tensor, eps: float) -> float:
    """Mean next-token loss (nats) over positions ``0 .. L-2`` of ``chains`` [n, L] of the running frequency
    ``(1 - eps) * count_q(s) / (q + 1) + eps / S`` of each state among ``x_0 .. x_q`` (what the toy's classifier
    predicts with uniform attention over its keys ``k <= q``)."""
    n_states = int(chains.max()) + 1
    counts = torch.nn.functional.one_hot(chains[:, :-1], n_states).double().cumsum(1)
    probs = (1 - eps) * counts / counts.sum(-1, keepdim=True) + eps / n_states
    return float(-probs.gather(-1, chains[:, 1:, None]).log().mean())


def distance_mass(module: nn.Module, batches: Sequence[Tensor], max_distance: int) -> Tensor:
    """``mass[h, d - 1]``: layer-1 head ``h``'s mean attention on the key ``d`` positions back (rows ``t >= d``),
    over ``batches``, for ``d = 1 .. max_distance``."""
    model = as_hooked_model(module)
    info = ModelInfo.of(model)
    sums = torch.zeros(info.n_heads, max_distance, dtype=torch.float64)
    counts = torch.zeros(max_distance, dtype=torch.float64)
    with torch.inference_mode():
        for raw in batches:
            pattern = capture(model, as_token_batch(raw, info).to(model_device(model)), [PATTERN_HOOK])[PATTERN_HOOK]
            for d in range(1, min(max_distance, pattern.shape[-1] - 1) + 1):
                diagonal = pattern.diagonal(offset=-d, dim1=2, dim2=3).double().cpu()  # [batch head t - d]
                sums[:, d - 1] += diagonal.sum((0, 2))
                counts[d - 1] += diagonal.shape[0] * diagonal.shape[2]
    return sums / counts.clamp_min(1)


def parent_copiers(mass: Tensor, n_parents: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(parents, others)``: for each parent distance ``1 .. n_parents`` in turn the head (not yet taken) with
    the most attention there in ``mass`` [head distance]; then up to as many of the remaining heads, those with the
    least attention summed over the parent distances first."""
    parents: list[int] = []
    for d in range(n_parents):
        order = [int(h) for h in mass[:, d].argsort(descending=True, stable=True)]
        parents.append(next(h for h in order if h not in parents))
    at_parents = mass[:, :n_parents].sum(1)
    others = [int(h) for h in at_parents.argsort(stable=True) if int(h) not in parents]
    return tuple(parents), tuple(others[:n_parents])


def ablation_method(config: InductionExperimentConfig) -> str:
    """``"zero"`` on Chen et al.'s models, ``"mean"`` on the standard TransformerLens model (module docstring)."""
    return "mean" if config.model == "standard" else "zero"


def check_copiers(config: InductionExperimentConfig) -> None:
    """Refuse a toy with no layer-1 head left over for the null once every parent has a copier."""
    n_heads = config.standard.n_heads if config.model == "standard" else config.simplified.n_heads
    if n_heads <= config.data.n_parents:
        section = "standard" if config.model == "standard" else "simplified"
        raise ConfigError(f"previous_token_causal ablates the copiers of the {config.data.n_parents} parent distances "
                          f"against non-parent layer-1 heads; this toy has {n_heads} heads, none left over. Set "
                          f"{section}.n_heads={config.data.n_parents + 1} or more.")


@dataclass(frozen=True)
class CopierAblation:
    """Summed next-token losses per ablated batch [unit]: ``clean``, with the ``parents`` ablated and with the
    ``others`` (non-parent layer-1 heads) ablated by ``method``, over ``count`` positions."""

    parents: tuple[int, ...]
    others: tuple[int, ...]
    method: str
    count: Tensor
    clean: Tensor
    parents_ablated: Tensor
    others_ablated: Tensor

    def mean(self, sums: Tensor) -> float:
        return float(sums.sum() / self.count.sum())


def copier_ablation(module: nn.Module, batches: Sequence[Tensor], parents: Sequence[int], others: Sequence[int], *,
                    method: str = "zero") -> CopierAblation:
    """Ablate layer-1 heads ``parents`` and, apart, ``others`` at ``blocks.0.attn.hook_z`` by ``method`` (``"zero"``
    or ``"mean"``: the heads' means over ``batches``) on each of ``batches``; the summed loss over every position
    that has a next token (one row per batch)."""
    model = as_hooked_model(module)
    n_heads = ModelInfo.of(model).n_heads
    sets = torch.stack([head_mask(tuple((0, h) for h in heads), (0,), n_heads) for heads in (parents, others)])
    plan = AblationPlan(tuple((0, h) for h in parents), method, (0,), sets, 0)
    means = head_output_means(model, (0,), batches) if method == "mean" else None
    sums = ablation_sums(model, plan, batches, {"predicted": predicted_positions}, means=means)
    return CopierAblation(tuple(parents), tuple(others), method, sums.count[:, 0], sums.clean[:, 0],
                          sums.ablated[:, 0, 0], sums.ablated[:, 1, 0])


def causal_batches(chains: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """(selection, ablation): the even and the odd of :data:`CAUSAL_UNITS` batches of ``chains`` [n, L]."""
    return halves(list(chains.tensor_split(min(CAUSAL_UNITS, chains.shape[0]))))


def causal_finding(ablation: CopierAblation, config: InductionExperimentConfig, *, on: str, running: float
                   ) -> Finding:
    """``previous_token_causal`` of ``ablation`` (unadjusted, no control); ``running`` is the running-frequency
    loss of the ablated chains, quoted beside the ablated and no-context losses."""
    change = paired_loss_change(ablation.count, ablation.clean, ablation.parents_ablated, ablation.others_ablated,
                                seed=config.seed)
    heads = ", ".join(f"L0H{h}" for h in ablation.parents)
    others = ", ".join(f"L0H{h}" for h in ablation.others)
    distances = ", ".join(str(d) for d in range(1, len(ablation.parents) + 1))
    ablated, clean = ablation.mean(ablation.parents_ablated), ablation.mean(ablation.clean)
    statistic = (f"loss change (nats/token) on held-out chains, the layer-1 copiers of parent distances {distances} "
                 f"({heads}) {ablation.method}-ablated at blocks.0.attn.hook_z, {on}; null ablates {others}; "
                 f"ablated loss {ablated:.3f} (clean {clean:.3f}, "
                 f"non-parents ablated {ablation.mean(ablation.others_ablated):.3f}), no-context "
                 f"log {config.data.n_states} = {no_context_loss(config.data):.3f}, running state frequency "
                 f"{running:.3f}")
    return finding_from_spec("previous_token_causal", change.value, change.ci, change.null_value, change.p_value,
                                statistic=statistic, selection=SELECTION, null_kind=NULL_KIND)


def previous_token_causal(model: nn.Module, chains: Tensor, config: InductionExperimentConfig, *, on: str
                          ) -> Finding:
    """``previous_token_causal`` of ``model`` on the held-out ``chains`` [n, L] (module docstring)."""
    select, ablate = causal_batches(chains)
    n_parents = config.data.n_parents
    parents, others = parent_copiers(distance_mass(model, select, n_parents), n_parents)
    ablation = copier_ablation(model, ablate, parents, others, method=ablation_method(config))
    return causal_finding(ablation, config, on=on,
                          running=running_frequency_loss(torch.cat(ablate), config.simplified.eps))
