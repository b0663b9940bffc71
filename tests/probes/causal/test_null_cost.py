"""What the ablation null costs beside one forward pass, counted (not timed) on the CPU: FLOPs
(``torch.utils.flop_counter.FlopCounterMode``) and aten operator calls (a dispatch mode; on a GPU each is a launch of
about 5 microseconds), for 200 random head sets against one bare forward over the same batches. And the sets whose
choices in the lower ablated layers coincide share those layers' blocks, with the sums of running every set
through them.

The FLOP ratio has a floor the code cannot go under: each set runs the blocks from the deepest shared layer on and
the unembedding at the slice positions, so 200 sets cost at least 200 x (those blocks' share of a forward + the
slice positions' share of the unembedding). The shape here (24 layers, a 512-token vocabulary, heads in the top
three layers) puts that floor near 11x; on SmolLM2-135M with heads from layer 8 and the repeated half of 101
tokens the unembedding alone is 20.6x (benchmarks/RESULTS.md).
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

import probes
from probes.causal import AblationPlan, ablation, ablation_sums, head_output_means, repeated_half
from probes.core.model_info import ModelInfo
from tests.random_checkpoints import smollm2_tokenizer

SEQ_LEN = 10

pytestmark = pytest.mark.usefixtures("one_thread")


class OperatorCalls(TorchDispatchMode):
    """Counts the aten operator calls made inside it, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def counted(run) -> tuple[int, int]:
    """(FLOPs, operator calls) of ``run()``."""
    calls, flops = OperatorCalls(), FlopCounterMode(display=False)
    with flops, calls:
        run()
    return flops.get_total_flops(), sum(calls.calls.values())


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


def test_the_200_draw_null_costs_at_most_20_forwards_in_flops_and_operator_calls(model, batches):
    def bare():
        with torch.inference_mode():
            for batch in batches:
                model(batch.tokens)

    bare()  # warm-up
    bare_flops, bare_calls = counted(bare)
    null_flops, null_calls = counted(lambda: _null(model, batches, [(21, 0), (22, 1), (23, 2)], 200))
    print(f"FLOPs {null_flops / bare_flops:.1f}x, operator calls {null_calls / bare_calls:.1f}x")
    assert null_flops / bare_flops <= 20, (null_flops / bare_flops, null_calls / bare_calls)
    assert null_calls / bare_calls <= 20, (null_flops / bare_flops, null_calls / bare_calls)


def test_sets_sharing_their_lower_layers_choices_share_those_blocks_with_the_same_sums(model, batches, monkeypatch):
    heads = [(3, 0), (6, 1), (9, 2)]
    plan = AblationPlan.build(ModelInfo.of(model), heads, method="mean", n_draws=40, seed=0)
    split = ablation.shared_prefix(plan.sets, plan.layers)
    assert split is not None and split[1].shape[0] <= 16  # 4 x 4 choices in layers 3 and 6 among 41 sets
    shared = _null(model, batches, heads, 40)
    monkeypatch.setattr(ablation, "shared_prefix", lambda sets, layers: None)
    every = _null(model, batches, heads, 40)
    torch.testing.assert_close(shared.clean, every.clean, rtol=1e-6, atol=1e-9)
    torch.testing.assert_close(shared.ablated, every.ablated, rtol=1e-5, atol=1e-6)
