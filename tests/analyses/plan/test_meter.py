"""The meter counts what a real run allocates and computes: on a tiny Llama, the same pass on real CPU tensors and on
``meta`` tensors gives the same peak of live bytes, the same operator calls, kernels and FLOPs, and the FLOPs are
``FlopCounterMode``'s; the CPU twins answer data reads on ``meta``; plain SDPA takes CUDA's kernels on ``meta``."""

from __future__ import annotations

import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from analyses.plan.cuda_sdpa import cuda_sdpa
from analyses.plan.meter import Meter, flop_counter
from analyses.plan.routes import EDGE_DRAWS, RUNNERS, draw_tokens
from analyses.plan.shapes import meta_models
from analyses.plan.twins import CpuTwins
from probes.core.attention_rows import kernels_for

N_POS = 64
TINY = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 512,
        "rope_theta": 10000.0, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": 2}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny-llama")
    (folder / "config.json").write_text(json.dumps(TINY), encoding="utf-8")
    torch.manual_seed(0)
    return {device: meta_models(str(folder), n_pos=N_POS, dtype=torch.float32, device=device)
            for device in ("cpu", "meta")}


def metered(models, route: str, device_type: str, flops: FlopCounterMode | None = None) -> Meter:
    """``route`` on ``models`` under the meter, the reductions on the CPU's kernels (real CPU tensors cannot run
    CUDA's), the twins answering reads on meta; the tokens are on the model's device before the meter starts (on
    the CPU they need no copy)."""
    meter = Meter(device_type=device_type, n_pos=N_POS)
    layers = models.bare.layers if route == "bare" else models.bridge.blocks
    with kernels_for("cpu"), CpuTwins():
        tokens = draw_tokens(models, N_POS, 2).to(device_type)
        with flops or flop_counter(), meter, meter.attribute_layers(layers):
            if route == "bare":
                with torch.inference_mode():
                    models.bare(input_ids=tokens)
            else:
                RUNNERS[route](models, tokens)
    return meter


@pytest.mark.parametrize("route", ["bridge", "suite", "suite-patterns"])
def test_a_meta_pass_counts_what_the_real_cpu_pass_allocates_and_computes(tiny, route):
    real, meta = metered(tiny["cpu"], route, "cpu"), metered(tiny["meta"], route, "meta")
    assert real.peak_bytes > 0
    assert meta.peak_bytes == real.peak_bytes
    # reads of values and copies to the host: a meta (GPU) pass copies to the CPU what a CPU pass already has
    moved = {"item", "_local_scalar_dense", "is_nonzero", "to", "_to_copy"}
    assert {op: n for op, n in meta.op_counts().items() if op not in moved} == \
        {op: n for op, n in real.op_counts().items() if op not in moved}
    assert sum(n for op, n in meta.op_counts().items() if op in moved) <= \
        sum(n for op, n in real.op_counts().items() if op in moved) + 10
    for layer in range(2):  # inside the layers nothing is read back
        assert meta.calls[layer].device == real.calls[layer].device
        extra = meta.calls[layer].kernels - real.calls[layer].kernels  # copies to the device: none on the CPU
        assert real.calls[layer].kernels - meta.calls[layer].kernels == {}
        assert all(flops == 0 for flops, _ in extra) and sum(extra.values()) <= 2
    assert {layer: dict(calls.attention) for layer, calls in meta.calls.items()} == \
        {layer: dict(calls.attention) for layer, calls in real.calls.items()}
    assert meta.flops == real.flops > 0
    assert [(a.nbytes, a.shape, a.op) for a in meta.largest] == [(a.nbytes, a.shape, a.op) for a in real.largest]


@pytest.mark.parametrize("route", ["bare", "bridge", "suite"])
def test_the_meters_flops_are_flop_counter_modes_on_real_tensors(tiny, route):
    counter = flop_counter()  # FlopCounterMode, the CPU flash kernel counted as CUDA's
    meter = metered(tiny["cpu"], route, "cpu", flops=counter)
    assert meter.flops == counter.get_total_flops() > 0


def test_the_peak_is_the_largest_sum_of_live_tensors_and_views_count_once():
    meter = Meter(device_type="cpu")
    with meter:
        a = torch.ones(1000)  # 4,000 bytes
        view = a[10:20].view(2, 5)  # no new storage
        b = torch.ones(500) * 2  # 2,000 more: ones, then the product (the ones freed at once)
        del a, view
        c = torch.ones(250)  # 1,000 after 4,000 were freed
    assert meter.peak_bytes == 4000 + 2000 + 2000
    assert meter.live_bytes == 2000 + 1000
    assert meter.largest[0].nbytes == 4000 and meter.largest[0].shape == (1000,)
    del b, c


def test_the_twins_read_data_on_meta_from_the_cpu():
    tokens = torch.tensor([[5, 7, 5, 9, 5]])
    weights = torch.ones(5, device="meta")  # made before the twins: no values, as a model's weights
    with CpuTwins() as twins:
        on_meta = tokens.to("meta")
        same = on_meta == 5
        assert bool(same.any()) and not bool((on_meta > 100).any())
        assert same.nonzero().shape == (3, 2) and same.nonzero().device.type == "meta"
        assert int(on_meta.max()) == 9
        assert on_meta[same].shape == (3,)
        assert torch.equal((on_meta * 2).cpu(), tokens * 2)
        assert bool(torch.allclose(weights, weights))  # no values: assumed, and logged
        assert (weights + 1).cpu().shape == (5,)
    assert sum(twins.assumed.values()) == 2


def test_plain_sdpa_takes_cudas_kernels_on_meta():
    q = torch.empty(1, 4, 128, 64, dtype=torch.bfloat16, device="meta")
    kv = torch.empty(1, 2, 128, 64, dtype=torch.bfloat16, device="meta")
    meter = Meter(n_pos=128)
    with cuda_sdpa(), meter:
        torch.nn.functional.scaled_dot_product_attention(q, kv, kv, is_causal=True, enable_gqa=True)
        torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=torch.ones(128, 128, dtype=torch.bool,
                                                                                        device="meta"))
    assert dict(meter.calls[None].attention) == {"flash": 1, "efficient": 1}
    assert meter.largest[0].nbytes < 128 * 128 * 4 * 4  # no [head, T, T] scores


def test_grouped_key_value_heads_count_the_flops_of_full_heads_where_torchs_counter_refuses_them(monkeypatch):
    """torch 2.11's ``sdpa_flop_count`` asserts on grouped key / value heads (the GQA flash call of the Llama shapes):
    on the H200 at de21b09 the ledger's plan failed on it. The meter counts them as full heads, on any torch."""
    import torch.utils.flop_counter as counters

    counted = counters.sdpa_flop_count

    def strict(query_shape, key_shape, value_shape):  # the older counter's check
        assert query_shape[1] == key_shape[1], "sdpa_flop_count: query/key/value shapes are incompatible"
        return counted(query_shape, key_shape, value_shape)

    monkeypatch.setattr(counters, "sdpa_flop_count", strict)
    q = torch.empty(1, 4, 128, 64, dtype=torch.bfloat16, device="meta")
    grouped = torch.empty(1, 2, 128, 64, dtype=torch.bfloat16, device="meta")
    meters = {"grouped": Meter(n_pos=128), "full": Meter(n_pos=128)}
    with cuda_sdpa(), meters["grouped"]:
        torch.nn.functional.scaled_dot_product_attention(q, grouped, grouped, is_causal=True, enable_gqa=True)
    with cuda_sdpa(), meters["full"]:
        torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    assert dict(meters["grouped"].calls[None].attention) == {"flash": 1}
    assert meters["grouped"].flops == meters["full"].flops == 2 * 2 * 4 * 128 * 128 * 64


def test_the_edge_route_counts_the_flops_of_the_real_cpu_pass_and_its_null_runs_no_loss(tiny):
    """The report's circuit edge on meta (grouped as on CUDA: more random edges per pass than the CPU's token cap
    allows, so a larger peak) does the real CPU pass's FLOPs; its null is measured on the receiver's score alone,
    so the 100 random edges cost less than 100 passes from the receiver's layer to the loss would."""
    real, meta = metered(tiny["cpu"], "edge", "cpu"), metered(tiny["meta"], "edge", "meta")
    assert meta.flops == real.flops > 0
    bridge = metered(tiny["cpu"], "bridge", "cpu")
    assert real.flops < EDGE_DRAWS * bridge.flops / 2
