"""Checkpoint series as a model source: the series specs, and Hugging Face revisions loaded through the real
transformers path from a stand-in hub cache (tests/stand_in_hub.py)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from safetensors.torch import load_file

import probes
from probes import ConfigError, ModelError
from probes.core.checkpoint_series import (
    Checkpoint,
    check_revisions,
    checkpoint_series,
    step_of_revision,
    tokens_of_revision,
)
from tests.stand_in_hub import REPO, make_stand_in_hub, use_stand_in_hub

pytestmark = pytest.mark.usefixtures("one_thread")
REVISIONS = {"step0": 0, "step512": 1, "step1000": 2}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    return make_stand_in_hub(tmp_path_factory.mktemp("hub"), REVISIONS)


def test_revisions_are_ordered_by_the_step_they_name():
    series = checkpoint_series(f"{REPO}@revisions=step1000,step0,step512")
    assert series.kind == "revisions" and series.hub_name == REPO
    assert series.steps == (0, 512, 1000)
    assert [c.spec for c in series.checkpoints] == [f"{REPO}@revision=step{s}" for s in (0, 512, 1000)]


def test_olmo_revision_names_give_steps_and_tokens():
    assert step_of_revision("step1000-tokens4B") == 1000
    assert tokens_of_revision("step1000-tokens4B") == 4_000_000_000
    assert tokens_of_revision("step1000") is None


def test_legacy_checkpoints_by_index():
    series = checkpoint_series("attn-only-2l@checkpoint_index=10,0,3")
    assert series.kind == "legacy" and series.steps == (0, 3, 10)
    assert series.checkpoints[1].spec == "attn-only-2l@checkpoint_index=3"


def test_a_folder_of_numbered_checkpoints_and_a_manifest(tmp_path):
    for name in ("step_100", "step_20", "checkpoint-5"):
        (tmp_path / "a" / name).mkdir(parents=True)
    (tmp_path / "a" / "notes").mkdir()
    assert checkpoint_series(tmp_path / "a").steps == (5, 20, 100)
    (tmp_path / "b" / "early").mkdir(parents=True)
    (tmp_path / "b" / "late").mkdir()
    (tmp_path / "b" / "series.json").write_text(json.dumps({"checkpoints": [
        {"step": 0, "tokens": 0, "path": "early"}, {"step": 50, "tokens": 6400, "path": "late"}]}))
    series = checkpoint_series(tmp_path / "b")
    assert series.steps == (0, 50) and series.checkpoints[1] == Checkpoint(50, str(tmp_path / "b" / "late"), 6400)


@pytest.mark.parametrize(("spec", "expected"), [
    ("gpt2", "names one model, not a series"),
    ("my-run", "'my-run' is no folder here, and as a model name it names one model"),  # a run not made, or mistyped
    (f"{REPO}@revisions=step1", "at least 2 checkpoints"),
    (f"{REPO}@revisions=step1,step01", "distinct steps"),
    (f"{REPO}@revisions=main,latest", "names no training step"),
    ("attn-only-2l@checkpoint_index=a,b", "integers separated by commas"),
    (f"{REPO}@steps=1,2", "is not a checkpoint series"),
    (f"{REPO}@revisions=step0,,step10", "an empty item"),
    ("attn-only-2l@checkpoint_index=0,,3", "an empty item"),
    (f"{REPO}@revisions=step0,step1.5", "fractional or negative step"),
    (f"{REPO}@revisions=step0,step-5", "fractional or negative step"),
])
def test_a_bad_series_is_one_line(spec, expected):
    with pytest.raises(ConfigError, match=expected) as caught:
        checkpoint_series(spec)
    assert "\n" not in str(caught.value)


def test_a_revision_loads_that_revision_s_weights_through_transformers(hub, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    model = probes.load_model(f"{REPO}@revision=step512")
    refs = hub / f"models--{REPO.replace('/', '--')}"
    commit = (refs / "refs" / "step512").read_text()
    saved = load_file(str(refs / "snapshots" / commit / "model.safetensors"))
    assert torch.equal(model.W_E.detach(), saved["gpt_neox.embed_in.weight"])
    other = load_file(str(refs / "snapshots" / (refs / "refs" / "step0").read_text() / "model.safetensors"))
    assert not torch.equal(model.W_E.detach(), other["gpt_neox.embed_in.weight"])
    assert model.cfg.model_name == f"{REPO}@revision=step512"


def test_a_missing_revision_fails_in_one_line_before_loading(hub, monkeypatch):
    use_stand_in_hub(monkeypatch, hub)
    check_revisions(checkpoint_series(f"{REPO}@revisions=step0,step1000"))
    series = checkpoint_series(f"{REPO}@revisions=step0,step777,step1000")
    with pytest.raises(ModelError, match=f"{REPO} has no revision 'step777'") as caught:
        check_revisions(series)
    assert "\n" not in str(caught.value)
    with pytest.raises(ModelError, match="no revision 'step777'") as caught:
        probes.load_model(f"{REPO}@revision=step777")
    assert "\n" not in str(caught.value)


def _manifest(folder, entries):
    folder.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        if isinstance(entry, dict) and not entry["path"].startswith(("/", "..")):
            (folder / entry["path"]).mkdir(parents=True, exist_ok=True)
    (folder / "series.json").write_text(json.dumps({"checkpoints": entries}))
    return folder


@pytest.mark.parametrize(("entries", "expected"), [
    ([{"step": 10, "path": "step_10"}, {"step": 0, "path": "step_0"}], "unique and increasing in the order listed"),
    ([{"step": 0, "path": "step_0"}, {"step": 0, "path": "again"}], "unique and increasing"),
    ([{"step": 0, "path": "step_10"}, {"step": 10, "path": "step_0"}], "swapped or mixed up"),
    ([{"step": 0, "path": "a"}, {"step": 1.5, "path": "b"}], "is not an integer >= 0"),
    ([{"step": 0, "path": "a"}, {"step": -1, "path": "b"}], "is not an integer >= 0"),
    ([{"step": 0, "path": "a"}, {"step": 5, "path": "../elsewhere"}], "outside the series folder"),
    ([{"step": 0, "path": "a"}, {"step": 5, "path": "/tmp"}], "outside the series folder"),
    ([{"step": 0, "path": "a"}, "b"], "is not {"),
    ([{"step": 0, "tokens": 100, "path": "a"}, {"step": 10, "tokens": 50, "path": "b"}],
     "the tokens seen go down from 100 at step 0 to 50 at step 10"),
    ([{"step": 0, "tokens": 64, "path": "a"}, {"step": 5, "path": "b"}, {"step": 10, "tokens": 32, "path": "c"}],
     "the tokens seen go down from 64 at step 0 to 32 at step 10"),
])
def test_a_manifest_that_is_not_one_run_in_step_order_is_refused_by_name(tmp_path, entries, expected):
    with pytest.raises(ConfigError, match=re.escape(expected)) as caught:
        checkpoint_series(_manifest(tmp_path / "series", entries))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("key", "other"), [("vocab_size", 100), ("hidden_size", 32), ("model_type", "llama"),
                                            ("max_position_embeddings", 1024)])
def test_checkpoints_of_another_architecture_or_vocabulary_are_not_one_run(tmp_path, key, other):
    config = {"model_type": "gpt_neox", "vocab_size": 50, "hidden_size": 64, "num_hidden_layers": 2,
              "max_position_embeddings": 512}
    for step, changed in ((0, {}), (10, {key: other})):
        (tmp_path / "s" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "s" / f"step_{step}" / "config.json").write_text(json.dumps({**config, **changed}))
    with pytest.raises(ConfigError, match=f"not one training run: the checkpoint at step 10 has {key}"):
        checkpoint_series(tmp_path / "s")
    (tmp_path / "s" / "step_10" / "config.json").write_text(json.dumps(config))
    assert checkpoint_series(tmp_path / "s").steps == (0, 10)


def test_train_lm_steps_of_another_context_are_not_one_run(tmp_path):
    """A train-lm step of a run with a longer context put in a series (same widths and vocabulary) was measured as
    its next step, and the block length checked against the first step's context only. Another seed is not refused:
    a series of redrawn initialisations is the toys' control."""
    config = {"n_layers": 2, "d_model": 32, "n_heads": 4, "d_vocab": 200, "n_ctx": 32, "seed": 0}
    for step, changed in ((0, {}), (10, {"n_ctx": 64, "seed": 1})):
        (tmp_path / "s" / f"step_{step}").mkdir(parents=True)
        (tmp_path / "s" / f"step_{step}" / "model.json").write_text(json.dumps(
            {"format": 1, "experiment": "train-lm", "class": "StandardBridge", "config": {**config, **changed}}))
    with pytest.raises(ConfigError, match="not one training run: the checkpoint at step 10 has n_ctx 64 where"):
        checkpoint_series(tmp_path / "s")
    (tmp_path / "s" / "step_10" / "model.json").write_text(json.dumps(
        {"format": 1, "experiment": "train-lm", "class": "StandardBridge", "config": {**config, "seed": 1}}))
    assert checkpoint_series(tmp_path / "s").steps == (0, 10)


def test_one_checkpoint_at_two_steps_is_refused(tmp_path):
    """A series.json naming one folder at two steps (``"path": "a"`` twice), or a link ``step_20 -> step_10`` in the
    series folder (with or without series.json), was measured as two points of the run: the same weights at step 10
    and at step 20. Refused now naming both steps and the checkpoint."""
    manifest = _manifest(tmp_path / "same", [{"step": 0, "path": "step_0"}, {"step": 10, "path": "a"},
                                             {"step": 20, "path": "a"}])
    linked = _manifest(tmp_path / "linked", [{"step": 0, "path": "step_0"}, {"step": 10, "path": "step_10"}])
    (linked / "step_20").symlink_to("step_10")
    (linked / "series.json").write_text(json.dumps({"checkpoints": [
        {"step": 0, "path": "step_0"}, {"step": 10, "path": "step_10"}, {"step": 20, "path": "step_20"}]}))
    bare = tmp_path / "bare"
    for step in (0, 10):
        (bare / f"step_{step}").mkdir(parents=True)
    (bare / "step_20").symlink_to("step_10")
    for folder, where in ((manifest, manifest / "series.json"), (linked, linked / "series.json"), (bare, bare)):
        with pytest.raises(ConfigError, match=re.escape(f"{where}: steps 10 and 20 are the same checkpoint")) as caught:
            checkpoint_series(folder)
        assert "\n" not in str(caught.value)
    (bare / "step_20").unlink()
    (bare / "step_20").mkdir()
    assert checkpoint_series(bare).steps == (0, 10, 20)


@pytest.mark.parametrize("kind", ["a folder", "a loop", "a dangling link"])
def test_a_manifest_that_is_not_a_file_is_refused_not_skipped(tmp_path, kind):
    """A series.json that was a folder or a looping link was skipped as if absent: the steps were then found by
    folder name, so the run the manifest listed (another order, other paths) was not the one measured (issue 45)."""
    folder = _manifest(tmp_path / "s", [{"step": 0, "path": "step_0"}, {"step": 10, "path": "step_10"}])
    manifest = folder / "series.json"
    manifest.unlink()
    if kind == "a folder":
        manifest.mkdir()
    else:
        manifest.symlink_to("series.json" if kind == "a loop" else "gone.json")
    with pytest.raises(ConfigError, match=re.escape(f"{manifest} is not a series manifest")) as caught:
        checkpoint_series(folder)
    assert "\n" not in str(caught.value)


def test_only_checkpoint_folders_and_weight_files_are_steps_of_a_folder(tmp_path):
    """A folder of checkpoints holding notes2.txt was measured with it as step 2: step 0 was measured and stored,
    then loading notes2.txt failed ('is a file, but a model file must be a HookedTransformer checkpoint'); and the
    config 500.json beside the weights 500.pt (a form the loader takes) made step 500 twice, refused as not distinct.
    Only checkpoint folders and weight files are steps now."""
    for name in ("step_0", "step_10"):
        (tmp_path / "a" / name).mkdir(parents=True)
    (tmp_path / "a" / "notes2.txt").write_text("mine")
    (tmp_path / "a" / "run_7.log").write_text("mine")
    assert checkpoint_series(tmp_path / "a").steps == (0, 10)
    (tmp_path / "b").mkdir()
    for step in (0, 500):
        (tmp_path / "b" / f"{step}.pt").write_bytes(b"weights")
        (tmp_path / "b" / f"{step}.json").write_text("{}")
    (tmp_path / "b" / "1000.safetensors").write_bytes(b"weights")
    assert checkpoint_series(tmp_path / "b").steps == (0, 500, 1000)
