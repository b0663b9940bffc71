"""Interactive, offline views for report.html and ``mechprobe heads --html``.

Two views, both self-contained (inline CSS and JavaScript, no network at view time):

- :func:`heatmap_view`: a layer x head table coloured by value; hovering a cell shows its head,
  value and the chance level (also as the cell's tooltip, so it reads without JavaScript).
- :func:`pattern_view`: one head's attention pattern on a real passage, circuitsvis style: the
  passage's tokens, and hovering (or clicking) a token colours every token by how much the hovered
  one attends to it. The view is drawn by JavaScript from the data in its ``data-`` attributes.

:func:`passage_patterns` captures the patterns of chosen heads on one sequence, for the second view.
After drawing, each view sets ``data-drawn`` on itself, and an error anywhere sets ``data-js-error``
on ``<body>``: what the headless-Chromium test reads back from the DOM.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from probes.core.batch import TokenBatch, as_token_batch
from probes.core.model_info import ModelInfo, pattern_hook
from probes.core.model_kind import HookedModel
from probes.core.runner import capture

CSS = """
.mp-view{margin:1em 0;padding:.5em;border:1px solid #ddd;border-radius:4px}
.mp-view h4{margin:.2em 0 .5em 0}
table.mp-heat{border-collapse:collapse;margin:.3em 0}
table.mp-heat td,table.mp-heat th{border:1px solid #fff;padding:0;width:2.2em;height:1.4em;font-size:70%;
 text-align:center}
table.mp-heat td.mp-cell:hover{outline:2px solid #000}
.mp-readout{font-family:monospace;min-height:1.3em;color:#222}
.mp-tokens{font-family:monospace;line-height:2;word-wrap:break-word}
.mp-token{padding:1px 2px;margin:0 1px;border-radius:2px;cursor:pointer;white-space:pre}
.mp-token.mp-query{outline:2px solid #000}
"""

JS = r"""
(function(){
  function fail(e){document.body.setAttribute('data-js-error', String(e && e.message || e));}
  window.addEventListener('error', function(ev){fail(ev.error || ev.message);});
  function colour(v){var a=Math.max(0,Math.min(1,v));return 'rgba(31,119,180,'+a.toFixed(3)+')';}
  function heatmaps(){
    document.querySelectorAll('.mp-heatmap').forEach(function(view){
      var readout=view.querySelector('.mp-readout');
      view.querySelectorAll('td.mp-cell').forEach(function(cell){
        cell.addEventListener('mouseenter',function(){readout.textContent=cell.getAttribute('title');});
      });
      view.setAttribute('data-drawn', String(view.querySelectorAll('td.mp-cell').length));
    });
  }
  function patterns(){
    document.querySelectorAll('.mp-pattern').forEach(function(view){
      var tokens=JSON.parse(view.getAttribute('data-tokens'));
      var pattern=JSON.parse(view.getAttribute('data-pattern'));
      var box=view.querySelector('.mp-tokens'), readout=view.querySelector('.mp-readout');
      var spans=tokens.map(function(text,i){
        var s=document.createElement('span');s.className='mp-token';s.textContent=text;s.setAttribute('data-i',i);
        box.appendChild(s);return s;});
      function show(q){
        var row=pattern[q], best=0;
        for(var k=0;k<row.length;k++){if(row[k]>row[best])best=k;}
        spans.forEach(function(s,k){s.style.background=colour(row[k]||0);s.classList.toggle('mp-query',k===q);
          s.title='attention from token '+q+': '+(row[k]||0).toFixed(3);});
        readout.textContent='token '+q+' '+JSON.stringify(tokens[q])+' attends most to token '+best+' '+
          JSON.stringify(tokens[best])+' ('+row[best].toFixed(3)+')';
        view.setAttribute('data-query', String(q));
      }
      spans.forEach(function(s,q){s.addEventListener('mouseenter',function(){show(q);});
        s.addEventListener('click',function(){show(q);});});
      show(tokens.length-1);
      view.setAttribute('data-drawn', String(spans.length));
    });
  }
  try{heatmaps();patterns();document.body.setAttribute('data-views-drawn','true');}catch(e){fail(e);}
})();
"""


def _cell_colour(value: float, low: float, high: float) -> str:
    if value != value:  # NaN
        return "#ccc"
    t = 0.0 if high <= low else max(0.0, min(1.0, (value - low) / (high - low)))
    return f"rgba(31,119,180,{0.05 + 0.95 * t:.3f})"


def heatmap_view(title: str, table: Sequence[Sequence[float]], *, chance: float | None = None,
                 label: str = "score") -> str:
    """A layer x head heatmap of ``table`` [layer][head] with hover values (HTML snippet)."""
    values = [[float(v) for v in row] for row in table]
    finite = [v for row in values for v in row if v == v]
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    n_heads = max(len(row) for row in values) if values else 0
    chance_text = "" if chance is None or chance != chance else f" (chance {chance:.3f})"
    rows = ["<tr><th></th>" + "".join(f"<th>H{h}</th>" for h in range(n_heads)) + "</tr>"]
    for layer, row in enumerate(values):
        cells = "".join(
            f"<td class='mp-cell' data-value='{v:.6g}' style='background:{_cell_colour(v, low, high)}' "
            f"title='L{layer}H{h} {html.escape(label)} {v:.3f}{chance_text}'></td>" for h, v in enumerate(row))
        rows.append(f"<tr><th>L{layer}</th>{cells}</tr>")
    return (f"<div class='mp-view mp-heatmap'><h4>{html.escape(title)}</h4><table class='mp-heat'>{''.join(rows)}"
            f"</table><div class='mp-readout'>hover a cell: layer, head, {html.escape(label)}{chance_text}</div></div>")


def pattern_view(title: str, tokens: Sequence[str], pattern: Sequence[Sequence[float]]) -> str:
    """One head's attention on a passage: hover a token to see where it attends (HTML snippet)."""
    if len(pattern) != len(tokens) or any(len(row) != len(tokens) for row in pattern):
        raise ValueError(f"pattern must be [{len(tokens)} x {len(tokens)}] for {len(tokens)} tokens.")
    data_tokens = html.escape(json.dumps(list(tokens)), quote=True)
    data_pattern = html.escape(json.dumps([[round(float(v), 4) for v in row] for row in pattern]), quote=True)
    return (f"<div class='mp-view mp-pattern' data-tokens=\"{data_tokens}\" data-pattern=\"{data_pattern}\">"
            f"<h4>{html.escape(title)}</h4><div class='mp-readout'></div><div class='mp-tokens'></div></div>")


def page(title: str, views: Sequence[str]) -> str:
    """A standalone HTML page of ``views``."""
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'>"
            f"<title>{html.escape(title)}</title><style>body{{font-family:sans-serif;max-width:1100px;"
            f"margin:2em auto}}{CSS}</style></head><body><h1>{html.escape(title)}</h1>{''.join(views)}"
            f"<script>{JS}</script></body></html>")


def token_strings(model: HookedModel, ids: Sequence[int]) -> list[str]:
    """Readable text of each token id (the tokenizer's own piece, whitespace markers shown as spaces)."""
    tokenizer = getattr(model, "tokenizer", None)
    if tokenizer is None:
        return [str(i) for i in ids]
    return [tokenizer.decode([int(i)]) or tokenizer.convert_ids_to_tokens(int(i)) for i in ids]


@dataclass(frozen=True)
class PassagePatterns:
    """The attention of named heads on one passage: its ``tokens`` (text), each head's ``(layer, head)`` and its
    pattern ``patterns[name][query][key]`` over the passage's tokens."""

    tokens: list[str]
    patterns: Mapping[str, list[list[float]]]
    heads: Mapping[str, tuple[int, int]]


def passage_patterns(model: HookedModel, batch: Any, heads: Mapping[str, tuple[int, int]], *, max_tokens: int = 48
                     ) -> PassagePatterns:
    """The :class:`PassagePatterns` of each head in ``heads`` (name -> (layer, head)) on the first sequence of
    ``batch``, cut to its first ``max_tokens`` valid tokens."""
    batch = as_token_batch(batch, ModelInfo.of(model))
    keep = batch.attention_mask[0].bool() if batch.attention_mask is not None else torch.ones_like(batch.valid[0])
    positions = keep.nonzero().flatten()[:max_tokens]
    end = int(positions[-1]) + 1 if len(positions) else 0
    mask = None if batch.attention_mask is None else batch.attention_mask[:1, :end]
    row = TokenBatch(batch.tokens[:1, :end], batch.valid[:1, :end], None if mask is None or bool(mask.all()) else mask)
    layers = sorted({layer for layer, _ in heads.values()})
    activations = capture(model, row, [pattern_hook(layer) for layer in layers])
    index = positions.tolist()
    patterns = {}
    for name, (layer, head) in heads.items():
        full = activations[pattern_hook(layer)][0, head].float().cpu()
        patterns[name] = full[index][:, index].tolist()
    return PassagePatterns(token_strings(model, row.tokens[0, index].tolist()), patterns,
                           {name: (int(layer), int(h)) for name, (layer, h) in heads.items()})
