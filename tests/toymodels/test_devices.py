"""Toy models take a ``device``; nothing in their forward passes or checkpoint restores assumes the CPU.

No GPU is needed: PyTorch's ``meta`` device stands in for one. A meta tensor meeting a CPU tensor in an
operation raises, so a forward pass that builds a tensor on an implicit CPU device fails here as it would on
CUDA. (Meta tensors hold no values, so the losses themselves, which read values, are covered by the CUDA test
in tests/analyses/test_toy_device.py.)
"""

from __future__ import annotations

import warnings

import pytest
import torch

from mechprobe.forward import model_device
from toymodels.induction import FullInductionModel, SimplifiedInductionConfig, SimplifiedInductionModel
from toymodels.scansnap.data import CooccurrenceConfig, CooccurrenceData
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.scansnap.training import TwoRateConfig, make_two_rate_optimizers, train_on_cooccurrence
from toymodels.topic.model import TopicModel, TopicModelConfig
from toymodels.training import Checkpointer

BUILDERS = {
    "topic": lambda device: TopicModel(TopicModelConfig(d_vocab=14, n_words=12, pad_id=13, words_per_topic=4,
                                                        d_model=8), device=device),
    "scansnap": lambda device: YZTransformer(YZModelConfig(d_vocab=14, init="linear"), device=device),
    "simplified": lambda device: SimplifiedInductionModel(SimplifiedInductionConfig(), device=device),
    "full": lambda device: FullInductionModel(SimplifiedInductionConfig(), device=device),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_models_are_built_on_the_device_and_run_there(name, monkeypatch):
    on_meta = BUILDERS[name]("meta")
    assert model_device(on_meta) == torch.device("meta") and model_device(BUILDERS[name]("cpu")).type == "cpu"
    assert {p.device.type for p in on_meta.parameters()} == {"meta"}
    tokens = torch.randint(0, 3, (2, 10)).to("meta")
    if name in ("simplified", "full"):
        monkeypatch.setattr(on_meta, "_check", lambda tokens: None)  # its id-range check reads values
    output = on_meta(tokens)  # any tensor made on the CPU inside would raise here
    assert output.device.type == "meta" and output.shape[:2] == (2, 10)


def test_expected_attention_takes_cpu_inputs_on_any_device():
    data = CooccurrenceData(CooccurrenceConfig())
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab), device="meta")
    expected = model.expected_attention(data.fact_last, data.context_probs)
    assert expected.device.type == "meta" and expected.shape == data.context_probs.shape


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_checkpoint_restores_onto_the_models_device(tmp_path, optimizer):
    """Saved on the CPU, restored into a model elsewhere: optimiser states follow the parameters."""
    data = CooccurrenceData(CooccurrenceConfig())
    config = TwoRateConfig(n_steps=2, batch_size=4, optimizer=optimizer)
    checkpointer = Checkpointer(tmp_path, every=1)
    train_on_cooccurrence(YZTransformer(YZModelConfig(d_vocab=data.d_vocab)), data, config, checkpointer=checkpointer)
    model = YZTransformer(YZModelConfig(d_vocab=data.d_vocab), device="meta")
    optimizers = make_two_rate_optimizers(model, config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "copying into a meta parameter is a no-op"
        step, _ = checkpointer.restore(model, optimizers, torch.Generator())
    assert step == 2
    if optimizer == "sgd":  # MomentumSGD
        states = [buffer for o in optimizers for buffer in o.buffers]
    else:  # torch.optim.Adam keeps its step counter on the CPU by design
        states = [v for o in optimizers for s in o.state.values() for k, v in s.items() if k != "step"]
    assert len(states) == (2 if optimizer == "sgd" else 4)
    assert {t.device.type for t in states} == {"meta"}
