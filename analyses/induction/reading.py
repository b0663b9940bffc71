"""What the induction toy's layer-2 classifier reads: where its attention goes and which residual components its
keys read, on the standard toy (Chen et al. 2024).

On joint training the classifier's event (layer 2's generalized induction score rising) comes before the copier's
(:mod:`analyses.dynamics.toy_measure`); measured at a checkpoint, this says what the layer-2 head reads then. The
data are the held-out chains in batches (:func:`analyses.induction.edge.toy_batches`) whose even ones choose the
heads (:func:`analyses.induction.edge.copier_and_classifier`: the copier, the layer-1 head with the most mass at
distance 1; the classifier, the layer-2 head with the highest generalized induction score, order ``order``) and odd
ones measure them, over the score's queries (those with a nonempty target set):

- positions: the classifier's attention mass split into the score's targets (the keys
  :class:`probes.attention.generalized_induction.GeneralizedInductionProbe` counts for the query), the local window
  (keys at distance ``0 .. order - 1``: the query and its own parents; targets excluded) and the rest; beside the
  same split under uniform attention over the visible keys (the null; its target share is the score's chance);
- components: the classifier's key input (the residual entering layer 2) is the embedding plus each layer-1 head's
  output (plus the layer-1 MLP's when the toy has one). Each :data:`COMPONENTS` entry is mean-replaced in the
  classifier layer's keys only: the residual entering layer 2 gets ``mean - value`` of that component added and the
  layer's queries are put back to their clean values (the values do not move the pattern), so only the keys read
  the change, through the residual stream directly, as :mod:`probes.causal.edges` patches an edge. The means are
  per position over the measured chains (as ``method="mean"`` of :mod:`probes.causal`), except the position
  embedding's, which is the same on every chain: it is replaced by its mean over positions. The statistic is the
  classifier's generalized induction score (its mass on the targets) with the component replaced; its drop
  (clean minus replaced) has a 95% bootstrap interval over chains, and its share of the clean score's excess over
  chance (1: the score falls to chance);
- layer 1: each layer-1 head's attention mass at distances ``0 .. order - 1`` on the measured chains
  (:class:`probes.attention.copier.CopierProbe`'s profile), which says what a head the keys read attends to then.

Example: ``classifier_reading(model, toy_batches(config, 8), config.data.order).drops()["copier"]``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor

from analyses.induction.edge import copier_and_classifier
from analyses.pretrained.held_out import halves
from mechprobe import forward
from probes import feed_probes
from probes.attention.copier import CopierProbe
from probes.attention.generalized_induction import parent_match_mask
from probes.causal.means import z_hook
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError, ModelError
from probes.core.model_info import pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.runner import capture
from probes.stats.bootstrap import bootstrap_interval

POSITIONS = ("targets", "window", "rest")
COMPONENTS = ("token", "position", "copier", "other_heads", "head", "mlp", "all")
"""The key input's components replaced one at a time: the token embedding, the position embedding, the copier's
output, the other layer-1 heads' outputs together, each layer-1 head's output alone (``head0``, ``head1``, ..), the
layer-1 MLP's output (toys with an MLP only) and everything below layer 2 at once (the keys then carry the mean
residual at each position)."""

RESID, Q, EMBED, POS, ATTN_OUT, MLP_OUT = ("blocks.1.hook_resid_pre", "blocks.1.attn.hook_q", "hook_embed",
                                           "hook_pos_embed", "blocks.0.hook_attn_out", "blocks.0.hook_mlp_out")


@dataclass(frozen=True)
class ClassifierReading:
    """Per measured chain (the bootstrap's unit): ``queries`` the score's queries, ``mass`` ``[chain position]`` the
    classifier's attention on :data:`POSITIONS` summed over them, ``uniform`` the same under uniform attention, and
    ``replaced`` ``[chain component]`` its mass on the targets with each of ``components`` mean-replaced in its keys.
    ``copier`` and ``classifier`` are the heads, as ``(layer, head)``; ``layer1`` ``[head distance]`` each layer-1
    head's attention mass at distances ``0 .. order - 1`` over the measured chains."""

    copier: tuple[int, int]
    classifier: tuple[int, int]
    components: tuple[str, ...]
    queries: Float[Tensor, " chain"]
    mass: Float[Tensor, "chain position"]
    uniform: Float[Tensor, "chain position"]
    replaced: Float[Tensor, "chain component"]
    layer1: Float[Tensor, "head distance"]
    n_boot: int = 1000
    seed: int = 0

    @property
    def shares(self) -> dict[str, float]:
        """The classifier's mean attention mass on each of :data:`POSITIONS` (they sum to 1)."""
        return dict(zip(POSITIONS, (self.mass.sum(0) / self.queries.sum()).tolist()))

    @property
    def uniform_shares(self) -> dict[str, float]:
        """The same under uniform attention over the visible keys (the null)."""
        return dict(zip(POSITIONS, (self.uniform.sum(0) / self.queries.sum()).tolist()))

    @property
    def score(self) -> float:
        """The clean generalized induction score (the mass on the targets)."""
        return self.shares["targets"]

    @property
    def chance(self) -> float:
        return self.uniform_shares["targets"]

    @property
    def without(self) -> dict[str, float]:
        """The score with each component mean-replaced in the keys."""
        return dict(zip(self.components, (self.replaced.sum(0) / self.queries.sum()).tolist()))

    def drops(self, level: float = 0.95) -> dict[str, tuple[float, float, float]]:
        """Per component: the score's drop (clean minus replaced) with its ``level`` bootstrap interval over chains,
        as ``(estimate, low, high)``."""
        per_chain = {"queries": self.queries, "clean": self.mass[:, 0], "replaced": self.replaced}
        estimate, low, high = bootstrap_interval(
            per_chain, lambda s: (s["clean"][..., None] - s["replaced"]) / s["queries"][..., None],
            n_boot=self.n_boot, level=level, seed=self.seed)
        return {name: (float(estimate[i]), float(low[i]), float(high[i])) for i, name in enumerate(self.components)}

    def drop_share(self, component: str) -> float:
        """The drop's share of the clean score's excess over chance (NaN where there is none)."""
        excess = self.score - self.chance
        return (self.score - self.without[component]) / excess if excess > 0 else float("nan")


def position_sums(tokens: Int[Tensor, "chain pos"], valid: Bool[Tensor, "chain pos"],
                  pattern: Float[Tensor, "chain q_pos k_pos"], order: int, attended: Tensor | None = None
                  ) -> tuple[Float[Tensor, " chain"], Float[Tensor, "chain position"], Float[Tensor, "chain position"]]:
    """Per chain: the score's queries, ``pattern``'s mass on :data:`POSITIONS` summed over them and the same under
    uniform attention over the visible keys (``k <= q`` that ``attended``, the attention mask, keeps: the keys of
    :func:`probes.attention.head_scores.visible_keys`, so the target share is the score's chance)."""
    n_pos = tokens.shape[1]
    targets = parent_match_mask(tokens, valid, range(1, order))
    queries = targets.any(-1)
    distance = torch.arange(n_pos)[:, None] - torch.arange(n_pos)[None, :]
    kept = torch.ones_like(valid) if attended is None else attended.bool()
    visible = (distance >= 0)[None] & kept[:, None, :]
    window = ((distance >= 0) & (distance < order))[None] & ~targets
    weight = queries.double()
    masses, uniform = [], []
    for keys in (targets, window & visible, visible & ~targets & ~window):
        masses.append(((pattern.double() * keys).sum(-1) * weight).sum(-1))
        uniform.append((keys.sum(-1) / visible.sum(-1).clamp(min=1) * weight).sum(-1))
    return weight.sum(-1), torch.stack(masses, -1), torch.stack(uniform, -1)


class _Reached(Exception):
    def __init__(self, value: Tensor) -> None:
        self.value = value


def _value_at(model: HookedModel, tokens: Tensor, hooks: list[tuple[str, Callable[..., Any]]], name: str) -> Tensor:
    """A forward pass with ``hooks`` that ends once ``name`` fired: its value."""
    def stop(x: Tensor, hook: Any) -> None:
        raise _Reached(x)

    try:
        forward.run(model, tokens, fwd_hooks=[*hooks, (name, stop)])
    except _Reached as reached:
        return reached.value
    raise ModelError(f"The forward pass ended before {name} fired.")


def _means(model: HookedModel, batches: Sequence[TokenBatch], names: list[str]) -> dict[str, Tensor]:
    """Each hook's mean value per position over the rows of ``batches`` (all of one length)."""
    if len({b.shape[1] for b in batches}) != 1:
        raise InputError("The classifier's reading mean-replaces components per position: give batches of one "
                         "length (the toy's chains are).")
    sums: dict[str, Tensor] = {}
    for batch in batches:
        for name, value in capture(model, batch, names).items():
            sums[name] = sums.get(name, 0) + value.double().sum(0)
    rows = sum(b.shape[0] for b in batches)
    return {name: value / rows for name, value in sums.items()}


def _deltas(model: HookedModel, batch: TokenBatch, clean: dict[str, Tensor], means: dict[str, Tensor],
            copier: int, components: tuple[str, ...]) -> Float[Tensor, "component chain pos d_model"]:
    """Each component's ``mean - value`` in the residual entering layer 2; a layer-1 head's through layer 1's
    attention output with its ``hook_z`` mean-replaced."""
    def heads_replaced(heads: Tensor) -> Tensor:
        def hook(z: Tensor, hook: Any) -> Tensor:
            return torch.where(heads[:, None], means[z_hook(0)].to(z.dtype), z)

        return _value_at(model, batch.tokens, [(z_hook(0), hook)], ATTN_OUT).double() - clean[ATTN_OUT].double()

    shape = clean[RESID].shape
    n_heads = int(model.cfg.n_heads)
    copier_only = torch.nn.functional.one_hot(torch.tensor(copier), n_heads).bool()
    position = clean[POS].double().expand(shape)
    replaced: dict[str, Callable[[], Tensor]] = {
        "token": lambda: means[EMBED] - clean[EMBED].double(),
        "position": lambda: position.mean(1, keepdim=True) - position,
        "copier": lambda: heads_replaced(copier_only), "other_heads": lambda: heads_replaced(~copier_only),
        "mlp": lambda: means[MLP_OUT] - clean[MLP_OUT].double(),
        "all": lambda: means[RESID] - clean[RESID].double()}
    replaced |= {f"head{h}": partial(heads_replaced, torch.arange(n_heads) == h) for h in range(n_heads)}
    return torch.stack([replaced[name]().expand(shape) for name in components])


def _replaced_patterns(model: HookedModel, batch: TokenBatch, clean: dict[str, Tensor], deltas: Tensor, head: int
                       ) -> Float[Tensor, "component chain q_pos k_pos"]:
    """The classifier's pattern with each delta added to the residual entering layer 2 and layer 2's queries put
    back to their clean values: only its keys read the delta (one pass over a copy of the batch per delta)."""
    copies = deltas.shape[0]

    def add(resid: Tensor, hook: Any) -> Tensor:
        return resid + deltas.flatten(0, 1).to(resid.dtype)

    def clean_q(q: Tensor, hook: Any) -> Tensor:
        return clean[Q].repeat(copies, *([1] * (q.ndim - 1)))

    pattern = _value_at(model, batch.tokens.repeat(copies, 1), [(RESID, add), (Q, clean_q)], pattern_hook(1))
    return pattern[:, head].reshape(copies, *batch.shape, batch.shape[1])


def classifier_reading(model: HookedModel, batches: Sequence[TokenBatch], order: int, *, n_boot: int = 1000,
                       seed: int = 0) -> ClassifierReading:
    """The classifier's reading on ``batches`` (module docstring): heads chosen on the even batches, measured on
    the odd ones."""
    if int(model.cfg.n_layers) != 2:
        raise ConfigError(f"The classifier's reading splits the key input of layer 2 of a 2-layer toy; this model has "
                          f"{model.cfg.n_layers} layers.")
    choose, measure = halves(batches)
    (_, copier), (_, head) = copier_and_classifier(model, choose, order)
    attn_only = bool(getattr(model.cfg, "attn_only", False))
    heads = tuple(f"head{h}" for h in range(int(model.cfg.n_heads)))
    components = tuple(part for name in COMPONENTS if name != "mlp" or not attn_only
                       for part in (heads if name == "head" else (name,)))
    names = [RESID, Q, EMBED, POS, ATTN_OUT, pattern_hook(1), *(() if attn_only else (MLP_OUT,))]
    means = _means(model, measure, [EMBED, RESID, z_hook(0), *(() if attn_only else (MLP_OUT,))])
    parts: list[tuple[Tensor, ...]] = []
    for batch in measure:
        clean = capture(model, batch, names)
        patterns = _replaced_patterns(model, batch, clean, _deltas(model, batch, clean, means, copier, components),
                                      head)
        queries, mass, uniform = position_sums(batch.tokens, batch.valid, clean[pattern_hook(1)][:, head], order,
                                               batch.attention_mask)
        targets = parent_match_mask(batch.tokens, batch.valid, range(1, order))
        replaced = (patterns.double() * targets).sum((-1, -2)).T
        parts.append((queries, mass, uniform, replaced))
    queries, mass, uniform, replaced = (torch.cat(part) for part in zip(*parts))
    profile = CopierProbe(order - 1)
    feed_probes(model, [profile], measure, data="held-out chains of the induction toy", progress=False)
    return ClassifierReading((0, copier), (1, head), components, queries, mass, uniform, replaced,
                             profile.compute().mass[0], n_boot, seed)
