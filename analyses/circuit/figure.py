"""The circuit as a graph: every head of the layers involved as a node (layer on x, head on y), each measured edge
an arrow from sender to receiver, coloured by its verdict and labelled with its input and effect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from analyses.plot_backend import use_file_backend
from probes.causal import EdgeEffect
from probes.stats.findings import Finding

VERDICT_COLOURS = {"holds": "#1a7f37", "inconclusive": "#d4a017", "absent": "#8c959f"}


def draw_circuit(edges: Sequence[EdgeEffect], findings: Mapping[str, Finding], n_heads: int, path: Path, *,
                 effect: str = "loss_change", title: str = "") -> Path:
    """Write the graph of ``edges`` (verdicts of ``effect`` from ``findings``, keyed ``"{edge} / {effect}"``) to
    ``path`` (PNG)."""
    use_file_backend()
    import matplotlib.pyplot as plt

    layers = sorted({edge.sender[0] for edge in edges} | {edge.receiver[0] for edge in edges})
    x_of = {layer: i for i, layer in enumerate(layers)}
    fig, ax = plt.subplots(figsize=(2.0 + 1.6 * len(layers), 1.5 + 0.35 * n_heads))
    for layer in layers:
        ax.scatter([x_of[layer]] * n_heads, range(n_heads), s=60, color="#d0d7de", zorder=2)
    offsets = {"k": -0.12, "q": 0.0, "v": 0.12}  # one edge per input between the same heads stays apart
    along = {"k": 0.25, "q": 0.5, "v": 0.75}  # and so do their labels
    for edge in edges:
        finding = findings[f"{edge.name} / {effect}"]
        start = (x_of[edge.sender[0]], edge.sender[1])
        end = (x_of[edge.receiver[0]], edge.receiver[1] + offsets[edge.input])
        colour = VERDICT_COLOURS[finding.verdict]
        ax.annotate("", xy=end, xytext=start, zorder=1,
                    arrowprops={"arrowstyle": "-|>", "color": colour, "lw": 1.0 + 2.0 * (finding.verdict == "holds"),
                                "shrinkA": 6, "shrinkB": 6})
        at = along[edge.input]
        ax.text(start[0] + at * (end[0] - start[0]), start[1] + at * (end[1] - start[1]),
                f"{edge.input} {finding.value:+.2f}", color=colour, fontsize=7, ha="center", va="bottom")
        for head in (edge.sender, edge.receiver):
            ax.scatter([x_of[head[0]]], [head[1]], s=90, color="#0969da", zorder=3)
    for verdict, colour in VERDICT_COLOURS.items():
        ax.plot([], [], color=colour, label=verdict)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, title=effect.replace("_", " "))
    ax.set_xticks(range(len(layers)), [f"L{layer}" for layer in layers])
    ax.set_yticks(range(n_heads), [f"H{h}" for h in range(n_heads)], fontsize=7)
    ax.set_xlim(-0.5, len(layers) - 0.5)
    ax.set_ylim(n_heads - 0.5, -0.5)
    ax.set_xlabel("layer")
    ax.set_title(title or "edges by path patching", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
