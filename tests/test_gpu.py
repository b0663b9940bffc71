"""Every command end to end on a CUDA GPU, with the same findings as on the CPU (skipped without CUDA).

A GPU machine runs these with the README's test command. They compare a GPU run with the CPU run of
the same command: ``heads`` in float32 and bfloat16 (scores within float tolerance), ``report`` on
a random-weight checkpoint in both dtypes (the same verdicts: none holds) and on the default models
in float32 (the same verdicts, numbers within 1e-3), the probe suite on one batch, and every toy
preset on a tiny setting (``tests/analyses/test_toy_device.py`` compares the fast presets' numbers).

Where the packaged weights are absent (a GPU machine they cannot be carried to), the tests that need them run on
a random-weight model of the same shape, built from the packaged config and tokenizer, and warn that they do
(``tests.random_checkpoints.packaged_or_random``; ``benchmarks/gpu_check.py`` runs this file that way).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch

import probes
from analyses.cli import main
from analyses.experiments import TOY_EXPERIMENTS, toy_experiment
from tests.random_checkpoints import make_random_checkpoint, packaged_or_random

pytestmark = [pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"), pytest.mark.slow]


@pytest.fixture(scope="session")
def smollm2_spec(tmp_path_factory) -> str:
    """``smollm2-135m``, or a random-weight checkpoint of its shape where the packaged weights are absent."""
    return packaged_or_random("smollm2-135m", tmp_path_factory.mktemp("smollm2-random"))


@pytest.fixture(scope="session")
def minilm_spec(tmp_path_factory) -> str:
    """``minilm-l6``, or a random-weight checkpoint of its shape where the packaged weights are absent."""
    return packaged_or_random("minilm-l6", tmp_path_factory.mktemp("minilm-random"))


def _report(tmp_path: Path, name: str, *extra: str) -> dict:
    out = tmp_path / name
    assert main(["report", "--fast", "--no-progress", "--out", str(out), *extra]) == 0
    return json.loads((out / "summary.json").read_text())


def _verdicts(summary: dict) -> dict[str, bool]:
    return {f"{model} {name}": finding["holds"] for model, entry in summary["pretrained"].items()
            for name, finding in entry["findings"].items()}


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_heads_on_cuda_agree_with_the_cpu(tmp_path, capsys, dtype, smollm2_spec):
    on_cpu, on_gpu = tmp_path / "cpu.json", tmp_path / "gpu.json"
    assert main(["heads", "--model", smollm2_spec, "--batches", "2", "--json", str(on_cpu)]) == 0
    assert main(["heads", "--model", smollm2_spec, "--batches", "2", "--device", "cuda", "--dtype", dtype,
                 "--json", str(on_gpu)]) == 0
    cpu = probes.ProbeResult.load(on_cpu)
    gpu = probes.ProbeResult.load(on_gpu)
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    for kind, scores in cpu.scores.items():
        assert torch.allclose(gpu.scores[kind], scores, atol=tolerance), kind
    assert gpu.provenance.device.startswith("cuda") and gpu.provenance.dtype == dtype


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_report_on_a_random_weight_checkpoint_on_cuda(tmp_path, capsys, dtype):
    folder = make_random_checkpoint("gemma2", tmp_path / "gemma2", seed=0)  # soft-capped attention
    args = ["--no-toys", "--model", str(folder)]
    cpu = _report(tmp_path, "cpu", *args)
    gpu = _report(tmp_path, f"gpu-{dtype}", *args, "--device", "cuda", "--dtype", dtype)
    assert _verdicts(gpu) == _verdicts(cpu)
    assert not any(_verdicts(gpu).values())  # random weights: nothing holds on either device


def test_report_on_the_default_models_on_cuda_matches_the_cpu(tmp_path, capsys, smollm2_spec, minilm_spec):
    models = ["--no-toys", "--model", smollm2_spec, "--model", minilm_spec]
    cpu = _report(tmp_path, "cpu", *models)
    gpu = _report(tmp_path, "gpu", *models, "--device", "cuda")
    assert _verdicts(gpu) == _verdicts(cpu)
    for model, entry in cpu["pretrained"].items():
        for name, finding in entry["findings"].items():
            value, other = finding.get("value"), gpu["pretrained"][model]["findings"][name].get("value")
            if isinstance(value, float):
                assert other == pytest.approx(value, rel=1e-3, abs=1e-4), (model, name)


def test_the_probe_suite_on_cuda_equals_the_cpu(smollm2_spec):
    smollm2 = probes.load_model(smollm2_spec)
    info = probes.ModelInfo.of(smollm2)
    tokens = torch.randint(3, 2000, (2, 256), generator=torch.Generator().manual_seed(0))
    labels = torch.randint(0, 8, (info.d_vocab,), generator=torch.Generator().manual_seed(1))

    def suite():
        return [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3),
                probes.TopicAttentionProbe(labels, n_permutations=10)]

    on_cpu = probes.run_probes(smollm2, suite(), [tokens], progress=False)
    gpu_model = probes.load_model(smollm2_spec, device="cuda")
    on_gpu = probes.run_probes(gpu_model, suite(), [tokens], progress=False)
    for a, b in zip(on_cpu, on_gpu):
        assert probes.core.result.results_close(a, b, rtol=1e-3, atol=1e-5), type(a).__name__


TINY_SETTINGS = {"train.n_steps": 20, "train.stage_steps": "2,2,2", "standard_train.n_steps": 20,
                 "n_train": 32, "n_val": 16, "probe_sequences": 8,                           # induction
                 "joint.n_steps": 10, "uniform.n_steps": 10, "fixed_value.n_steps": 10,
                 "two_stage.n_steps": 20, "standard.n_steps": 20, "data.n_documents": 128,  # topic (standard: both)
                 "eval_sequences": 16, "wikitext.train.epochs": 1, "wikitext.train.max_steps": 20}  # scansnap


def _has_setting(config, key: str) -> bool:
    """Whether the (dotted) ``key`` names a field of ``config`` or of one of its sections."""
    for name in key.split("."):
        if not dataclasses.is_dataclass(config) or name not in {f.name for f in dataclasses.fields(config)}:
            return False
        config = getattr(config, name)
    return True


@pytest.mark.parametrize("toy, preset", [(toy, preset) for toy in sorted(TOY_EXPERIMENTS)
                                         for preset in toy_experiment(toy).PRESETS])
def test_every_toy_preset_runs_on_cuda(tmp_path, capsys, toy, preset):
    settings = [f"{key}={value}" for key, value in TINY_SETTINGS.items()
                if _has_setting(toy_experiment(toy).PRESETS[preset], key)]
    out = tmp_path / f"{toy}-{preset}"
    argv = ["toy", toy, "--preset", preset, "--device", "cuda", "--no-progress", "--out", str(out)]
    assert main([*argv, *(arg for setting in settings for arg in ("--set", setting))]) == 0
    assert json.loads((out / "summary.json").read_text())["settings"]["device"] == "cuda"


def test_long_sequences_from_reductions_on_cuda_equal_whole_patterns_in_less_memory(smollm2_spec):
    model = probes.load_model(smollm2_spec, device="cuda", dtype=torch.bfloat16)
    info = probes.ModelInfo.of(model)
    tokens = torch.randint(3, 2000, (1, 4096), generator=torch.Generator().manual_seed(0)).cuda()
    labels = torch.randint(0, 8, (info.d_vocab,), generator=torch.Generator().manual_seed(1))

    def run(budget):
        suite = [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3), probes.TopicAttentionProbe(labels)]
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        results = probes.run_probes(model, suite, [tokens], progress=False, max_pattern_bytes=budget)
        return results, torch.cuda.max_memory_allocated() - base

    whole, whole_peak = run(None)
    blocks, blocks_peak = run(0)
    for a, b in zip(whole, blocks):
        assert probes.core.result.results_close(a, b, rtol=2e-2, atol=1e-3), type(a).__name__
    assert blocks_peak < whole_peak / 2
