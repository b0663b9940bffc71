"""Every command end to end on each device: the CPU always (CI runs it), a CUDA GPU where there is one.

Each test runs the same argv and settings on both devices (``tests.devices.DEVICES``), so the argv a GPU
machine runs is the argv CI runs every day and cannot rot unseen. On the CPU a test checks what one device can:
the command exits 0, its output records the device and dtype, and invariants of its numbers (attention
scores are fractions in [0, 1], nothing holds on a random-weight checkpoint). On CUDA it also compares the
numbers with the CPU run of the same argv (run once per module and shared by the CPU case: no work is
doubled): ``heads`` in float32 and bfloat16 (scores within float tolerance), ``report`` on a random-weight
checkpoint in both dtypes (the same verdicts: none holds) and on the default models (the same verdicts,
numbers within 1e-3), the probe suite on one batch, and every toy preset on a tiny setting (the fast presets'
numbers: ``tests/analyses/test_toy_device.py``).

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
from analyses.config_overrides import apply_overrides, refuse_unused
from analyses.experiments import toy_experiment
from analyses.toy_registry import toy_names
from tests.devices import DEVICES, NO_CUDA
from tests.random_checkpoints import make_random_checkpoint, packaged_or_random

pytestmark = pytest.mark.device_twin  # on a CPU machine: the CPU halves, which CI runs with make test-exhaustive

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def smollm2_spec(tmp_path_factory) -> str:
    """``smollm2-135m``, or a random-weight checkpoint of its shape where the packaged weights are absent."""
    return packaged_or_random("smollm2-135m", tmp_path_factory.mktemp("smollm2-random"))


@pytest.fixture(scope="session")
def minilm_spec(tmp_path_factory) -> str:
    """``minilm-l6``, or a random-weight checkpoint of its shape where the packaged weights are absent."""
    return packaged_or_random("minilm-l6", tmp_path_factory.mktemp("minilm-random"))


def _run(argv: list[str], capsys) -> None:
    """``mechprobe *argv``, which must exit 0 (else the error it printed is the failure's message)."""
    code = main(argv)
    assert code == 0, capsys.readouterr().err[-2000:]


def _report(out: Path, capsys, *extra: str) -> dict:
    _run(["report", "--fast", "--no-progress", "--out", str(out), *extra], capsys)
    return json.loads((out / "summary.json").read_text())


def _verdicts(summary: dict) -> dict[str, bool]:
    return {f"{model} {name}": finding["holds"] for model, entry in summary["pretrained"].items()
            for name, finding in entry["findings"].items()}


# -- heads ---------------------------------------------------------------------------------------
def _heads(out: Path, capsys, spec: str, device: str, dtype: str) -> probes.ProbeResult:
    _run(["heads", "--model", spec, "--batches", "2", "--device", device, "--dtype", dtype, "--json", str(out)],
         capsys)
    return probes.ProbeResult.load(out)


@pytest.fixture(scope="module")
def cpu_heads(tmp_path_factory, smollm2_spec) -> probes.ProbeResult:
    """``heads`` on the CPU in float32: the case ``cpu-float32`` itself, and what every other case is compared with."""
    out = tmp_path_factory.mktemp("heads") / "cpu-float32.json"
    assert main(["heads", "--model", smollm2_spec, "--batches", "2", "--device", "cpu", "--dtype", "float32",
                 "--json", str(out)]) == 0
    return probes.ProbeResult.load(out)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_heads_agree_with_the_cpu_in_float32(tmp_path, capsys, device, dtype, smollm2_spec, cpu_heads):
    if (device, dtype) == ("cpu", "float32"):
        result = cpu_heads
    else:
        result = _heads(tmp_path / "heads.json", capsys, smollm2_spec, device, dtype)
    assert result.provenance.device.startswith(device) and result.provenance.dtype == dtype
    tolerance = 1e-4 if dtype == "float32" else 3e-2
    assert sorted(result.scores) == sorted(cpu_heads.scores)
    for kind, scores in cpu_heads.scores.items():
        assert float(result.scores[kind].min()) >= 0 and float(result.scores[kind].max()) <= 1 + 1e-6, kind
        assert torch.allclose(result.scores[kind], scores, atol=tolerance), kind


# -- report --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gemma2(tmp_path_factory) -> str:
    """A tiny random-weight Gemma2 (soft-capped attention)."""
    return str(make_random_checkpoint("gemma2", tmp_path_factory.mktemp("gemma2") / "gemma2", seed=0))


@pytest.fixture(scope="module")
def cpu_random_report(tmp_path_factory, gemma2) -> dict:
    """The report on ``gemma2`` on the CPU in float32 (the case ``cpu-float32`` itself)."""
    out = tmp_path_factory.mktemp("report") / "cpu-float32"
    assert main(["report", "--fast", "--no-progress", "--out", str(out), "--no-toys", "--model", gemma2,
                 "--device", "cpu", "--dtype", "float32"]) == 0
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_report_on_a_random_weight_checkpoint_holds_nothing(tmp_path, capsys, device, dtype, gemma2,
                                                           cpu_random_report):
    if (device, dtype) == ("cpu", "float32"):
        summary = cpu_random_report
    else:
        summary = _report(tmp_path / "report", capsys, "--no-toys", "--model", gemma2, "--device", device,
                          "--dtype", dtype)
    assert (summary["settings"]["device"], summary["settings"]["dtype"]) == (device, dtype)
    verdicts = _verdicts(summary)
    assert len(verdicts) >= 10 and not any(verdicts.values())  # random weights: nothing holds, on any device
    assert verdicts == _verdicts(cpu_random_report)


# The default models' report, with the same settings on both devices: 4 text batches per model, a small LDA, a
# short null, no control model, no head ablations, no circuit edge and no linear probes. The report's own --fast costs
# about 10 minutes on CI's CPU (7 of them SmolLM2's ablations and control), too long for a twin that runs there every
# day.
# The sections left out are compared between the devices by the random-weight report above (every section) and by
# benchmarks/gpu_check.py (report --fast on the device and on the CPU, verdicts compared); the CPU runs --fast on
# the default models in tests/analyses/pretrained/test_pretrained_report.py.
DEFAULT_MODELS_SETTINGS = ("--max-batches", "4", "--no-control", *(arg for setting in (
    "max_documents=600", "topics.passes=2", "topics.chunk_words=0", "topics.no_below=5", "topics.held_out_fraction=0",
    "pretrained.protocol_batches=4", "pretrained.n_permutations=200", "pretrained.n_boot=200",
    "pretrained.causal.enabled=false", "pretrained.circuit.enabled=false", "linear.enabled=false")
    for arg in ("--set", setting)))


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_report_on_the_default_models_matches_the_cpu(tmp_path, capsys, device, smollm2_spec, minilm_spec):
    argv = ["--no-toys", "--model", smollm2_spec, "--model", minilm_spec, *DEFAULT_MODELS_SETTINGS]
    summary = _report(tmp_path / device, capsys, *argv, "--device", device)
    assert summary["settings"]["device"] == device and summary["settings"]["pretrained"]["max_batches"] == 4
    assert sorted(summary["pretrained"]) == sorted([smollm2_spec, minilm_spec])
    for entry in summary["pretrained"].values():  # the text and protocol findings only, each with its p-value
        assert len(entry["findings"]) == 7 and not any(name.endswith("_causal") or "composition" in name
                                                         for name in entry["findings"])
        p_values = [f["p_value"] for f in entry["findings"].values() if isinstance(f.get("p_value"), float)]
        assert p_values and all(0 <= p <= 1 for p in p_values)
    if device == "cpu":
        return  # one device: nothing to compare with
    cpu = _report(tmp_path / "cpu", capsys, *argv, "--device", "cpu")
    assert _verdicts(summary) == _verdicts(cpu)
    for model, entry in cpu["pretrained"].items():
        for name, finding in entry["findings"].items():
            value, other = finding.get("value"), summary["pretrained"][model]["findings"][name].get("value")
            if isinstance(value, float):
                assert other == pytest.approx(value, rel=1e-3, abs=1e-4), (model, name)


# -- the probe suite -----------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
def test_the_probe_suite_on_each_device_equals_the_cpu(device, smollm2_spec):
    half = torch.randint(3, 2000, (2, 128), generator=torch.Generator().manual_seed(0))
    tokens = torch.cat([half, half], dim=1)  # repeated: induction targets on the second half

    def suite(model):
        labels = torch.randint(0, 8, (probes.ModelInfo.of(model).d_vocab,), generator=torch.Generator().manual_seed(1))
        return [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3),
                probes.TopicAttentionProbe(labels, n_permutations=10)]

    model = probes.load_model(smollm2_spec, device=device)
    info = probes.ModelInfo.of(model)
    results = probes.run_probes(model, suite(model), [tokens], progress=False)
    heads, induction, topic = results
    shape = (info.n_layers, info.n_heads)
    tables = [*heads.scores.values(), induction.scores, *topic.mean.values()]  # attention fractions, per head
    assert all(t.shape == shape and float(t.min()) >= 0 and float(t.max()) <= 1 + 1e-6 for t in tables)
    assert heads.rows == 2 * 256 and heads.rows_with_target["induction"] >= 2 * 127 and induction.rows_with_target > 0
    assert topic.null_mean["same_topic"].shape == (10, *shape)
    assert all(r.provenance.device.startswith(device) for r in results)
    if device == "cpu":
        return  # one device: nothing to compare with
    cpu_model = probes.load_model(smollm2_spec)
    for a, b in zip(probes.run_probes(cpu_model, suite(cpu_model), [tokens], progress=False), results):
        assert probes.core.result.results_close(a, b, rtol=1e-3, atol=1e-5), type(a).__name__


# -- the toy presets -----------------------------------------------------------------------------
# Each toy preset's tiny settings: only settings the preset uses. `--set` refuses a setting a preset does not use
# (the induction toy's staged presets run train.stage_steps, its joint ones train.n_steps, its standard one
# standard_train), so a refused setting planted here fails test_every_toy_preset_runs on the CPU in CI, and at once
# test_the_tiny_settings_are_ones_each_preset_uses; a preset added without a row fails the latter too.
_INDUCTION = ("n_train=32", "n_val=16", "probe_sequences=8", "data.seq_len=20", "eval_seq_lens=(10,)",
              "eval_alphas=(1.0,)", "early_step=3")
_SCANSNAP = ("train.n_steps=20", "eval_sequences=16", "standard.n_steps=5", "standard.d_model=8")
_TOPIC = ("lda.n_topics=3", "lda.words_per_topic=4", "lda.min_len=12", "lda.max_len=16", "data.n_documents=128",
          "model.d_model=8", "joint.n_steps=10", "uniform.n_steps=5", "fixed_value.n_steps=5", "two_stage.n_steps=20",
          *(f"{stage}.batch_size=16" for stage in ("joint", "uniform", "fixed_value", "two_stage", "standard")),
          "record_every=5", "eval_documents=16")
TINY_SETTINGS: dict[str, dict[str, tuple[str, ...]]] = {
    "induction": {"paper": (*_INDUCTION, "train.n_steps=20"), "staged": (*_INDUCTION, "train.stage_steps=2,2,2"),
                  "full": (*_INDUCTION, "train.n_steps=20"), "fast": (*_INDUCTION, "train.stage_steps=2,2,2"),
                  "standard": (*_INDUCTION, "standard_train.n_steps=20")},
    "scansnap": {"paper": _SCANSNAP, "fast": _SCANSNAP, "adam": _SCANSNAP,
                 "sweep": (*_SCANSNAP, "sweep.num_last=1", "sweep.eta_z=1.0", "sweep.ratio=1.0,2.0", "sweep.seeds=1"),
                 "wikitext": ("eval_sequences=16", "wikitext.max_vocab=500", "wikitext.d_model=16", "wikitext.d_mlp=16",
                              "wikitext.train.epochs=1", "wikitext.train.max_steps=20", "wikitext.snapshot_every=10",
                              "wikitext.probe_windows=50", "wikitext.queries=10", "wikitext.keys=20")},
    "topic": {"paper": _TOPIC, "fast": _TOPIC},
}
TOY_PRESETS = [(toy, preset) for toy in sorted(toy_names()) for preset in toy_experiment(toy).PRESETS]


def _tiny_config(toy: str, preset: str):
    """The preset with its tiny settings, refused (:class:`ConfigError`) as ``mechprobe toy`` refuses them: a
    setting the preset has not, or one it does not use."""
    config = apply_overrides(toy_experiment(toy).PRESETS[preset], list(TINY_SETTINGS[toy][preset]))
    if hasattr(config, "unused_settings"):
        refuse_unused(config.unused_settings(), TINY_SETTINGS[toy][preset], where=f"the {toy} toy's {preset} preset")
    return config


@pytest.mark.parametrize("toy, preset", TOY_PRESETS)
def test_the_tiny_settings_are_ones_each_preset_uses(toy, preset):
    assert sorted(TINY_SETTINGS[toy]) == sorted(toy_experiment(toy).PRESETS), f"a {toy} preset has no tiny settings"
    _tiny_config(toy, preset)


@pytest.mark.slow
@pytest.mark.parametrize("toy, preset", TOY_PRESETS)
@pytest.mark.parametrize("device", DEVICES)
def test_every_toy_preset_runs(tmp_path, capsys, device, toy, preset):
    wikitext = REPO_ROOT / _tiny_config(toy, preset).wikitext.train_text if preset == "wikitext" else None
    if wikitext is not None and not wikitext.is_file():
        pytest.skip(f"the scansnap wikitext preset trains on {wikitext}, absent here")
    out = tmp_path / f"{toy}-{preset}"
    settings = [arg for setting in TINY_SETTINGS[toy][preset] for arg in ("--set", setting)]
    _run(["toy", toy, "--preset", preset, "--device", device, "--no-progress", "--out", str(out), *settings], capsys)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["settings"]["device"] == device
    assert summary["settings"] == json.loads(json.dumps(dataclasses.asdict(
        dataclasses.replace(_tiny_config(toy, preset), device=device))))  # every tiny setting took effect


# -- long sequences ------------------------------------------------------------------------------
# CUDA only: its memory claim reads torch.cuda.max_memory_allocated. Its CPU twins: the meta-tensor cost ledger's
# test in tests/analyses/plan/ (the suite's peak at the GPU's shapes, through the CUDA branch, on meta tensors) and
# tests/probes/core/test_query_blocks.py (query blocks give whole patterns' results).
@NO_CUDA
@pytest.mark.slow
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
