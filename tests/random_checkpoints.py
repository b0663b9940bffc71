"""Tiny random-weight Hugging Face checkpoints of three architectures, built offline from configs.

Each checkpoint is ``AutoModel*.from_config(config)`` (the architecture's own ``_init_weights``,
seeded) saved with ``save_pretrained`` next to the SmolLM2 tokenizer, so ``probes.load_model(folder)``
boots it as a ``TransformerBridge``. No finding of a probe should hold on them: they are the
"can be false" half of the validity tests.

Sizes are tiny (2 layers, 4 heads, d_model 64, d_mlp 128, context 512); the vocabulary is the
SmolLM2 tokenizer's (49152 tokens, 49153 for the encoder, which adds ``<mask>``). Building one
takes well under a second once the packaged SmolLM2 has been converted into the mechprobe cache.

Special tokens: the causal checkpoints keep SmolLM2's (BOS ``<|im_start|>`` = 1, EOS = PAD
``<|im_end|>`` = 2). The encoder uses RoBERTa's id layout on SmolLM2's first three tokens:
BOS/CLS ``<|endoftext|>`` = 0, PAD ``<|im_start|>`` = 1, EOS/SEP ``<|im_end|>`` = 2, plus a new
``<mask>`` = 49152. RoBERTa numbers positions from ``pad_token_id + 1`` and treats every PAD id as
padding, so PAD must not be a token that appears in real input (SmolLM2's own PAD is its EOS) and
``pad_token_id = 1`` keeps TransformerLens's RoBERTa adapter (two reserved position rows) exact.

Example::

    folder = make_random_checkpoint("roberta", tmp_path / "roberta", seed=0)
    model = probes.load_model(folder)
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

N_LAYERS = 2
N_HEADS = 4
D_MODEL = 64
D_MLP = 128
N_CTX = 512


@dataclass(frozen=True)
class RandomCheckpointKind:
    """One architecture of tiny random checkpoint: its kind name, HF class name and direction."""

    kind: str
    architecture: str
    causal: bool


RANDOM_CHECKPOINTS: dict[str, RandomCheckpointKind] = {
    "gpt_neox": RandomCheckpointKind("gpt_neox", "GPTNeoXForCausalLM", causal=True),
    "gemma2": RandomCheckpointKind("gemma2", "Gemma2ForCausalLM", causal=True),
    "llama": RandomCheckpointKind("llama", "LlamaForCausalLM", causal=True),
    "roberta": RandomCheckpointKind("roberta", "RobertaForMaskedLM", causal=False),
}
RANDOM_CHECKPOINT_KINDS: tuple[str, ...] = ("gpt_neox", "gemma2", "roberta")
"""The kinds the validity tests run on; ``llama`` (SmolLM2's architecture) is there for a test that needs a fourth."""

# RoBERTa's layout of the first special ids, on SmolLM2's first three tokens (see module docstring).
ENCODER_SPECIAL_TOKENS = {
    "bos_token": "<|endoftext|>",  # 0, also CLS
    "cls_token": "<|endoftext|>",
    "pad_token": "<|im_start|>",  # 1
    "eos_token": "<|im_end|>",  # 2, also SEP
    "sep_token": "<|im_end|>",
    "unk_token": "<|endoftext|>",
    "mask_token": "<mask>",  # new: 49152
}


def smollm2_tokenizer() -> Any:
    """A fresh copy of the packaged SmolLM2 tokenizer, so callers may change it freely.

    Read from the mechprobe cache when SmolLM2 has been converted there, else straight from the
    packaged GGUF (a few seconds, without the ~10 s conversion of the weights); loaded once per process.
    """
    return copy.deepcopy(_smollm2_tokenizer_once())


@functools.lru_cache(maxsize=1)
def _smollm2_tokenizer_once() -> Any:
    from transformers import AutoTokenizer

    from probes.core.loading import PACKAGED_MODELS, _package_dir, cache_dir

    entry = PACKAGED_MODELS["smollm2-135m"]
    converted = cache_dir() / "models" / entry.short_name
    if (converted / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(converted)
    return AutoTokenizer.from_pretrained(_package_dir(entry), gguf_file=entry.gguf_file)


def _encoder_tokenizer() -> Any:
    tokenizer = smollm2_tokenizer()
    tokenizer.add_special_tokens({"mask_token": ENCODER_SPECIAL_TOKENS["mask_token"]})
    for name, token in ENCODER_SPECIAL_TOKENS.items():
        setattr(tokenizer, name, token)
    # Saved as "<cls> text <sep>" (RoBERTa's framing). TransformerLens reloads the tokenizer with
    # add_bos_token=True, which rebuilds the template without the SEP; probes add SEP themselves.
    tokenizer.add_bos_token = True
    tokenizer.add_eos_token = True
    return tokenizer


def _config(kind: str, vocab_size: int, tokenizer: Any) -> Any:
    from transformers import Gemma2Config, GPTNeoXConfig, LlamaConfig, RobertaConfig

    ids = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id,
           "pad_token_id": tokenizer.pad_token_id}
    if kind == "gpt_neox":
        return GPTNeoXConfig(
            vocab_size=vocab_size, hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            intermediate_size=D_MLP, max_position_embeddings=N_CTX, tie_word_embeddings=False, **ids,
        )
    if kind == "gemma2":
        head_dim = D_MODEL // N_HEADS
        return Gemma2Config(
            vocab_size=vocab_size, hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            num_key_value_heads=2, head_dim=head_dim, query_pre_attn_scalar=head_dim, intermediate_size=D_MLP,
            max_position_embeddings=N_CTX, sliding_window=N_CTX, **ids,
        )
    if kind == "llama":  # SmolLM2's architecture: grouped-query attention, rotary positions
        return LlamaConfig(
            vocab_size=vocab_size, hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            num_key_value_heads=2, intermediate_size=D_MLP, max_position_embeddings=N_CTX, tie_word_embeddings=True,
            **ids,
        )
    if kind == "roberta":
        return RobertaConfig(
            vocab_size=vocab_size, hidden_size=D_MODEL, num_hidden_layers=N_LAYERS, num_attention_heads=N_HEADS,
            intermediate_size=D_MLP, type_vocab_size=1,
            # RoBERTa numbers positions pad_token_id + 1, ..., so the table needs that many extra rows.
            max_position_embeddings=N_CTX + tokenizer.pad_token_id + 1, **ids,
        )
    raise ValueError(f"kind must be one of {tuple(RANDOM_CHECKPOINTS)}; got {kind!r}.")


def make_random_checkpoint(kind: str, folder: Path, seed: int = 0) -> Path:
    """Save a tiny random-weight checkpoint of ``kind`` (one of RANDOM_CHECKPOINTS) in ``folder``.

    The weights are the architecture's own initialisation under ``torch.manual_seed(seed)`` (the
    caller's RNG state is restored afterwards); the same kind and seed give the same weights.
    Returns ``folder``, ready for ``probes.load_model(folder)``.

    Example: ``make_random_checkpoint("gpt_neox", tmp_path / "neox")``.
    """
    if kind not in RANDOM_CHECKPOINTS:
        raise ValueError(f"kind must be one of {tuple(RANDOM_CHECKPOINTS)}; got {kind!r}.")
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    spec = RANDOM_CHECKPOINTS[kind]
    tokenizer = smollm2_tokenizer() if spec.causal else _encoder_tokenizer()
    config = _config(kind, len(tokenizer), tokenizer)
    config.architectures = [spec.architecture]
    auto_class = AutoModelForCausalLM if spec.causal else AutoModelForMaskedLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = auto_class.from_config(config, dtype=torch.float32)
    if type(model).__name__ != spec.architecture:  # a transformers release that maps the config elsewhere
        raise RuntimeError(f"{kind}: from_config built {type(model).__name__}, expected {spec.architecture}.")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    log.info("Saved a random %s (seed %d, %d parameters) in %s", spec.architecture, seed,
             sum(p.numel() for p in model.parameters()), folder)
    return folder


WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")


def packaged_weights_present(spec: str) -> bool:
    """Whether ``probes.load_model(spec)`` finds the packaged model's weights on this machine (no conversion run)."""
    from probes.core.loading import PACKAGED_MODELS, cache_dir

    entry = PACKAGED_MODELS[spec]
    if entry.gguf_file is not None and (cache_dir() / "models" / entry.short_name / "model.safetensors").is_file():
        return True
    return importlib.util.find_spec(entry.package) is not None


def packaged_shape_dir(spec: str) -> Path:
    """The packaged model's config and tokenizer without weights: ``cache_dir()/models/<spec>`` (what
    ``benchmarks/gpu_check.py --pack-configs`` writes), else the installed package's own folder."""
    from probes.core.loading import PACKAGED_MODELS, _package_dir, cache_dir, converted_gguf_dir

    entry = PACKAGED_MODELS[spec]
    cached = cache_dir() / "models" / entry.short_name
    if (cached / "config.json").is_file() and (cached / "tokenizer_config.json").is_file():
        return cached
    if importlib.util.find_spec(entry.package) is None:
        raise FileNotFoundError(
            f"Neither {spec}'s package ({entry.install}) nor its config and tokenizer in {cached} are here. On a "
            f"machine with the package run `python benchmarks/gpu_check.py --pack-configs DIR`, carry DIR and set "
            f"MECHPROBE_CACHE=DIR (benchmarks/README.md)."
        )
    return converted_gguf_dir(entry) if entry.gguf_file is not None else _package_dir(entry) / (entry.subdir or "")


def same_shape_random_checkpoint(spec: str, folder: Path, seed: int = 0) -> Path:
    """Save a random-weight checkpoint of packaged model ``spec``'s exact shape (its config and tokenizer, the
    architecture's own seeded initialisation) in ``folder``; return ``folder`` for ``probes.load_model``.

    Example: ``same_shape_random_checkpoint("smollm2-135m", tmp_path / "smollm2-random")``.
    """
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoTokenizer

    source = packaged_shape_dir(spec)
    config = AutoConfig.from_pretrained(source)
    causal = any(name.endswith("ForCausalLM") for name in config.architectures or ())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = (AutoModelForCausalLM if causal else AutoModel).from_config(config, dtype=torch.float32)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    log.info("Saved a random-weight %s of %s's shape (seed %d) in %s", type(model).__name__, spec, seed, folder)
    return folder


def packaged_or_random(spec: str, folder: Path, seed: int = 0) -> str:
    """``spec`` when its packaged weights are here, else a :func:`same_shape_random_checkpoint` in ``folder``
    (with a warning that says so): tests that need the weights still run where they cannot be carried."""
    if packaged_weights_present(spec):
        return spec
    warnings.warn(f"{spec}: packaged weights absent; running on a random-weight model of the same shape",
                  stacklevel=2)
    return str(same_shape_random_checkpoint(spec, folder, seed))
