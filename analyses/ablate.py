"""``mechprobe ablate``: knock out heads (named, or the top heads of a head score) and measure the loss change on
the repeated half of ``[BOS] X X`` beside random head sets matched layer by layer, for the model and its
random-weight control. Heads chosen by score are chosen on the even batches and ablated on the odd ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from analyses.cli_checks import check_block_fits, check_head_count, check_pattern_name, check_pattern_targets
from analyses.paper_result import write_json
from analyses.toy_model_loader import load_any_model
from mechprobe import validation
from probes import ModelInfo, head_scores, random_weight_control, repeated_random_tokens
from probes.causal import HeadAblation, check_heads, head_ablation, repeated_half
from probes.causal.ablation import check_method
from probes.core.errors import ConfigError
from probes.core.loading import check_device, torch_dtype
from probes.core.model_kind import HookedModel

RESULT_FILE = "ablation.json"
# The command-line flag of each setting, named in errors as the user typed it.
FLAGS = {"seq_len": "--seq-len", "batches": "--batches", "batch_size": "--batch-size", "n_draws": "--draws",
         "max_rows": "--max-rows"}
SLICE = "repeated_half"


def parse_heads(text: str, flag: str = "--heads") -> list[tuple[int, int]]:
    """``"17.3,18.6"`` -> ``[(17, 3), (18, 6)]``; an empty item (``"1.0,,1.1"``) is refused, not dropped (the error
    names ``flag``, the flag the heads were given with)."""
    pairs = [part.strip() for part in text.split(",")]
    if not all(re.fullmatch(r"\d+\.\d+", p) for p in pairs):
        raise ConfigError(f"{flag} must be LAYER.HEAD pairs separated by commas, e.g. 17.3,18.6; got {text!r}.")
    return [(int(p.split(".")[0]), int(p.split(".")[1])) for p in pairs]


def parse_top(text: str) -> tuple[str, int]:
    """``"induction:5"`` -> ``("induction", 5)``: the 5 best heads by that head score."""
    match = re.fullmatch(r"([a-z_]+(?::-?\d+)?):(\d+)", text.strip())
    if not match or int(match.group(2)) < 1:
        raise ConfigError(f"--top must be KIND:K with K >= 1, e.g. induction:5; got {text!r}.")
    check_pattern_name("--top", match.group(1))  # an unknown kind fails here, naming the known ones
    return match.group(1), int(match.group(2))


@dataclass(frozen=True)
class AblateSettings:
    """What ``mechprobe ablate`` measures: ``heads`` or the ``top`` ``(kind, k)`` heads, by ``method``, on
    ``batches`` odd batches of ``batch_size`` rows of ``[BOS] X X`` (``|X| = seq_len``), against ``n_draws``
    random head sets; ``top`` heads are chosen on as many even batches."""

    method: str = "mean"
    heads: tuple[tuple[int, int], ...] | None = None
    top: tuple[str, int] | None = None
    seq_len: int = 20
    batches: int = 4
    batch_size: int = 4
    n_draws: int = 200
    seed: int = 0
    n_boot: int = 1000
    max_rows: int = 256

    def __post_init__(self) -> None:
        check_method(self.method)
        if (self.heads is None) == (self.top is None):
            raise ConfigError("Name the heads to ablate with exactly one of --heads (17.3,18.6) or --top "
                              "(induction:5).")
        for name, low in (("seq_len", 2), ("batches", 2), ("batch_size", 2 if self.method == "resample" else 1),
                          ("n_draws", 0), ("n_boot", 1), ("max_rows", 1)):
            flag = f"{FLAGS[name]} ({name})" if name in FLAGS else name
            validation.integer(flag, getattr(self, name), low)
            validation.int64(flag, getattr(self, name))
        validation.seed("--seed", self.seed)


def ablate_model(model: HookedModel, settings: AblateSettings, *, data_label: str = ""
                 ) -> tuple[HeadAblation, dict[str, Any]]:
    """Choose the heads (on the even batches, for ``top``) and ablate them on the odd batches.

    Returns the result and how the heads were chosen (``{"heads": ..., "scores": ...}``)."""
    info = ModelInfo.of(model)
    check_block_fits(FLAGS["seq_len"], settings.seq_len, info)
    named = None if settings.heads is None else list(check_heads(settings.heads, info))  # before any work
    if named is not None:
        check_head_count("--heads", ",".join(f"{layer}.{head}" for layer, head in named), len(named), info)
    if settings.top is not None:
        kind, k = settings.top
        check_head_count("--top", f"{kind}:{k}", k, info)
        check_pattern_targets("--top", kind, info, settings.seq_len)
    generator = torch.Generator().manual_seed(settings.seed)
    made = [repeated_random_tokens(info, seq_len=settings.seq_len, n_sequences=settings.batch_size, generator=generator)
            for _ in range(2 * settings.batches)]
    chosen: dict[str, Any] = {}
    if settings.top is not None:
        kind, k = settings.top
        scores = head_scores(model, made[0::2], kinds=(kind,), batch_size=settings.batch_size)
        top = scores.top_heads(kind, k)
        heads = [(layer, head) for layer, head, _ in top]
        chosen = {"by": kind, "k": k, "chosen_on": "even batches", "scores": [score for _, _, score in top]}
    elif named is not None:
        heads = named
    else:  # AblateSettings holds exactly one of heads and top
        raise ConfigError("Name the heads to ablate with --heads or --top.")
    chosen["heads"] = heads
    result = head_ablation(model, heads, made[1::2], slices={SLICE: repeated_half(settings.seq_len)},
                           method=settings.method, n_draws=settings.n_draws, seed=settings.seed,
                           n_boot=settings.n_boot, max_rows=settings.max_rows,
                           data=f"repeated random tokens{data_label} (seq_len={settings.seq_len}, odd batches of "
                                f"{settings.batches}x{settings.batch_size}, seed={settings.seed})")
    return result, chosen


def format_table(rows: list[tuple[str, HeadAblation]]) -> str:
    """One line per model: heads, the loss change on the repeated half with its interval, the null's 99th
    percentile and the p-value."""
    lines = [f"{'model':<40} {'heads':<22} {'method':<8} {'loss change [95% CI]':<26} {'null q99':>9} {'p':>7}"]
    for name, result in rows:
        s = result.slices.index(SLICE)
        heads = ",".join(f"{layer}.{h}" for layer, h in result.heads)
        interval = f"{result.change[s]:+.3f} [{result.low[s]:+.3f}, {result.high[s]:+.3f}]"
        lines.append(f"{name[:40]:<40} {heads[:22]:<22} {result.method:<8} {interval:<26} "
                     f"{float(result.null_q99[s]):>9.3f} {float(result.p_value[s]):>7.4f}")
    return "\n".join(lines)


def run_ablate(model_spec: str, settings: AblateSettings, *, out: str | Path, control: bool = True,
               control_seed: int = 0, device: str = "cpu", dtype: str = "float32") -> dict[str, Any]:
    """Load ``model_spec``, ablate, print the table and write ``OUT/ablation.json`` (each result's document,
    readable back with ``probes.ProbeResult.from_document``) in the folder ``out``, which exists."""
    torch_dtype(dtype)
    check_device(device)
    model = load_any_model(model_spec, device=device, dtype=torch_dtype(dtype))
    measured = {"model": ablate_model(model, settings)}
    if control:
        measured["control"] = ablate_model(random_weight_control(model, seed=control_seed), settings,
                                           data_label=", random-weight control")
    document = {"command": {"name": "ablate", "model": model_spec, "settings": {
        **{k: v for k, v in settings.__dict__.items()}, "control": control, "device": device, "dtype": dtype}},
        **{role: {"chosen": chosen, "result": result.document()} for role, (result, chosen) in measured.items()}}
    print(format_table([(result.provenance.model, result) for result, _ in measured.values()]))
    write_json(Path(out) / RESULT_FILE, document)
    return document

