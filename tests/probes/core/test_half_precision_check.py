"""The once-per-model check that decides between reductions and whole patterns holds in half precision.

At 32,768 tokens the Llama-3.2-1B shape (32 heads, 8 KV heads, d_model 2048) in bfloat16 ran out of a 139 GB GPU:
the check compared its reductions with ``hook_pattern`` in bfloat16 at a fixed 1e-2, which bfloat16's own rounding
exceeds (0.0101 at the third layer of a random-weight model; the eager pattern and the fused kernel round
differently and the two forwards drift apart with depth), so the runner fell back to whole ``[T, T]`` patterns
(64 GiB a layer). The ledger of tensor bytes cannot see this (it is a numerical comparison, on data); this test does:
the same attention shape in bfloat16 on the CPU (narrow MLP, four layers), its queries scaled so that attention is as
sharp as a trained model's (there bfloat16 differs from float32 by up to 0.8), checked in float32 now.
"""

from __future__ import annotations

import contextlib
import tempfile

import pytest
import torch

from probes.core import attention_rows, reductions_check
from probes.core.model_info import ModelInfo
from tests.random_checkpoints import smollm2_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def sharp_llama_1b_attention():
    """A 4-layer bfloat16 Llama with Llama-3.2-1B's attention (2048 wide, 32 heads, 8 KV heads), MLP 256 wide,
    query weights x16."""
    from transformer_lens.model_bridge import TransformerBridge
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaForCausalLM

    tokenizer = smollm2_tokenizer()
    config = LlamaConfig(hidden_size=2048, intermediate_size=256, num_hidden_layers=4, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=len(tokenizer), rope_theta=500000.0,
                         max_position_embeddings=2048, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    folder = tempfile.mkdtemp(prefix="mechprobe-llama1b-attention-")
    config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        hf = LlamaForCausalLM._from_config(config, dtype=torch.bfloat16)
    with torch.no_grad():
        for layer in hf.model.layers:
            layer.self_attn.q_proj.weight *= 16
    bridge = TransformerBridge.boot_transformers(folder, hf_model=hf, tokenizer=tokenizer, device="cpu",
                                                 dtype=torch.bfloat16)
    bridge.eval()
    return bridge


def _tokens() -> torch.Tensor:
    return torch.randint(3, 49152, (1, 48), generator=torch.Generator().manual_seed(0))


def test_a_standard_bfloat16_model_passes_the_check_and_keeps_its_weights(sharp_llama_1b_attention):
    model = sharp_llama_1b_attention
    assert ModelInfo.of(model).n_heads == 32
    before = {name: tensor.clone() for name, tensor in [*model.named_parameters(), *model.named_buffers()]}
    with torch.inference_mode():  # as the runner calls it
        assert reductions_check.reductions_match_hook_pattern(model, _tokens())
    after = dict([*model.named_parameters(), *model.named_buffers()])
    for name, tensor in before.items():
        assert after[name].dtype == tensor.dtype and torch.equal(after[name], tensor), name
        assert not after[name].is_inference(), name  # still trainable after a check under inference_mode


def test_in_half_precision_the_same_comparison_fails(sharp_llama_1b_attention, monkeypatch):
    """The comparison the check used to make: bfloat16 against bfloat16 (no room for the float32 copy)."""

    @contextlib.contextmanager
    def no_room(model):
        yield False

    monkeypatch.setattr(reductions_check, "_in_float32", no_room)
    assert not reductions_check.reductions_match_hook_pattern(sharp_llama_1b_attention, _tokens())


def test_the_check_still_refuses_attention_that_moves_rows(sharp_llama_1b_attention, monkeypatch):
    """Keys scaled by 1.1 inside the reductions only (as a bias the reductions do not see would): refused."""
    correct = attention_rows.reduced_attention_forward

    def biased(module, query, key, value, attention_mask, **kwargs):
        return correct(module, query, key * 1.1, value, attention_mask, **kwargs)

    monkeypatch.setattr(attention_rows, "reduced_attention_forward", biased)
    assert not reductions_check.reductions_match_hook_pattern(sharp_llama_1b_attention, _tokens())
