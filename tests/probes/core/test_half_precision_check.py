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

    monkeypatch.setattr(reductions_check, "_float32_while_running", no_room)
    monkeypatch.setattr(reductions_check, "_in_float32", no_room)
    assert not reductions_check.reductions_match_hook_pattern(sharp_llama_1b_attention, _tokens())


def test_the_check_holds_one_layers_weights_in_float32_at_a_time(sharp_llama_1b_attention, monkeypatch):
    """On an H200 at de21b09 the check's float32 copy of every weight was the suite's whole peak on the Llama-1B
    shape (4,845 MiB at 8k and 32k tokens, the bare forward 802 MiB at 8k). Now a decoder layer's weights are float32
    while it runs, the embedding's rows are cast (its table is not copied) and the head's table is float32 while the
    logits are made."""
    model = sharp_llama_1b_attention

    def whole_copy(model):
        raise AssertionError("the whole-model float32 copy was taken")

    monkeypatch.setattr(reductions_check, "_in_float32", whole_copy)
    seen: list[int] = []

    def count(module, args):
        seen.append(sum(t.numel() * 4 for t in model.parameters() if t.dtype == torch.float32))

    table = model.original_model.model.embed_tokens.weight.numel() * 4
    head = sum(t.numel() * 4 for t in model.unembed.parameters())  # the tied table (and, on TL 3.9, a zero bias)
    layer = sum(t.numel() * 4 for t in model.original_model.model.layers[0].parameters())
    whole = sum(t.numel() * 4 for t in model.parameters())
    handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
    try:
        with torch.inference_mode():
            assert reductions_check.reductions_match_hook_pattern(model, _tokens())
    finally:
        handle.remove()
    assert max(seen) == head and table <= head < whole * 3 / 4  # the tied head, while it runs
    assert sorted(set(seen))[-2] <= layer < whole / 10  # otherwise one layer at most
    assert all(t.dtype == torch.bfloat16 for t in model.parameters())


def test_a_weight_read_outside_its_layers_call_takes_the_whole_copy(sharp_llama_1b_attention, monkeypatch):
    """A module reading another layer's weight directly meets it in bfloat16 beside float32 inputs: the check then
    copies every weight, and still passes."""
    model = sharp_llama_1b_attention
    layers = model.original_model.model.layers
    down = layers[1].mlp.down_proj.original_component
    elsewhere = layers[2].mlp.up_proj.original_component.weight

    def reads_another_layer(x):  # down_proj's own product, with layer 2's weight read (and discarded) on the way
        _ = x @ elsewhere
        return torch.nn.functional.linear(x, down.weight)

    monkeypatch.setattr(down, "forward", reads_another_layer)
    taken = []
    whole = reductions_check._in_float32

    @contextlib.contextmanager
    def spy(model):
        taken.append(True)
        with whole(model) as upcast:
            yield upcast

    monkeypatch.setattr(reductions_check, "_in_float32", spy)
    with torch.inference_mode():
        assert reductions_check.reductions_match_hook_pattern(model, _tokens())
    assert taken == [True]
    assert all(t.dtype == torch.bfloat16 for t in model.parameters())


def test_the_check_still_refuses_attention_that_moves_rows(sharp_llama_1b_attention, monkeypatch):
    """Keys scaled by 1.1 inside the reductions only (as a bias the reductions do not see would): refused."""
    correct = attention_rows.reduced_attention_forward

    def biased(module, query, key, value, attention_mask, **kwargs):
        return correct(module, query, key * 1.1, value, attention_mask, **kwargs)

    monkeypatch.setattr(attention_rows, "reduced_attention_forward", biased)
    assert not reductions_check.reductions_match_hook_pattern(sharp_llama_1b_attention, _tokens())
