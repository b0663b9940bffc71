"""What settling costs on a GPU: each finding a settled report measured in rounds, its units measured and those it
still needs, priced by the cost ledger (analyses/plan: the probes at the unit's shape on meta weights, the roofline
calibrated on an H200), beside the text it would read and the text a corpus holds.

Reads ``REPORT/summary.json`` of ``mechprobe report --settle`` (``pretrained[MODEL]["settled"]``; needs_units is
what a finding says it would still need). A unit is priced as the rounds measure it:

- text batches (head scores, topic ratios): the probe suite on one ``batch_size x seq_len`` batch;
- ``[BOS] X X`` batches (induction on the protocol): the suite on one protocol batch;
- ranked query tokens (co-occurrence ordering): the text batches a query token took in the rounds, each a suite pass;
- ``[BOS] X X`` sequences and rows of text (the head ablations): three bare forwards of a row (the heads' means,
  the clean and the ablated pass), in passes of ``--rows-per-pass`` rows.

Run (the corpus size defaults to WikiText-103's training split, 103,227,021 tokens in its own word tokenisation;
a BPE tokeniser makes more)::

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/settle_estimate.py runs/settled --gpu h100
"""

from __future__ import annotations

import analyses.script_start  # noqa: F401  (first: a Ctrl-C while the imports below run is one line)

# isort: split

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from analyses.cli_checks import ScriptParser, count_arg, script_main, text_arg
from analyses.plan.estimate import GPUS, estimate
from analyses.plan.routes import run
from analyses.plan.shapes import SHAPES, meta_models
from mechprobe.validation import real_path
from probes.core.errors import InputError

WIKITEXT_103_TOKENS = 103_227_021
ABLATION_PASSES = 3  # the heads' means, the clean pass and the ablated pass


@dataclass(frozen=True)
class UnitShape:
    """How one unit of a finding is measured: ``route`` on ``batch`` x ``tokens``, ``passes`` times per unit."""

    route: str
    tokens: int
    batch: int
    passes: float
    text_tokens: float  # text read per unit (0: generated [BOS] X X rows)


def unit_shape(finding: dict[str, Any], settings: dict[str, Any], rows_per_pass: int) -> UnitShape:
    """The shape of ``finding``'s unit under the report's ``settings`` (``summary["settings"]["pretrained"]``)."""
    unit, batch_tokens = finding["unit"], settings["seq_len"] * settings["batch_size"]
    causal = settings["causal"]
    if unit == "text batches":
        return UnitShape("suite", settings["seq_len"], settings["batch_size"], 1.0, batch_tokens)
    if unit == "[BOS] X X batches":
        return UnitShape("suite", 2 * settings["protocol_seq_len"] + 1, settings["protocol_batch_size"], 1.0, 0.0)
    if unit == "ranked query tokens":
        per_unit = finding["tokens"] / finding["units"] if finding["units"] else 1.0
        return UnitShape("suite", settings["seq_len"], settings["batch_size"], per_unit / batch_tokens, per_unit)
    if unit == "[BOS] X X sequences":
        return UnitShape("bare", 2 * causal["seq_len"] + 1, rows_per_pass, ABLATION_PASSES / rows_per_pass, 0.0)
    if unit == "rows of text":
        return UnitShape("bare", causal["text_len"], rows_per_pass, ABLATION_PASSES / rows_per_pass,
                         float(causal["text_len"]))
    raise InputError(f"{finding['name']}: units of {unit!r} have no price here; add them to unit_shape.")


@script_main
def main() -> None:
    parser = ScriptParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=text_arg, help="a report folder written by mechprobe report --settle")
    parser.add_argument("--gpu", choices=sorted(GPUS), default="h100")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m",
                        help="the model shape to price (default smollm2-135m)")
    parser.add_argument("--corpus-tokens", type=count_arg(1), default=WIKITEXT_103_TOKENS,
                        help="tokens of text available (default WikiText-103's training split)")
    parser.add_argument("--rows-per-pass", type=count_arg(1), default=256, help="ablation rows per forward pass")
    args = parser.parse_args()
    real_path("argument report:", args.report)  # a link that loops is named as one, not as a missing file
    summary_path = Path(args.report) / "summary.json"
    if not summary_path.is_file():
        parser.error(f"argument report: {summary_path} does not exist; give the folder of mechprobe report --settle")
    try:
        summary = json.loads(summary_path.read_text(encoding="utf-8"))
        settings = summary["settings"]["pretrained"]
        if not isinstance(summary["pretrained"], dict):
            raise TypeError("pretrained is not a mapping")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
        parser.error(f"argument report: {summary_path} is not a mechprobe report's summary ({error}); give the "
                     f"folder of mechprobe report --settle")
    if not any(isinstance(entry, dict) and "settled" in entry for entry in summary["pretrained"].values()):
        parser.error(f"argument report: {summary_path} holds no settled findings (a report made without --settle, "
                     f"or of no model), so every estimate would be 0 s; give the folder of mechprobe report --settle")
    gpu = GPUS[args.gpu]
    prices: dict[tuple[str, int, int], float] = {}
    print(f"| model | finding | unit | verdict | units measured | {gpu.name} s | units still needed | text tokens "
          f"still needed | {gpu.name} s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    total_s = total_tokens = done_s = 0.0
    for model, entry in summary["pretrained"].items():
        for name, finding in (entry.get("settled") or {}).items():
            try:
                needed, units = int(finding.get("needs_units") or 0), int(finding["units"])
                if not needed and not units:
                    continue
                shape = unit_shape(finding, settings, args.rows_per_pass)
            except (AttributeError, KeyError, TypeError, ValueError, ZeroDivisionError) as error:
                raise InputError(f"{summary_path}: pretrained[{model}].settled[{name}] is not a settled finding "
                                 f"({type(error).__name__}: {error}); give the folder of mechprobe report --settle") \
                    from None
            key = (shape.route, shape.tokens, shape.batch)
            if key not in prices:
                prices[key] = estimate(run(meta_models(args.shape, n_pos=shape.tokens), shape.route, shape.tokens,
                                           batch=shape.batch), gpu).seconds
            done, seconds = (n * shape.passes * prices[key] for n in (units, needed))
            tokens = needed * shape.text_tokens
            total_s, total_tokens, done_s = total_s + seconds, total_tokens + tokens, done_s + done
            print(f"| {model} | {name} | {finding['unit']} | {finding.get('verdict', '?')} | {units:,} | "
                  f"{done:,.1f} | {needed:,} | {tokens:,.0f} | {seconds:,.1f} |")
    share = total_tokens / args.corpus_tokens
    print(f"\nThe rounds measured: {done_s:,.0f} s on one {gpu.label}. Still needed: {total_s:,.0f} s "
          f"({total_s / 3600:.2f} h), {total_tokens:,.0f} tokens of fresh text: {share:.2%} of the "
          f"{args.corpus_tokens:,} available" + (" (more than there is)" if share > 1 else ""))
    for (route, tokens, batch), seconds in sorted(prices.items()):
        print(f"  {route} pass of {batch} x {tokens} tokens: {seconds * 1e3:.2f} ms")
    if not math.isfinite(total_s):
        raise InputError(f"An estimate was not finite ({total_s}); check the units and settings in {summary_path}.")


if __name__ == "__main__":
    main()
