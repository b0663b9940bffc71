"""The ablation null's shared prefix: sets whose choices in the lower ablated layers coincide run those layers' blocks
once per distinct choice, with the sums of running every set through them, and fewer FLOPs (counted with
``torch.utils.flop_counter.FlopCounterMode``).

What 200 draws cost against one forward has a floor the code cannot go under: each set runs the blocks from the
deepest shared layer on and the unembedding at the slice positions (on SmolLM2-135M with heads from layer 8 and the
repeated half of 101 tokens, the unembedding alone is 20.6 forwards; benchmarks/RESULTS.md).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import probes
from probes.causal import AblationPlan, ablation, ablation_sums, head_output_means, repeated_half, z_hook
from probes.core.model_info import ModelInfo
from tests.random_checkpoints import smollm2_tokenizer

SEQ_LEN = 10

pytestmark = pytest.mark.usefixtures("one_thread")


def counted(run):
    """(FLOPs, result) of ``run()``."""
    flops = FlopCounterMode(display=False)
    with flops:
        result = run()
    return flops.get_total_flops(), result


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A random Llama (SmolLM2's architecture) of 24 layers, width 64 and a 512-token vocabulary, as a bridge."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=24, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=128, max_position_embeddings=64,
                         tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)
    config.architectures = ["LlamaForCausalLM"]
    folder = tmp_path_factory.mktemp("llama24")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(folder)
    smollm2_tokenizer().save_pretrained(folder)
    return probes.load_model(str(folder))


@pytest.fixture(scope="module")
def batches(model):
    generator = torch.Generator().manual_seed(0)
    info = ModelInfo.of(model)
    return [probes.repeated_random_tokens(info, seq_len=SEQ_LEN, n_sequences=4, generator=generator)
            for _ in range(2)]


def _null(model, batches, heads, n_draws):
    plan = AblationPlan.build(ModelInfo.of(model), heads, method="mean", n_draws=n_draws, seed=0)
    means = head_output_means(model, plan.layers, batches)
    return ablation_sums(model, plan, batches, {"repeated_half": repeated_half(SEQ_LEN)}, means=means)


def test_sets_sharing_their_lower_layers_choices_share_those_blocks_with_the_same_sums(model, batches, monkeypatch):
    heads = [(3, 0), (6, 1), (9, 2)]
    plan = AblationPlan.build(ModelInfo.of(model), heads, method="mean", n_draws=40, seed=0)
    split = ablation.shared_prefix(plan.sets, plan.layers)
    assert split is not None and split[1].shape[0] <= 16  # 4 x 4 choices in layers 3 and 6 among 41 sets
    shared_flops, shared = counted(lambda: _null(model, batches, heads, 40))
    monkeypatch.setattr(ablation, "shared_prefix", lambda sets, layers: None)
    every_flops, every = counted(lambda: _null(model, batches, heads, 40))
    # blocks 3..8 (6 of 24) run for 16 choices instead of 41 sets: about 6/24 x (1 - 16/41) of the work saved
    assert shared_flops < 0.9 * every_flops
    torch.testing.assert_close(shared.clean, every.clean, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(shared.ablated, every.ablated, rtol=1e-5, atol=1e-6)


def test_a_pass_that_runs_out_of_memory_among_shared_prefixes_leaves_no_set_out(model, batches):
    """Prefixes are taken two passes' worth at a time: after a pass ran out of memory (4 copies halved to 2), the
    next prefixes start where the last ones ended, so every set is measured and the sums are those of no failure."""
    heads = [(3, 0), (6, 1), (9, 2)]
    plan = AblationPlan.build(ModelInfo.of(model), heads, method="mean", n_draws=40, seed=0)
    means = head_output_means(model, plan.layers, batches)
    slices = {"repeated_half": repeated_half(SEQ_LEN)}
    reference = ablation_sums(model, plan, batches, slices, means=means, max_rows=4 * 4)
    failures = []

    def fail_when_wide(module, args, out):
        if out.shape[0] > 2 * 4:
            failures.append(int(out.shape[0]))
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    handle = model.hook_dict[z_hook(3)].register_forward_hook(fail_when_wide)
    try:
        halved = ablation_sums(model, plan, batches, slices, means=means, max_rows=4 * 4)
    finally:
        handle.remove()
    assert failures == [4 * 4]  # once; the half is kept for the second batch
    assert ablation.shared_prefix(plan.sets, plan.layers)[1].shape[0] > 2 * 4  # more prefixes than one step takes
    torch.testing.assert_close(halved.ablated, reference.ablated, rtol=1e-5, atol=1e-6)
