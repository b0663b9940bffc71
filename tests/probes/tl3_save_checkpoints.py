"""Run under TransformerLens 3.9 (``PYTHONPATH=.venv-tl3``) by the cross-generation parity test: builds two
``HookedTransformer`` models from configs, saves them as 3.x users do, and writes their head scores and logits.

``python -m tests.probes.tl3_save_checkpoints OUT`` writes into OUT:
- ``planted.pt``: ``{"config": cfg.to_dict(), "state_dict": ...}`` of the planted previous-token/induction model;
- ``full.pt`` and ``full.json``: the state dict of a randomly initialised 2-layer model with LayerNorm and a GELU MLP,
  and its config as JSON (``json.dump(cfg.to_dict(), f, default=str)``);
- ``gqa/``: a folder with ``config.json`` and ``model.pth`` of a model with grouped-query attention (4 query heads,
  2 key/value heads), RMSNorm and a gated SiLU MLP;
- ``reference.pt``: for each, the head scores per kind ([layer head]) and the logits on fixed tokens.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import torch

import probes
from probes.core.model_kind import has_hooked_transformer

SCORE_ARGS = {"seq_len": 10, "n_batches": 2, "batch_size": 8, "seed": 0}


def fixed_tokens(d_vocab: int) -> torch.Tensor:
    """The tokens whose logits are compared: two rows of 12 tokens drawn with seed 7."""
    return torch.randint(0, d_vocab, (2, 12), generator=torch.Generator().manual_seed(7))


def full_model(**options):
    """A randomly initialised 2-layer model (LayerNorm and a GELU MLP unless ``options`` say otherwise) with random
    biases and norm weights."""
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    cfg = HookedTransformerConfig(**{"n_layers": 2, "d_model": 32, "n_ctx": 24, "d_head": 8, "n_heads": 4,
                                     "d_vocab": 20, "d_mlp": 64, "act_fn": "gelu", "normalization_type": "LN",
                                     "seed": 3} | options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(cfg)
    with torch.no_grad():  # non-zero biases and LayerNorm weights, so that every converted tensor matters
        generator = torch.Generator().manual_seed(4)
        for name, parameter in model.named_parameters():  # (a gated MLP's biases stay zero, as in Llama-style models)
            if name.split(".")[-1].startswith(("b", "w")) and not (cfg.gated_mlp and ".mlp.b_" in name):
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def main(out: Path) -> None:
    from tests.probes.test_hooked_transformer import planted_hooked_transformer

    assert has_hooked_transformer(), "run this under TransformerLens 3.x (PYTHONPATH=.venv-tl3)"
    out.mkdir(parents=True, exist_ok=True)
    planted, full = planted_hooked_transformer(), full_model()
    torch.save({"config": planted.cfg.to_dict(), "state_dict": planted.state_dict()}, out / "planted.pt")
    torch.save(full.state_dict(), out / "full.pt")
    (out / "full.json").write_text(json.dumps(full.cfg.to_dict(), default=str), encoding="utf-8")
    gqa = full_model(n_key_value_heads=2, normalization_type="RMS", gated_mlp=True, act_fn="silu", seed=5)
    (out / "gqa").mkdir()
    torch.save(gqa.state_dict(), out / "gqa" / "model.pth")
    (out / "gqa" / "config.json").write_text(json.dumps(gqa.cfg.to_dict(), default=str), encoding="utf-8")
    reference = {}
    for name, model in (("planted", planted), ("full", full), ("gqa", gqa)):
        scores = probes.head_scores(model, **SCORE_ARGS)
        with torch.no_grad():
            logits = model(fixed_tokens(model.cfg.d_vocab))
        reference[name] = {"scores": dict(scores.scores), "logits": logits}
    torch.save(reference, out / "reference.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
