"""``dynamics --refine``: a stretch of training re-run from its kept state reproduces the weights of the checkpoint
that ends it bit for bit (and saves the new checkpoints on the same trajectory as an uninterrupted run); a re-run
that does not is refused and leaves the series as it was; a series without an event that holds (the toy trained at
a learning rate of ~0) adds nothing; series that were not trained here are refused in one line."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
import torch
from safetensors.torch import save_file

from analyses.cli import main
from analyses.dynamics.bracket_rerun import check_refinable, rerun_series
from analyses.dynamics.config import DynamicsConfig
from analyses.dynamics.refine import REFINEMENT, refine_dynamics
from analyses.dynamics.run import STORE
from analyses.dynamics.train_lm import TrainLmConfig, lm_training, train_lm
from analyses.induction.experiment import SERIES_FOLDER, train_model
from analyses.induction.findings import held_out_chains
from analyses.lm_data import LmData
from analyses.series_writer import STATES_FOLDER
from probes.core.checkpoint_series import checkpoint_series
from probes.core.errors import InputError
from probes.dynamics.refinement import RefinementSettings
from tests.analyses.dynamics.test_toy_series import small_toy
from toymodels.errors import CheckpointError
from toymodels.induction.data import sample_markov_icl
from toymodels.step_states import StepStates
from toymodels.training import train

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A 16-step train-lm series saved at steps 0, 10 and 16, with its training states."""
    folder = tmp_path_factory.mktemp("lm")
    (folder / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(300)))
    config = TrainLmConfig(corpus=str(folder / "text.txt"), vocab=10, seq_len=32, batch_size=4, d_model=16,
                           n_heads=2, n_steps=16, n_checkpoints=3, span=8)
    train_lm(config, folder / "series", progress=False)
    return config, folder / "series"


def test_a_rerun_bracket_reproduces_its_end_and_saves_where_an_uninterrupted_run_is(tiny_lm):
    config, folder = tiny_lm
    assert checkpoint_series(folder).steps == (0, 10, 16)
    assert StepStates(folder / STATES_FOLDER, steps=(), fingerprint="").saved() == (10, 16)
    runs = rerun_series(folder, [13])
    assert [(run.start, run.end, run.added) for run in runs] == [(10, 16, (13,))]  # and step 16 was reproduced
    assert checkpoint_series(folder).steps == (0, 10, 13, 16)
    reference = lm_training(config, LmData.from_corpus(config.corpus, vocab=config.vocab))
    train(reference.model, reference.loss_fn, [reference.optimizer], n_steps=13, generator=reference.generator)
    kept = StepStates(folder / STATES_FOLDER, steps=(), fingerprint="").weights(13)
    expected = reference.model.state_dict()
    assert kept.keys() == expected.keys() and all(torch.equal(kept[k], expected[k]) for k in kept)


def test_a_rerun_that_misses_the_kept_weights_is_refused_and_leaves_the_series(tiny_lm):
    _, folder = tiny_lm
    if 13 not in checkpoint_series(folder).steps:
        rerun_series(folder, [13])
    states = StepStates(folder / STATES_FOLDER, steps=(), fingerprint="")
    weights = states.weights(13)
    meta = json.loads((folder / STATES_FOLDER / "step_13" / "checkpoint.json").read_text())
    first = next(iter(weights))
    save_file({**weights, first: weights[first] + 1e-6}, str(folder / STATES_FOLDER / "step_13" / meta["weights"]))
    before = (folder / "series.json").read_text()
    with pytest.raises(CheckpointError, match="did not reproduce the weights kept for step 13"):
        rerun_series(folder, [12])
    assert (folder / "series.json").read_text() == before
    assert not (folder / "step_12").exists() and 12 not in states.saved()
    save_file(weights, str(folder / STATES_FOLDER / "step_13" / meta["weights"]))


def test_refine_refuses_series_not_trained_here_in_one_line(tiny_lm, tmp_path, capsys):
    _, folder = tiny_lm
    with pytest.raises(InputError, match=r"series\.json"):
        check_refinable(tmp_path)
    with pytest.raises(InputError, match="outside the series"):
        rerun_series(folder, [40])
    code = main(["dynamics", "--model", str(folder), "--out", str(tmp_path / "d"), "--refine-width", "0.1"])
    assert code == 2 and "add --refine" in capsys.readouterr().err
    code = main(["dynamics", "--model", str(tmp_path), "--out", str(tmp_path / "d"), "--refine"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--model" in err and not (tmp_path / "d").exists()


def test_the_toy_at_a_learning_rate_of_zero_has_no_event_and_adds_no_checkpoint(tmp_path):
    """The control: the toy trained at a learning rate of 1e-9 stays at its initialisation; no event holds, so
    --refine re-runs nothing. The toy's series re-runs too: a bracket added by hand reproduces its end."""
    base = small_toy(n_steps=20)
    config = dataclasses.replace(base, series_checkpoints=3,
                                 standard_train=dataclasses.replace(base.standard_train, lr=1e-9))
    train_model(config, sample_markov_icl(config.data, 8, 0).tokens, held_out_chains(config), tmp_path, progress=False)
    folder = tmp_path / SERIES_FOLDER
    assert checkpoint_series(folder).steps == (0, 10, 20)
    summary, record = refine_dynamics(folder, tmp_path / "dyn", DynamicsConfig(n_batches=8, n_boot=200),
                                      RefinementSettings(), progress=False)
    assert not any(event.holds for event in summary.events.events.values())
    assert record.reruns == () and len(record.rounds) == 1 and record.resolved == {}
    assert (tmp_path / "dyn" / REFINEMENT).is_file()
    (run,) = rerun_series(folder, [15])
    assert (run.start, run.end) == (10, 20) and checkpoint_series(folder).steps == (0, 10, 15, 20)
    again = refine_dynamics(folder, tmp_path / "dyn", DynamicsConfig(n_batches=8, n_boot=200), progress=False)[0]
    assert again.measured_now == (2,) and sorted(p.name for p in (tmp_path / "dyn" / STORE).iterdir()) == [
        "0000-step0.json", "0001-step10.json", "0002-step15.json", "0003-step20.json"]  # the rest reused, renamed


def test_a_rerun_keeps_a_folder_of_the_series_owner_named_rerun(tmp_path):
    """A re-run resumed from a scratch folder named rerun inside the series and removed it when done, whoever made
    it: a folder rerun/ of the series' owner (notes, another run) was deleted by dynamics --refine. The scratch is
    a new folder made for the re-run now; the owner's is kept, and nothing of the scratch is left."""
    (tmp_path / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(300)))
    config = TrainLmConfig(corpus=str(tmp_path / "text.txt"), vocab=10, seq_len=32, batch_size=4, d_model=16,
                           n_heads=2, n_steps=16, n_checkpoints=3, span=8)
    folder = tmp_path / "series"
    train_lm(config, folder, progress=False)
    (folder / "rerun").mkdir()
    (folder / "rerun" / "notes.txt").write_text("mine")
    before = {p.name for p in folder.iterdir()}
    assert [(run.start, run.end) for run in rerun_series(folder, [5, 13])] == [(0, 10), (10, 16)]
    assert (folder / "rerun" / "notes.txt").read_text() == "mine"
    assert {p.name for p in folder.iterdir()} == before | {"step_5", "step_13"}


def test_a_series_trained_on_a_relative_corpus_is_refined_on_that_text_from_any_folder(tmp_path, monkeypatch):
    """train-lm --corpus text.txt recorded the corpus as given, and a re-run read text.txt from wherever --refine ran:
    another text (or none) there, so the stretch did not reproduce its end and --refine stopped, advising another
    machine. The corpus is recorded by its absolute path now, and the stretch is re-run on it from anywhere."""
    (tmp_path / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(300)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "text.txt").write_text("\n\n".join(f"other {i} " + "words " * (i % 5) for i in range(300)))
    monkeypatch.chdir(tmp_path)
    train_lm(TrainLmConfig(corpus="text.txt", vocab=10, seq_len=16, batch_size=2, d_model=8, n_heads=2, n_steps=8,
                           n_checkpoints=2, span=4), "series", progress=False)
    monkeypatch.chdir(elsewhere)
    assert [(run.start, run.end) for run in rerun_series(tmp_path / "series", [5])] == [(0, 8)]
    assert checkpoint_series(tmp_path / "series").steps == (0, 5, 8)


def test_a_series_whose_corpus_was_recorded_relative_is_refused_before_any_work(tiny_lm, tmp_path, capsys):
    """A train-lm series whose summary.json records its corpus relative (an older mechprobe) names no folder it was
    relative to: --refine is refused in one line naming it before anything is measured (it was measured, then
    re-run on whichever text.txt the working folder held, or none)."""
    folder = tmp_path / "series"
    shutil.copytree(tiny_lm[1], folder)
    summary = folder / "summary.json"
    summary.write_text(summary.read_text().replace(tiny_lm[0].corpus, "text.txt"))
    code = main(["dynamics", "--model", str(folder), "--out", str(tmp_path / "d"), "--refine", "--seq-len", "8",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "d").exists()
    assert f"{summary} records the corpus 'text.txt' relative to the folder" in err and "--refine out" in err, err


def test_a_step_folder_the_manifest_does_not_list_is_refused_before_any_work(tiny_lm, tmp_path, capsys):
    """A re-run saved each checkpoint it added at step N into SERIES/step_N whatever was there: a step_12 of the
    series' owner that series.json does not list (their own, or left over) was written into and listed as the
    series' checkpoint, or deleted whole when the re-run did not reproduce its end. It is refused in one line naming
    it before anything is measured; a step_N where no re-run saves (past the last step) is kept and not refused."""
    folder = tmp_path / "series"
    shutil.copytree(tiny_lm[1], folder)
    for name in ("step_12", "step_99"):
        (folder / name).mkdir()
        (folder / name / "notes.txt").write_text("mine")
    before = {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
    code = main(["dynamics", "--model", str(folder), "--out", str(tmp_path / "d"), "--refine", "--seq-len", "8",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "d").exists()
    assert f"{folder / 'step_12'} is not a checkpoint of the series (series.json does not list it)" in err, err
    with pytest.raises(InputError, match="step_12 is not a checkpoint"):
        rerun_series(folder, [5])
    assert {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()} == before
    shutil.rmtree(folder / "step_12")  # what the message advises
    assert [run.added for run in rerun_series(folder, [12])] == [(12,)]
    assert (folder / "step_99" / "notes.txt").read_text() == "mine"


def test_a_series_whose_corpus_is_gone_is_refused_before_any_work(tiny_lm, tmp_path, capsys):
    """--refine on a train-lm series whose corpus file was moved measured every step, then, where an event called
    for a re-run, stopped: 'Unknown corpus ... Check the path.', not saying it was the series' training text.
    Refused in one line naming it before anything is measured."""
    folder, moved = tmp_path / "series", tmp_path / "moved" / "text.txt"
    shutil.copytree(tiny_lm[1], folder)
    summary = folder / "summary.json"
    summary.write_text(summary.read_text().replace(tiny_lm[0].corpus, str(moved)))
    code = main(["dynamics", "--model", str(folder), "--out", str(tmp_path / "d"), "--refine", "--seq-len", "8",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and not (tmp_path / "d").exists()
    assert f"The corpus {moved} is not there: {folder} was trained on it" in err, err
