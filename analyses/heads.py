"""``mechprobe heads``: head scores of a model, printed as a table and written as JSON."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from analyses.cli_checks import check_block_fits, check_pattern_name, check_pattern_targets, first_repeated
from analyses.output_paths import check_not_read
from analyses.paper_result import write_json
from analyses.pretrained.passages import passage_patterns
from analyses.toy_model_loader import load_any_model
from mechprobe.validation import real_path
from probes import (
    HEAD_SCORE_KINDS,
    HeadScores,
    ModelInfo,
    TokenBatch,
    head_pattern,
    head_scores,
    repeated_random_tokens,
)
from probes.core.atomic import atomic_write_text
from probes.core.errors import ConfigError, InputError
from probes.core.loading import check_device, torch_dtype
from probes.core.model_kind import HookedModel
from probes.display.views import heatmap_view, page, pattern_view


def heads_document(result: HeadScores, model_name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of ``mechprobe heads``: ``ProbeResult.save``'s document with the tensors inline
    (``probes.ProbeResult.load(PATH)`` reads it back), plus the command that made it under ``command``."""
    first = next(iter(result.scores.values()))
    return {**result.document(), "command": {"name": "heads", "model": model_name, "n_layers": int(first.shape[0]),
                                             "n_heads": int(first.shape[1]), "settings": settings}}


def _check_output(flag: str, path: str, example: str) -> None:
    target = Path(path)
    real_path(flag, target)
    if target.is_dir():
        raise InputError(f"{flag} {path} is a folder; give a file path such as {target / example}.")
    if target.parent.exists() and not target.parent.is_dir():
        raise InputError(f"Cannot write {path}: {target.parent} is a file, not a folder. Choose another {flag} path.")
    if not target.parent.is_dir():
        raise InputError(
            f"Cannot write {path}: the folder {target.parent} does not exist. Create it first or choose another "
            f"{flag} path."
        )


def heads_page(model: HookedModel, result: HeadScores, tokens: TokenBatch, model_name: str, top: int = 2) -> str:
    """A standalone page: a hover-able layer x head map per kind, and the ``top`` heads of each kind
    attending on the first scored sequence (hover a token to see where it attends)."""
    views = [heatmap_view(f"{model_name}: {kind}", table.tolist(), chance=result.chance[kind])
             for kind, table in result.scores.items()]
    heads = {f"{kind} #{rank + 1}": (layer, head) for kind in result.scores
             for rank, (layer, head, _) in enumerate(result.top_heads(kind, top))}
    passage = passage_patterns(model, tokens, heads, max_tokens=tokens.shape[1])
    for name, pattern in passage.patterns.items():
        layer, head = passage.heads[name]
        views.append(pattern_view(f"{name}: L{layer}H{head} on [BOS] X X", passage.tokens, pattern))
    return page(f"mechprobe heads: {model_name}", views)


def format_top_heads(result: HeadScores, top: int) -> str:
    """A plain-text table of the ``top`` heads of each kind with the chance level."""
    lines = []
    for kind in result.scores:
        lines.append(f"{kind} (chance {result.chance[kind]:.3f})")
        lines.append(f"  {'rank':>4}  {'layer':>5}  {'head':>4}  {'score':>6}")
        for rank, (layer, head, score) in enumerate(result.top_heads(kind, top), start=1):
            lines.append(f"  {rank:>4}  {layer:>5}  {head:>4}  {score:>6.3f}")
    return "\n".join(lines)


def run_heads(model_spec: str, *, seq_len: int, batches: int, batch_size: int, seed: int,
              json_path: str | None, top: int, progress: bool, device: str = "cpu",
              dtype: str = "float32", kinds: tuple[str, ...] = HEAD_SCORE_KINDS,
              html_path: str | None = None) -> dict[str, Any]:
    """Load ``model_spec``, score its heads on repeated random tokens, print and optionally save.

    Every setting is checked before the model loads; the context length is checked once it has.
    """
    for flag, value, low, what in (("--seq-len", seq_len, 2, "seq_len, the length of the repeated block"),
                                   ("--batches", batches, 1, "the number of batches"),
                                   ("--batch-size", batch_size, 1, "sequences per batch"),
                                   ("--top", top, 1, "heads printed per kind")):
        if value < low:
            raise ConfigError(f"{flag} ({what}) must be >= {low}; got {value}.")
    for kind in kinds:
        check_pattern_name("--pattern", kind)  # unknown names fail before the model loads
    twice = first_repeated([head_pattern(kind).name for kind in kinds])
    if twice is not None:
        earlier = next(kind for kind in kinds if head_pattern(kind).name == head_pattern(kinds[twice]).name)
        raise ConfigError(f"--pattern {kinds[twice]} is the pattern --pattern {earlier} names: it would be scored "
                          f"twice; give each pattern once.")
    torch_dtype(dtype)
    check_device(device)
    for flag, path, example in (("--json", json_path, "heads.json"), ("--html", html_path, "heads.html")):
        if path is not None:
            _check_output(flag, path, example)
            check_not_read(flag, path, "--model", model_spec)
    model = load_any_model(model_spec, device=device, dtype=torch_dtype(dtype))
    check_block_fits("--seq-len", seq_len, ModelInfo.of(model))
    for kind in kinds:
        check_pattern_targets("--pattern", kind, ModelInfo.of(model), seq_len)
    result = head_scores(model, kinds=kinds, seq_len=seq_len, n_batches=batches, batch_size=batch_size, seed=seed,
                         progress=progress)
    settings = {"protocol": "repeated_random_tokens", "seq_len": seq_len, "batches": batches,
                "batch_size": batch_size, "seed": seed, "kinds": list(kinds), "device": device,
                "dtype": dtype}
    document = heads_document(result, model_spec, settings)
    print(f"{model_spec}: {document['command']['n_layers']} layers x {document['command']['n_heads']} heads, "
          f"{result.provenance.n_sequences} sequences of [BOS] X X with |X| = {seq_len}")
    print(format_top_heads(result, top))
    if json_path is not None:
        write_json(json_path, document)
        print(f"wrote {json_path}")
    if html_path is not None:
        first = repeated_random_tokens(ModelInfo.of(model), seq_len=seq_len, n_sequences=batch_size,
                                       generator=torch.Generator().manual_seed(seed))
        atomic_write_text(html_path, heads_page(model, result, first, model_spec))
        print(f"wrote {html_path}")
    return document
