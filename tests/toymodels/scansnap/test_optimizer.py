"""MomentumSGD: the same updates as torch.optim.SGD, state dicts interchangeable, no torch._dynamo import."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from toymodels.errors import ToyConfigError
from toymodels.scansnap.training import MomentumSGD


def _grads(params, step):
    generator = torch.Generator().manual_seed(step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=generator)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_updates_equal_torch_sgd_bit_for_bit(momentum):
    ours = [torch.nn.Parameter(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)))]
    theirs = [torch.nn.Parameter(ours[0].detach().clone())]
    mine, reference = MomentumSGD(ours, lr=0.7, momentum=momentum), torch.optim.SGD(theirs, lr=0.7, momentum=momentum)
    for step in range(5):
        mine.zero_grad(set_to_none=True)
        reference.zero_grad(set_to_none=True)
        _grads(ours, step)
        _grads(theirs, step)
        mine.step()
        reference.step()
        assert torch.equal(ours[0], theirs[0])
    # state dicts load into each other and continue identically
    swapped = MomentumSGD(theirs, lr=0.7, momentum=momentum)
    swapped.load_state_dict(reference.state_dict())
    reference.load_state_dict(mine.state_dict())
    _grads(ours, 9)
    _grads(theirs, 9)
    mine.step()
    swapped.step()
    assert torch.equal(ours[0], theirs[0])
    assert mine.param_groups[0]["lr"] == 0.7 and mine.param_groups[0]["momentum"] == momentum


def test_frozen_parameters_only_is_an_error():
    with pytest.raises(ToyConfigError, match="trainable"):
        MomentumSGD([torch.nn.Parameter(torch.zeros(2), requires_grad=False)], lr=1.0)


@pytest.mark.slow
def test_training_the_yz_model_never_imports_torch_dynamo():
    code = ("import sys, torch\n"
            "from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData\n"
            "from toymodels.scansnap.model import YZModelConfig, YZTransformer\n"
            "from toymodels.scansnap.training import TwoRateConfig, train_on_cooccurrence\n"
            "data = CooccurrenceData(CooccurrenceConfig(seq_len=16))\n"
            "train_on_cooccurrence(YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=16)), data,\n"
            "                      TwoRateConfig(n_steps=2, batch_size=4))\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"
