"""The induction toy as a checkpoint series (Chen et al. 2024: the layer-1 copier and the layer-2 classifier):
``series_checkpoints`` saves the standard toy at log-spaced steps with its settings, ``dynamics`` measures copier and
classifier per checkpoint (held-out heads, uniform-attention nulls), finds both events and judges "copier forms
before classifier" in the Finding schema; random-weight checkpoints of the toy give no event that holds."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import pytest
import torch

from analyses.cli import main
from analyses.config_overrides import apply_overrides
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.figures import plot_series_together
from analyses.dynamics.run import run_dynamics, toy_settings
from analyses.dynamics.toy_measure import _uniform_copier_mass, induction_toy_points
from analyses.induction.config import PRESETS
from analyses.induction.experiment import SERIES_FOLDER, train_model
from analyses.induction.findings import build_model, held_out_chains
from analyses.series_writer import INDUCTION_TOY_MEASURE, write_manifest
from analyses.toy_model_store import save_standard_model
from probes.core.checkpoint_series import checkpoint_series
from probes.core.errors import InputError
from toymodels.errors import ToyConfigError
from toymodels.induction.data import sample_markov_icl

pytestmark = pytest.mark.usefixtures("one_thread")
CONFIG = DynamicsConfig(n_batches=8, n_boot=500)


def small_toy(n_steps: int = 300, **changes):
    """The standard preset made small: chains of 50 states, 64 held out; 300 Adam steps form both heads."""
    base = PRESETS["standard"]
    return dataclasses.replace(base, data=dataclasses.replace(base.data, seq_len=50), eval_seq_lens=(50,), n_val=64,
                               probe_sequences=64, eval_every=10**6,
                               standard_train=dataclasses.replace(base.standard_train, n_steps=n_steps),
                               **{"series_checkpoints": 10, **changes})


def random_weight_series(folder, config, seeds):
    """A toy series whose checkpoints are the toy at initialisation, drawn with ``seeds`` (one per step)."""
    standard = config.standard_model_config()
    for step, seed in zip((0, 10, 30, 100, 300, 1000), seeds):
        torch.manual_seed(seed)
        model = build_model(dataclasses.replace(config, seed=seed))
        save_standard_model(model, dataclasses.replace(standard, seed=seed), folder / f"step_{step}", "induction")
    write_manifest(folder, (0, 10, 30, 100, 300, 1000)[: len(seeds)], tokens_per_step=1600,
                   extra={"measure": INDUCTION_TOY_MEASURE, "settings": dataclasses.asdict(config)})
    return folder


def test_series_checkpoints_is_for_the_standard_toy_only():
    with pytest.raises(ToyConfigError, match="model='standard'"):
        dataclasses.replace(PRESETS["fast"], series_checkpoints=8)
    with pytest.raises(ToyConfigError, match=">= 2"):
        dataclasses.replace(PRESETS["standard"], series_checkpoints=1)
    with pytest.raises(ToyConfigError, match="n_steps >= 1"):
        small_toy(n_steps=0)


@pytest.mark.parametrize("preset", ["fast", "standard"])
def test_series_checkpoints_of_the_simplified_model_advises_a_fix_that_works(tmp_path, capsys, preset):
    """toy induction --preset standard --set model=simplified --set series_checkpoints=3 advised 'use --preset
    standard', the preset given: the fix is to drop --set model=simplified."""
    argv = ["toy", "induction", "--preset", preset, "--out", str(tmp_path / "toy"), "--set", "model=simplified",
            "--set", "series_checkpoints=3", "--set", "standard_train.n_steps=12"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "use --preset standard without --set model=" in err and not any(tmp_path.iterdir()), err
    advised = apply_overrides(PRESETS["standard"], ["series_checkpoints=3", "standard_train.n_steps=12"])
    assert advised.model == "standard" and advised.series_checkpoints == 3  # the advice: taken


def test_more_series_checkpoints_than_steps_is_refused_not_clamped(tmp_path, capsys):
    twelve = small_toy(n_steps=12, series_checkpoints=0)
    assert dataclasses.replace(twelve, series_checkpoints=4).series_checkpoints == 4  # steps 0, 10, 11, 12
    with pytest.raises(ToyConfigError, match=r"series_checkpoints \(5\) is more than"):
        dataclasses.replace(twelve, series_checkpoints=5)
    argv = ["toy", "induction", "--preset", "standard", "--out", str(tmp_path / "toy"), "--set",
            "standard_train.n_steps=12", "--set", "series_checkpoints=50"]
    assert main(argv) == 2
    assert "series_checkpoints (50)" in capsys.readouterr().err and not any(tmp_path.iterdir())


@pytest.mark.parametrize(("n_steps", "count"), [(2**63 - 1, 3), (2**53 + 1, 3), (1000, 5000), (1, 5000), (1000, 553)])
def test_series_checkpoints_past_float_precision_are_taken_and_every_advised_fix_is_accepted(n_steps, count):
    """standard_train.n_steps 2**63 - 1 with series_checkpoints=3 was refused, 'set standard_train.n_steps to 11 or
    more' (exp(log(n)) is not n past 2**53: a fourth step beside n); series_checkpoints=5000 in 1000 steps advised
    'set standard_train.n_steps to 80065...905 or more', a number of 137 digits that --set refuses (int64)."""
    base = small_toy(n_steps=n_steps, series_checkpoints=0)
    if n_steps > 2**53:  # three checkpoints fit any such count of steps: 0, 10 and the last
        assert dataclasses.replace(base, series_checkpoints=count).series_checkpoints == count
        return
    with pytest.raises(ToyConfigError) as refused:
        dataclasses.replace(base, series_checkpoints=count)
    advice = str(refused.value).split("; ", 1)[1]
    for fix in advice.split(", or "):  # each accepted, the setting it does not name as given
        fixes = dict(re.findall(r"(series_checkpoints|n_steps) to (\d+)", fix))
        assert fixes and all(int(value) < 2**63 for value in fixes.values()), refused.value
        dataclasses.replace(small_toy(n_steps=int(fixes.get("n_steps", n_steps)), series_checkpoints=0),
                            series_checkpoints=int(fixes.get("series_checkpoints", count)))


def test_uniform_copier_mass_is_the_mean_of_one_over_visible_keys():
    batch = torch.zeros(3, 6, dtype=torch.long)  # queries 2..5 see 3..6 keys
    assert _uniform_copier_mass([batch], 2) == pytest.approx((1 / 3 + 1 / 4 + 1 / 5 + 1 / 6) / 4)


def test_a_hand_made_copier_scores_one_and_uniform_attention_scores_its_null():
    """Planted truth: layer-1 head 0 attends exactly to distance 1 and head 1 to distance 2 (order 3); every
    other head is uniform. The copier curve is then 1.0; a model that is uniform everywhere scores the null."""
    config = small_toy()
    model = build_model(config)
    n_pos = config.data.seq_len

    def planted(pattern, hook):
        q = torch.arange(n_pos)
        uniform = torch.tril(torch.ones(n_pos, n_pos)) / (q[:, None] + 1)
        pattern[:] = uniform.to(pattern.dtype)
        if hook.name == "blocks.0.attn.hook_pattern":
            for head, distance in ((0, 1), (1, 2)):
                rows = q[distance:]
                pattern[:, head] = 0
                pattern[:, head, rows, rows - distance] = 1
                pattern[:, head, :distance] = uniform[:distance].to(pattern.dtype)
        return pattern

    batches = list(held_out_chains(config)[:64, :-1].tensor_split(8))
    model.blocks[0].attn.hook_pattern.add_hook(planted)
    model.blocks[1].attn.hook_pattern.add_hook(planted)
    points = induction_toy_points(model, batches, config, CONFIG)
    assert points["copier"].value == pytest.approx(1.0)
    assert points["classifier"].value == pytest.approx(points["classifier"].null_value)  # uniform layer 2
    model.reset_hooks()


def test_a_toy_series_trained_on_another_device_is_measured_on_the_cpu(tmp_path):
    config = small_toy()
    folder = random_weight_series(tmp_path / "series", config, (0, 1))
    manifest = json.loads((folder / "series.json").read_text())
    manifest["settings"]["device"] = "cuda:7"  # not on this machine
    (folder / "series.json").write_text(json.dumps(manifest))
    assert toy_settings(checkpoint_series(folder)) == config
    manifest["measure"] = "scan-and-snap"
    (folder / "series.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="names measure 'scan-and-snap'"):
        toy_settings(checkpoint_series(folder))


def test_the_toy_at_initialisation_gives_no_event_that_holds(tmp_path):
    config = small_toy()
    for name, seeds in (("same", (0,) * 6), ("redrawn", (0, 1, 2, 3, 4, 5))):
        series = random_weight_series(tmp_path / name, config, seeds)
        summary = run_dynamics(series, tmp_path / f"{name}-dynamics", CONFIG, progress=False)
        assert set(summary.curves) == {"copier", "classifier", "beats_uniform", "beats_unigram", "beats_bigram"}
        assert not any(event.holds for event in summary.events.events.values()), name  # the phases' included
        assert max(summary.curves["beats_unigram"]) < 0  # no initialisation predicts as the sequence's counts do
        order = summary.events.orders["copier_before_classifier"]
        assert not order.holds and math.isnan(order.p_value)  # untested: its events do not hold


@pytest.mark.slow  # about 40 s on one thread: 300 steps of the small standard toy
def test_trained_toy_series_copier_and_classifier_events_and_their_order(tmp_path):
    config = small_toy()
    train_model(config, sample_markov_icl(config.data, 8, 0).tokens, held_out_chains(config), tmp_path, progress=False)
    folder = tmp_path / SERIES_FOLDER
    series = checkpoint_series(folder)
    manifest = json.loads((folder / "series.json").read_text())
    assert series.steps[0] == 0 and series.steps[-1] == 300 and len(series.steps) == 10
    assert manifest["measure"] == INDUCTION_TOY_MEASURE and series.checkpoints[-1].tokens == 300 * 32 * 50
    summary = run_dynamics(folder, tmp_path / "dynamics", CONFIG, progress=False)
    copier, classifier = summary.events.events["copier"], summary.events.events["classifier"]
    assert copier.holds and classifier.holds  # both form from near their nulls
    assert summary.curves["copier"][0] < 0.15 < 0.5 < summary.curves["copier"][-1]
    assert summary.curves["classifier"][-1] > classifier.finding.null_value + 0.3
    for event in (copier, classifier):
        low, high = event.change.bracket
        assert low <= event.change.step <= high and event.change.step_ci[0] <= low and event.change.step_ci[1] >= high
    order = summary.events.orders["copier_before_classifier"]
    assert order.value == pytest.approx(classifier.change.step - copier.change.step)
    assert order.ci[0] <= order.value <= order.ci[1] and not math.isnan(order.p_value)  # tested: both hold
    assert order.verdict in ("holds", "absent", "inconclusive")
    path = plot_series_together({"toy": summary}, tmp_path / "together.png")
    assert path.stat().st_size > 10_000


def test_cli_toy_induction_saves_a_series_that_dynamics_reads(tmp_path, capsys):
    settings = ["data.seq_len=20", "standard_train.n_steps=12", "eval_every=6", "n_val=16", "probe_sequences=16",
                "standard.d_model=16", "eval_seq_lens=(10,)", "eval_alphas=(1.0,)", "n_train=32",
                "series_checkpoints=4"]
    argv = ["toy", "induction", "--preset", "standard", "--out", str(tmp_path / "toy"), "--no-progress"]
    assert main([*argv, *(item for s in settings for item in ("--set", s))]) == 0
    series = checkpoint_series(tmp_path / "toy" / SERIES_FOLDER)
    assert series.steps == (0, 10, 11, 12) and series.extra["measure"] == INDUCTION_TOY_MEASURE
    capsys.readouterr()
    assert main(["dynamics", "--model", str(tmp_path / "toy" / SERIES_FOLDER), "--out", str(tmp_path / "dyn"),
                 "--batches", "4", "--boot", "50", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "copier:" in printed and "classifier:" in printed and "order copier_before_classifier" in printed
    assert (tmp_path / "dyn" / "dynamics.png").is_file()


def test_a_series_run_interrupted_before_any_checkpoint_is_resumed_by_the_same_command(tmp_path, monkeypatch,
                                                                                         capsys):
    """Ctrl-C of toy induction --set series_checkpoints=N (no checkpoint_every: the standard preset's) said 'run the
    same command again to resume', which then refused OUT.partial as 'not an unfinished run of this command'; once
    taken, a run with other settings would have mixed its steps into the first run's series."""
    import analyses.induction.experiment as experiment

    settings = ["data.seq_len=20", "eval_every=6", "n_val=16", "probe_sequences=16", "standard.d_model=16",
                "eval_seq_lens=(10,)", "eval_alphas=(1.0,)", "n_train=32", "series_checkpoints=4"]
    out = tmp_path / "toy"

    def argv(n_steps):
        sets = [*settings, f"standard_train.n_steps={n_steps}"]
        return ["toy", "induction", "--preset", "standard", "--out", str(out), "--no-progress",
                *(item for s in sets for item in ("--set", s))]

    written = experiment.write_manifest

    def interrupted(folder, steps, **kwargs):
        written(folder, steps, **kwargs)
        if 10 in steps:  # step 10 saved, before any training checkpoint (there is none)
            raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(experiment, "write_manifest", interrupted)
        assert main(argv(12)) == 130
    assert "run the same command again to resume" in capsys.readouterr().err
    partial = tmp_path / "toy.partial"
    kept = sorted(p.relative_to(tmp_path) for p in partial.rglob("*"))
    assert main(argv(13)) == 2  # other settings: refused, the unfinished run kept as it was
    err = capsys.readouterr().err
    assert "other settings (standard_train.n_steps 12 there, 13 here)" in err and err.count("\n") == 1, err
    assert sorted(p.relative_to(tmp_path) for p in partial.rglob("*")) == kept
    manifest = partial / SERIES_FOLDER / "series.json"
    saved = manifest.read_text()
    manifest.write_text(json.dumps({k: v for k, v in json.loads(saved).items() if k != "settings"}))
    assert main(argv(12)) == 2  # a manifest without its settings: damaged, not 'other settings (... None there)'
    assert "series.json holds no settings" in capsys.readouterr().err
    manifest.write_text(saved)
    assert main(argv(12)) == 0, capsys.readouterr().err  # the same command: resumed
    assert checkpoint_series(out / SERIES_FOLDER).steps == (0, 10, 11, 12) and not partial.exists()
