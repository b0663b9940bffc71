"""Layer x head maps of a per-head result: as offline HTML (a notebook's ``_repr_html_``) and as a matplotlib figure.

A per-head result lists its maps with ``head_maps()`` (one :class:`HeadMap` per quantity: a [layer, head] table,
its chance level when it has one, and what the value is); :class:`HeadMapDisplay` gives it ``_repr_html_``
(the same hover-able map as ``mechprobe heads --html``, the best heads listed under it) and ``plot()``.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from jaxtyping import Float
from torch import Tensor

from probes.core.errors import ConfigError, InputError
from probes.display.views import heatmap_view, notebook_html

if TYPE_CHECKING:
    from matplotlib.figure import Figure


@dataclass(frozen=True)
class HeadMap:
    """One quantity per head: ``values`` [layer, head], the uniform-attention ``chance`` level (None where the
    quantity has none) and ``label``, what a value is (shown in tooltips and on the colour bar)."""

    name: str
    values: Float[Tensor, "layer head"]
    chance: float | None = None
    label: str = "score"

    def __post_init__(self) -> None:
        if not isinstance(self.values, Tensor) or self.values.dim() != 2:
            got = tuple(self.values.shape) if isinstance(self.values, Tensor) else type(self.values).__name__
            raise InputError(f"HeadMap {self.name!r} needs a [layer, head] tensor; got {got}.")

    def best(self, k: int = 3) -> list[tuple[int, int, float]]:
        """The ``k`` highest values as ``(layer, head, value)``, best first (NaN never ranks)."""
        table = self.values.detach().double().cpu()
        flat = torch.nan_to_num(table.flatten(), nan=float("-inf"))
        n_heads = table.shape[1]
        top = flat.topk(min(k, int(torch.isfinite(flat).sum()))).indices
        return [(int(i) // n_heads, int(i) % n_heads, float(table.flatten()[i])) for i in top]


def describe(result: Any) -> str:
    """``TypeName: model, N sequences`` from a result's provenance (the heading of its views)."""
    provenance = getattr(result, "provenance", None)
    if provenance is None:
        return type(result).__name__
    return f"{type(result).__name__}: {provenance.model}, {provenance.n_sequences} sequences"


def head_maps_html(maps: Sequence[HeadMap], *, title: str | None = None, top: int = 3) -> str:
    """Self-contained HTML of ``maps``: one hover-able layer x head map each, its ``top`` heads written under it."""
    parts = []
    for head_map in maps:
        chance = "" if head_map.chance is None or not math.isfinite(head_map.chance) else (
            f"; chance {head_map.chance:.3f}")
        best = ", ".join(f"L{layer}H{head} {value:.3f}" for layer, head, value in head_map.best(top))
        parts.append(heatmap_view(head_map.name, head_map.values.detach().cpu().tolist(), chance=head_map.chance,
                                  label=head_map.label)
                     + f"<div class='mp-top'>highest {html.escape(head_map.label)}: {best or 'none'}"
                       f"{chance}</div>")
    return notebook_html(parts, title=title)


def head_maps_figure(maps: Sequence[HeadMap], name: str | None = None) -> Figure:
    """A matplotlib figure: one layer x head heatmap per map (only ``name`` when given), the chance level in
    the title and as a red line on the colour bar. The figure is closed in pyplot, so a notebook shows it once
    (as the returned value); ``fig.savefig(path)`` writes it."""
    import matplotlib.pyplot as plt  # imported on first plot: importing pyplot picks a backend and takes ~0.3 s

    chosen = [m for m in maps if name is None or m.name == name]
    if not chosen:
        raise ConfigError(f"No head map named {name!r}; this result has {[m.name for m in maps]}.")
    n_layers, n_heads = chosen[0].values.shape
    width = min(16.0, 1.5 + len(chosen) * (1.2 + 0.35 * n_heads))
    fig, axes = plt.subplots(1, len(chosen), figsize=(width, min(9.0, 1.2 + 0.3 * n_layers)), squeeze=False)
    for ax, head_map in zip(axes[0], chosen):
        values = head_map.values.detach().double().cpu().numpy()
        image = ax.imshow(values, aspect="auto", cmap="viridis", interpolation="nearest")
        chance = head_map.chance if head_map.chance is not None and math.isfinite(head_map.chance) else None
        ax.set_title(head_map.name + ("" if chance is None else f"\n(chance {chance:.3f})"), fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_xticks(range(values.shape[1]))
        ax.set_yticks(range(values.shape[0]))
        bar = fig.colorbar(image, ax=ax)
        bar.set_label(head_map.label)
        low, high = image.get_clim()
        if chance is not None and low <= chance <= high:
            bar.ax.axhline(chance, color="red", linewidth=1.5)
    fig.tight_layout()
    plt.close(fig)
    return fig


class HeadMapDisplay:
    """Mixin of per-head results: ``_repr_html_`` and ``plot()`` from the result's :meth:`head_maps`."""

    def head_maps(self) -> list[HeadMap]:
        """The result's per-head quantities as layer x head maps."""
        raise NotImplementedError(f"{type(self).__name__} does not define head_maps()")

    def _repr_html_(self) -> str:
        return head_maps_html(self.head_maps(), title=describe(self))

    def plot(self, name: str | None = None) -> Figure:
        """A matplotlib figure of the layer x head maps (only ``name`` when given), chance levels marked.

        Example: ``probes.head_scores(model).plot("induction").savefig("induction.png")``."""
        return head_maps_figure(self.head_maps(), name)
