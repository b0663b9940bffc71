"""Offline HTML views of per-head numbers: the one drawing code of ``mechprobe heads --html``, report.html and
the results' ``_repr_html_`` in a notebook.

Every view is self-contained (inline CSS and JavaScript, nothing fetched at view time):

- :func:`heatmap_view`: a layer x head table coloured by value; hovering a cell shows its head,
  value and the chance level (also as the cell's tooltip, so it reads without JavaScript).
- :func:`pattern_view`: one head's attention pattern on a real passage, circuitsvis style: the
  passage's tokens, and hovering (or clicking) a token colours every token by how much the hovered
  one attends to it. The view is drawn by JavaScript from the data in its ``data-`` attributes.

:func:`page` wraps views into a standalone page, :func:`notebook_html` into a fragment for a notebook cell
(its styles and script inline, so the cell shows the same in a saved notebook). After drawing, each view
sets ``data-drawn`` on itself (views already drawn are skipped, so several cells can share a page), and an
error anywhere sets ``data-js-error`` on ``<body>``: what the headless-Chromium test reads back from the DOM.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence

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
.mp-top{font-family:monospace;font-size:90%;color:#222}
table.mp-verdicts{border-collapse:collapse;margin:.3em 0}
table.mp-verdicts td,table.mp-verdicts th{border:1px solid #bbb;padding:3px 8px;text-align:right}
table.mp-verdicts td:first-child,table.mp-verdicts th:first-child{text-align:left}
table.mp-verdicts td.mp-holds{color:#1a7f37;font-weight:bold}
table.mp-verdicts td.mp-absent{color:#6e6e6e}
table.mp-verdicts td.mp-inconclusive{color:#9a6700}
"""

JS = r"""
(function(){
  function fail(e){document.body.setAttribute('data-js-error', String(e && e.message || e));}
  window.addEventListener('error', function(ev){fail(ev.error || ev.message);});
  function colour(v){var a=Math.max(0,Math.min(1,v));return 'rgba(31,119,180,'+a.toFixed(3)+')';}
  function heatmaps(){
    document.querySelectorAll('.mp-heatmap:not([data-drawn])').forEach(function(view){
      var readout=view.querySelector('.mp-readout');
      view.querySelectorAll('td.mp-cell').forEach(function(cell){
        cell.addEventListener('mouseenter',function(){readout.textContent=cell.getAttribute('title');});
      });
      view.setAttribute('data-drawn', String(view.querySelectorAll('td.mp-cell').length));
    });
  }
  function patterns(){
    document.querySelectorAll('.mp-pattern:not([data-drawn])').forEach(function(view){
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


def notebook_html(views: Sequence[str], *, title: str | None = None) -> str:
    """``views`` as one HTML fragment for a notebook output (a ``_repr_html_``): inline styles, the views and
    the inline script; nothing fetched."""
    heading = "" if title is None else f"<h3>{html.escape(title)}</h3>"
    return f"<div class='mp-notebook'><style>{CSS}</style>{heading}{''.join(views)}<script>{JS}</script></div>"
