"""Random weights, edge by edge: on random-weight checkpoints of GPT-NeoX, Gemma2 and RoBERTa (built from configs),
the edge from the best previous-token head of layer 0 to the best induction head of layer 1 (chosen on other
batches) holds through none of the keys, queries and values, on either effect, against random edges of its shape
and the model's own random-weight control."""

from __future__ import annotations

import pytest
import torch

from mechprobe import forward
from probes import ModelInfo, head_scores, load_model, random_weight_control, repeated_random_tokens
from probes.causal import EDGE_INPUTS, edge_effect, repeated_half
from tests.random_checkpoints import RANDOM_CHECKPOINT_KINDS, make_random_checkpoint

SEQ_LEN = 12

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
@pytest.mark.parametrize("kind", RANDOM_CHECKPOINT_KINDS)
def test_no_edge_holds_on_a_random_weight_checkpoint(kind, tmp_path):
    model = load_model(make_random_checkpoint(kind, tmp_path / kind, seed=3))
    control = random_weight_control(model, seed=0)
    info = ModelInfo.of(model)
    generator = torch.Generator().manual_seed(0)
    made = [repeated_random_tokens(info, seq_len=SEQ_LEN, n_sequences=2, generator=generator) for _ in range(6)]
    scores = head_scores(model, made[0::2], kinds=("previous_token", "induction"), batch_size=2)
    sender = max(((0, h) for h in range(info.n_heads)), key=lambda head: float(scores.scores["previous_token"][head]))
    receiver = max(((1, h) for h in range(info.n_heads)), key=lambda head: float(scores.scores["induction"][head]))
    verdicts = {}
    for kind_of_input in EDGE_INPUTS:
        measured = [edge_effect(on, sender, receiver, made[1::2], slice_fn=repeated_half(SEQ_LEN), input=kind_of_input,
                                method="mean", n_draws=100, n_boot=200) for on in (model, control)]
        for effect in measured[0].effects:
            verdicts[(kind_of_input, effect)] = measured[0].finding(effect, measured[1])
    held = {key: finding for key, finding in verdicts.items() if finding.verdict == "holds"}
    assert not held, (kind, held)


@pytest.mark.slow
@pytest.mark.parametrize("kind", RANDOM_CHECKPOINT_KINDS)
def test_the_receiver_inputs_the_edges_patch_feed_its_attention(kind, tmp_path):
    """What the receiver pass relies on: a value put in at ``hook_q``, ``hook_k`` or ``hook_v`` changes the head's
    output (a bridge that only reported them would give every edge a zero effect)."""
    model = load_model(make_random_checkpoint(kind, tmp_path / kind, seed=3))
    tokens = repeated_random_tokens(ModelInfo.of(model), seq_len=SEQ_LEN, n_sequences=2,
                                    generator=torch.Generator().manual_seed(1)).tokens
    seen = {}

    def keep(name):
        return "blocks.1.attn.hook_z", lambda z, hook: seen.__setitem__(name, z.clone())

    forward.run(model, tokens, fwd_hooks=[keep("clean")])
    for kind_of_input in EDGE_INPUTS:
        forward.run(model, tokens, fwd_hooks=[(f"blocks.1.attn.hook_{kind_of_input}", lambda x, hook: 2 * x + 1),
                                              keep(kind_of_input)])
        assert not torch.allclose(seen[kind_of_input], seen["clean"], atol=1e-4), (kind, kind_of_input)
