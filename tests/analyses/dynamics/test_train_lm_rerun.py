"""``mechprobe train-lm`` can always be run again with the same command: a run interrupted anywhere in its start-up,
stopped before its first training checkpoint, diverged, or whose series manifest or checkpoint was damaged leaves a
folder the same command takes again (resuming to the weights of an uninterrupted run), or refuses in one line
that names the file and the fix, never a traceback, never with a file of the run lost."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import analyses.dynamics.lm_run_folder as lm_run_folder
import analyses.dynamics.train_lm as train_lm_module
from analyses.cli import main
from analyses.lm_data import LmData
from toymodels.training import Checkpointer

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["--steps", "12", "--set", "vocab=10", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=8",
        "--set", "n_heads=2", "--set", "n_checkpoints=3", "--set", "span=4", "--set", "resume_every=100",
        "--no-progress"]
STEPS = (0, 10, 12)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(200)))
    return path


def command(corpus: Path, out: Path, *extra: str) -> list[str]:
    return ["train-lm", "--corpus", str(corpus), "--out", str(out), *TINY, *extra]


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory) -> Path:
    """An uninterrupted run of the tiny settings."""
    out = tmp_path_factory.mktemp("reference") / "lm"
    assert main(command(corpus, out)) == 0
    return out


def weights(out: Path) -> dict[int, dict[str, torch.Tensor]]:
    return {step: load_file(str(out / f"step_{step}" / "model.safetensors")) for step in STEPS}


def assert_same_run(out: Path, reference: Path) -> None:
    ours, theirs = weights(out), weights(reference)
    assert all(torch.equal(ours[s][k], theirs[s][k]) for s in STEPS for k in theirs[s])


def files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")} if folder.exists() else set()


def interrupting(monkeypatch: pytest.MonkeyPatch, owner: object, name: str, at_call: int = 1) -> None:
    """Make ``owner.name`` raise KeyboardInterrupt (as Ctrl-C would) at its ``at_call``-th call."""
    original = getattr(owner, name)
    calls = {"n": 0}

    def interrupted(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == at_call:
            raise KeyboardInterrupt
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)


STOPS = {
    "reading the corpus, before anything is written": (LmData, "from_corpus", 1),
    "after making the folder, before marking it": (lm_run_folder, "atomic_write_text", 1),
    "writing the vocabulary": (train_lm_module, "atomic_write_text", 1),
    "saving step 0": (train_lm_module, "save_standard_model", 1),
    "writing the first series.json": (train_lm_module, "write_manifest", 1),
    "before the first step": (train_lm_module, "train", 1),
    "after step 10 is saved, before the first training checkpoint": (LmData, "rows", 11),
    "saving the training checkpoint at the end": (Checkpointer, "save", 1),
}


@pytest.mark.parametrize("where", list(STOPS))
def test_an_interrupted_run_is_resumed_by_the_same_command(where, corpus, reference, tmp_path, monkeypatch, capsys):
    out = tmp_path / "runs" / "lm"
    with monkeypatch.context() as patch:
        interrupting(patch, *STOPS[where])
        assert main(command(corpus, out)) == 130
    assert capsys.readouterr().err == "mechprobe: interrupted; run the same command again to resume\n"
    assert main(command(corpus, out)) == 0, capsys.readouterr().err
    assert "saved steps 0, 10, 12" in capsys.readouterr().out
    assert_same_run(out, reference)


def test_a_diverged_run_is_taken_again_and_its_advice_works(corpus, tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(command(corpus, out, "--set", "lr=1e6")) == 2
    message = capsys.readouterr().err
    assert message.count("\n") == 1 and "diverged" in message and "--set lr=" in message and "new --out" in message
    kept = files(out)
    assert "step_0/model.json" in kept
    assert main(command(corpus, out, "--set", "lr=1e6")) == 2  # the same command: resumed, and diverges again
    assert capsys.readouterr().err == message
    assert main(command(corpus, out, "--set", "lr=1e-3")) == 2  # other settings are another run: refused
    refusal = capsys.readouterr().err
    assert "other settings (lr 1000000.0 there, 0.001 here)" in refusal and refusal.count("\n") == 1
    assert files(out) == kept
    assert main(command(corpus, tmp_path / "lower", "--set", "lr=1e-3")) == 0  # the advice: lower lr, new --out


def test_a_damaged_manifest_is_refused_and_its_fix_works(corpus, reference, tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(command(corpus, out)) == 0
    (out / "series.json").write_text('{"checkpoints": [{"step": 10, "path": "step_0"}')
    kept = files(out)
    assert main(command(corpus, out)) == 2
    message = capsys.readouterr().err
    assert f"{out / 'series.json'} is not valid JSON" in message and "Delete" in message
    assert files(out) == kept
    (out / "series.json").write_text('{"checkpoints": [{"step": 10, "path": "step_0"}]}')  # steps and paths swapped
    assert main(command(corpus, out)) == 2
    assert "is not {" in capsys.readouterr().err
    (out / "series.json").unlink()  # what the message advises
    shutil.rmtree(out / "checkpoint")
    assert main(command(corpus, out)) == 0
    assert_same_run(out, reference)


def test_a_damaged_checkpoint_is_refused_and_its_fix_works(corpus, reference, tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(command(corpus, out)) == 0
    meta = out / "checkpoint" / "checkpoint.json"
    meta.write_text(meta.read_text()[:20])
    assert main(command(corpus, out)) == 2
    message = capsys.readouterr().err
    assert str(meta) in message and f"Delete the folder {out / 'checkpoint'}" in message
    shutil.rmtree(out / "checkpoint")  # what the message advises
    assert main(command(corpus, out)) == 0
    assert_same_run(out, reference)


def test_a_step_whose_weights_are_another_models_is_refused_and_its_fix_works(corpus, reference, tmp_path, capsys):
    """A saved step whose model.safetensors holds tensors of other shapes (another run's) was kept by the resumed
    run, exit 0, and the series then failed to load at that step (issue 45). Refused now before anything is written,
    and its advice trains the run again whole."""
    from safetensors.torch import load_file, save_file

    out = tmp_path / "lm"
    assert main(command(corpus, out)) == 0
    weights = out / "step_0" / "model.safetensors"
    save_file({name: torch.cat([t, t[:1]]) for name, t in load_file(str(weights)).items()}, str(weights))
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    assert main(command(corpus, out)) == 2
    message = capsys.readouterr().err
    assert str(weights) in message and "which this run's model does not have" in message, message
    assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    (out / "series.json").unlink()  # what the message advises
    shutil.rmtree(out / "checkpoint")
    assert main(command(corpus, out)) == 0
    assert_same_run(out, reference)


def test_another_folder_or_damaged_settings_are_refused_before_any_work(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(LmData, "from_corpus", lambda *a, **k: pytest.fail("the corpus was read"))
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert main(command(corpus, other)) == 2
    assert "holds other files" in capsys.readouterr().err
    marked = tmp_path / "lm"
    marked.mkdir()
    (marked / "train-lm.json").write_text('{"settings": ')
    assert main(command(corpus, marked)) == 2
    message = capsys.readouterr().err
    assert f"{marked / 'train-lm.json'} is not valid JSON" in message and "new --out" in message
    assert files(other) == {"notes.txt"} and files(marked) == {"train-lm.json"}


def test_a_corpus_whose_text_changed_is_refused_before_its_vocabulary_is_rewritten(tmp_path, capsys):
    """The same train-lm command run again after the corpus file's text changed (same path, same settings) rewrote
    OUT/vocab.json from the new text and resumed: the saved steps then read text through a vocabulary they were not
    trained in, and training went on over other rows, exit 0 (with another vocabulary size it failed on the
    checkpoint, advising to delete it). Refused now before anything is written; the text put back resumes."""
    text = tmp_path / "text.txt"
    first = "\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(200))
    text.write_text(first)
    out = tmp_path / "lm"
    assert main(command(text, out)) == 0
    before = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    capsys.readouterr()
    text.write_text("\n\n".join(f"other words {i} " + "alpha beta gamma delta " * (i % 5) for i in range(300)))
    assert main(command(text, out)) == 2
    err = capsys.readouterr().err
    assert f"--out {out} was trained on another text of the corpus" in err and len(err.strip().splitlines()) == 1
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == before
    text.write_text(first)
    assert main(command(text, out)) == 0


def test_a_series_folder_train_lm_did_not_write_is_not_called_its_run(corpus, tmp_path, capsys, monkeypatch):
    """train-lm --out DIR, where DIR is another checkpoint series (its series.json and steps, e.g. the induction
    toy's OUT/series) or holds a checkpoint/ folder of something else, said 'DIR/train-lm.json is missing: it
    records the settings of the train-lm run in DIR ... delete DIR to train it again': the wrong cause, and advice
    to delete a folder train-lm never wrote. It is refused as a folder of other files now; a train-lm folder whose
    train-lm.json was deleted is still named as one."""
    monkeypatch.setattr(LmData, "from_corpus", lambda *a, **k: pytest.fail("the corpus was read"))
    series, held = tmp_path / "series", tmp_path / "held"
    (series / "step_0").mkdir(parents=True)
    (series / "series.json").write_text('{"checkpoints": [{"step": 0, "path": "step_0"}]}')
    (held / "checkpoint").mkdir(parents=True)
    for folder in (series, held):
        assert main(command(corpus, folder)) == 2
        err = capsys.readouterr().err
        assert f"--out {folder} is a folder that holds other files" in err and "delete" not in err, err
    (series / "vocab.json").write_text('{"smollm2_ids": [1, 2], "other": 2}')  # a train-lm run's own file
    assert main(command(corpus, series)) == 2
    assert f"{series / 'train-lm.json'} is missing" in capsys.readouterr().err
    assert files(held) == {"checkpoint"}


def test_a_relative_corpus_is_resumed_on_the_same_text_from_any_folder(corpus, reference, tmp_path, monkeypatch,
                                                                       capsys):
    """train-lm --corpus text.txt recorded the corpus as given: the same command run from another folder resumed on
    that folder's text.txt, another text of the same words, exit 0 (the steps before the stop trained on one text,
    the rest on the other). The corpus is recorded by its absolute path now: another file of that name is refused
    as another setting, and the corpus given from anywhere resumes to the uninterrupted run's weights."""
    out, elsewhere = tmp_path / "lm", tmp_path / "elsewhere"
    elsewhere.mkdir()
    paragraphs = corpus.read_text().split("\n\n")
    (elsewhere / "text.txt").write_text("\n\n".join(reversed(paragraphs)))  # the same vocabulary, other rows
    monkeypatch.chdir(corpus.parent)
    with monkeypatch.context() as patch:
        interrupting(patch, LmData, "rows", 11)  # after step 10 is saved
        assert main(command(Path("text.txt"), out)) == 130
    assert f'"corpus": "{corpus.resolve()}"' in (out / "train-lm.json").read_text()
    capsys.readouterr()
    kept = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    monkeypatch.chdir(elsewhere)
    assert main(command(Path("text.txt"), out)) == 2
    err = capsys.readouterr().err
    assert f"corpus '{corpus.resolve()}' there, '{elsewhere.resolve() / 'text.txt'}' here" in err, err
    assert err.count("\n") == 1
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == kept
    assert main(command(Path(os.path.relpath(corpus, elsewhere)), out)) == 0, capsys.readouterr().err
    assert_same_run(out, reference)


def test_a_corpus_recorded_relative_by_an_older_version_is_refused_naming_it(corpus, reference, tmp_path, capsys):
    """A train-lm.json written before corpora were recorded by their absolute path names no folder the corpus was
    relative to: it is refused in one line naming the corpus and what to give, nothing changed (it was resumed on
    whichever file of that name the working folder held, or refused as other settings with a fix that fails)."""
    out = tmp_path / "lm"
    shutil.copytree(reference, out)
    settings = out / "train-lm.json"
    settings.write_text(settings.read_text().replace(str(corpus.resolve()), "text.txt"))
    kept = {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}
    assert main(command(corpus, out)) == 2
    err = capsys.readouterr().err
    assert f"{settings} records the corpus 'text.txt' relative to the folder the run was started from" in err, err
    assert f"Give a new --out (or delete {out})" in err and err.count("\n") == 1
    assert {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()} == kept
