"""A stand-in Hugging Face hub cache holding Pythia-style revisions of a tiny random-weight GPT-NeoX.

The layout is the hub cache's own (``models--ORG--NAME/refs/REV`` holds a commit id, ``snapshots/COMMIT/`` the
files), so ``transformers`` resolves ``from_pretrained(NAME, revision=REV)`` from it offline exactly as it does a
real download: the code path of a real Pythia series. :func:`use_stand_in_hub` points ``huggingface_hub`` at it
(its cache folder is read when a file is looked up); a subprocess gets the same with ``HF_HUB_CACHE``.

The model is a 2-layer GPT-NeoX (4 heads, d_model 32, context 128) over a 256-word word-level tokenizer (BOS = EOS
= PAD = 0), so a revision loads and is measured in about a second. Each revision's weights are the architecture's
own initialisation under its own seed: a series of them has no event.

Example::

    hub = make_stand_in_hub(tmp_path / "hub", {"step0": 0, "step512": 1, "step1000": 2})
    use_stand_in_hub(monkeypatch, hub)
    probes.load_model("EleutherAI/pythia-70m@revision=step512")
"""

from __future__ import annotations

from pathlib import Path

import torch

REPO = "EleutherAI/pythia-70m"
N_WORDS = 256


def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<|endoftext|>", "<unk>"] + [f"w{i}" for i in range(N_WORDS - 2)]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>",
                                   unk_token="<unk>", pad_token="<|endoftext|>")


def save_tiny_neox(folder: Path, seed: int) -> Path:
    """A random-weight tiny GPT-NeoX (``seed``) and its tokenizer saved in ``folder`` by ``save_pretrained``."""
    from transformers import AutoModelForCausalLM, GPTNeoXConfig

    config = GPTNeoXConfig(vocab_size=N_WORDS, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=128, tie_word_embeddings=False,
                           bos_token_id=0, eos_token_id=0, pad_token_id=0)
    config.architectures = ["GPTNeoXForCausalLM"]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def make_stand_in_hub(cache: Path, revisions: dict[str, int], repo: str = REPO) -> Path:
    """A hub cache in ``cache`` holding ``repo`` at each revision (name -> weight seed); returns ``cache``."""
    root = cache / f"models--{repo.replace('/', '--')}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    for index, (revision, seed) in enumerate(revisions.items()):
        commit = f"{index + 1:040x}"
        save_tiny_neox(root / "snapshots" / commit, seed)
        (root / "refs" / revision).write_text(commit)
    return cache


def use_stand_in_hub(monkeypatch, cache: Path) -> None:
    """Make this process's hub lookups read ``cache`` (offline)."""
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
