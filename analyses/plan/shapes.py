"""Model shapes the ledger runs at, and their models built on ``meta`` weights (no memory, no data).

A named shape is a Llama-architecture config (SmolLM2-135M, Llama-3.2-1B, Llama-3.1-8B); a local folder with a
Hugging Face ``config.json`` is read as it is. :func:`meta_models` builds the ``ForCausalLM`` model under
``torch.device("meta")`` in the given dtype, boots a TransformerBridge over it (``boot_transformers`` with
``hf_model=`` and ``device="meta"`` needs no real tensor: the bridge wraps the modules it is given), and the
bare body (``AutoModel``, SDPA attention, no LM head) the same way. Token ids stay real CPU tensors: everything
that reads them does so on the CPU before they are moved to the model's device. The bridge needs a tokenizer;
the packaged SmolLM2 tokenizer serves every shape (token ids are drawn below its 49,152).
"""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from probes.core.errors import ConfigError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NamedShape:
    """A Llama-architecture shape (the width, depth and vocabulary; weights are never read)."""

    name: str
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_mlp: int
    d_vocab: int
    rope_theta: float
    tie_embeddings: bool

    def config_dict(self) -> dict[str, Any]:
        return {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": self.d_model,
                "intermediate_size": self.d_mlp, "num_hidden_layers": self.n_layers,
                "num_attention_heads": self.n_heads, "num_key_value_heads": self.n_kv_heads,
                "vocab_size": self.d_vocab, "rope_theta": self.rope_theta, "tie_word_embeddings": self.tie_embeddings,
                "bos_token_id": 1, "eos_token_id": 2}


SHAPES = {
    "smollm2-135m": NamedShape("smollm2-135m", 30, 576, 9, 3, 1536, 49152, 1e5, True),
    "llama-3.2-1b": NamedShape("llama-3.2-1b", 16, 2048, 32, 8, 8192, 128256, 5e5, True),
    "llama-3.1-8b": NamedShape("llama-3.1-8b", 32, 4096, 32, 8, 14336, 128256, 5e5, False),
}
"""The named shapes (published configs of HuggingFaceTB/SmolLM2-135M, meta-llama/Llama-3.2-1B and
meta-llama/Llama-3.1-8B; the 8B's rope scaling is left out, it changes no cost)."""

ALIASES = {"smollm2": "smollm2-135m", "llama1b": "llama-3.2-1b", "llama-1b": "llama-3.2-1b",
           "llama8b": "llama-3.1-8b", "llama-8b": "llama-3.1-8b"}
TOKENIZER_VOCAB = 49152


@dataclass
class MetaModels:
    """The bridge and the bare body of one shape on ``meta`` weights, and what they were built from."""

    name: str
    bridge: Any
    bare: Any
    config: Any
    dtype: torch.dtype

    @property
    def n_layers(self) -> int:
        return int(self.config.num_hidden_layers)

    def weight_bytes(self) -> int:
        """Bytes of the bridge's parameters and buffers, each storage once (tied embeddings count once)."""
        seen: dict[int, int] = {}
        for tensor in [*self.bridge.parameters(), *self.bridge.buffers()]:
            seen.setdefault(id(tensor.untyped_storage()), tensor.untyped_storage().nbytes())
        return sum(seen.values())

    def draw_vocab(self) -> int:
        """Token ids are drawn below this (the tokenizer's and the model's vocabulary)."""
        return min(TOKENIZER_VOCAB, int(self.config.vocab_size))


def shape_config(spec: str) -> tuple[str, dict[str, Any]]:
    """``(name, config dict)`` of a named shape (or alias) or of a folder holding ``config.json``;
    :class:`ConfigError` otherwise."""
    key = ALIASES.get(spec.lower(), spec.lower())
    if key in SHAPES:
        return key, SHAPES[key].config_dict()
    folder = Path(spec).expanduser()
    if (folder / "config.json").is_file():
        try:
            config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ConfigError(f"--model {spec}: {folder / 'config.json'} is not valid JSON ({error}).") from None
        if not isinstance(config, dict) or "model_type" not in config:
            raise ConfigError(f"--model {spec}: {folder / 'config.json'} is not a Hugging Face config (no "
                              f"model_type).")
        return folder.name, config
    raise ConfigError(f"--model {spec!r}: not a named shape ({', '.join(SHAPES)}) nor a folder with a config.json. "
                      f"Give one of the names, or the folder of a Hugging Face checkpoint.")


def packaged_tokenizer() -> Any:
    """The packaged SmolLM2 tokenizer (from the mechprobe cache once converted, else from its GGUF file)."""
    from transformers import AutoTokenizer

    from probes.core.loading import PACKAGED_MODELS, _package_dir, cache_dir

    entry = PACKAGED_MODELS["smollm2-135m"]
    converted = cache_dir() / "models" / entry.short_name
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    return AutoTokenizer.from_pretrained(_package_dir(entry), gguf_file=entry.gguf_file)


def meta_models(spec: str, *, n_pos: int, dtype: torch.dtype = torch.bfloat16, n_layers: int | None = None,
                device: str = "meta") -> MetaModels:
    """The bridge (eager attention, as TransformerLens boots it) and the bare SDPA body of ``spec`` on ``meta``
    weights, with a context of at least ``n_pos``; ``n_layers`` overrides the depth. ``device="cpu"`` builds the
    same models with random weights on the CPU (the tests compare the meter's numbers on both)."""
    name, settings = shape_config(spec)
    if ALIASES.get(spec.lower(), spec.lower()) in SHAPES:
        return _built(name, settings, n_pos=n_pos, dtype=dtype, n_layers=n_layers, device=device)
    try:  # a folder's config.json: built on meta weights before any measuring
        return _built(name, settings, n_pos=n_pos, dtype=dtype, n_layers=n_layers, device=device)
    except Exception as error:  # transformers and torch raise ValueError, TypeError, RuntimeError... for a damaged one
        path = Path(spec).expanduser() / "config.json"
        reason = (str(error).splitlines() or [""])[0]
        raise ConfigError(f"--model {spec}: {path} does not describe a model that can be built ({type(error).__name__}"
                          f": {reason}): it is damaged; save the checkpoint again (model.save_pretrained), or give "
                          f"a named shape ({', '.join(SHAPES)}).") from None


def _built(name: str, settings: dict[str, Any], *, n_pos: int, dtype: torch.dtype, n_layers: int | None,
           device: str) -> MetaModels:
    """:func:`meta_models` of the shape ``name`` whose Hugging Face config is ``settings``."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    settings = {key: value for key, value in settings.items() if key not in ("transformers_version", "dtype",
                                                                              "torch_dtype", "quantization_config")}
    if n_layers is not None:
        settings["num_hidden_layers"] = n_layers
    settings["max_position_embeddings"] = max(int(settings.get("max_position_embeddings", 0) or 0), n_pos, 2048)
    model_type = settings.pop("model_type")
    config = AutoConfig.for_model(model_type, **settings)
    tokenizer = packaged_tokenizer()
    with tempfile.TemporaryDirectory(prefix=f"mechprobe-plan-{name}-") as folder:
        config.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        with torch.device(device):
            hf = AutoModelForCausalLM.from_config(config, dtype=dtype)
        bridge = TransformerBridge.boot_transformers(folder, hf_model=hf, tokenizer=tokenizer, device=device,
                                                     dtype=dtype)
    bridge.eval()
    sdpa = AutoConfig.for_model(model_type, **settings, attn_implementation="sdpa")
    with torch.device(device):
        bare = AutoModel.from_config(sdpa, dtype=dtype)
    bare.eval()
    return MetaModels(name, bridge, bare, config, dtype)
