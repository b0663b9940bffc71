"""``mechprobe train-lm``: repeated spans where asked, the vocabulary cut by frequency, log-spaced checkpoints saved
as a series that ``dynamics`` reads back with the trained weights."""

from __future__ import annotations

import dataclasses
import itertools
import json
import re

import pytest
import torch

from analyses.cli import main
from analyses.dynamics.train_lm import TrainLmConfig, checkpoint_steps, train_lm
from analyses.experiments import toy_experiment
from analyses.lm_data import LmData
from analyses.series_writer import MAX_CHECKPOINTS, fewest_steps, most_checkpoints, steps_fit
from analyses.toy_model_loader import load_any_model
from probes import ConfigError
from probes.core.checkpoint_series import checkpoint_series
from probes.core.errors import InputError
from probes.text.corpora import iter_documents

pytestmark = pytest.mark.usefixtures("one_thread")


def has_repeated_span(row: torch.Tensor, span: int) -> bool:
    """The reference: some ``span`` tokens of the first half occur again, in order, in the second half."""
    half = row.shape[0] // 2
    pieces = {tuple(row[i : i + span].tolist()) for i in range(half - span + 1)}
    return any(tuple(row[j : j + span].tolist()) in pieces for j in range(half, row.shape[0] - span + 1))


@pytest.fixture(scope="module")
def short_lm(tmp_path_factory):
    """A 2-step train-lm series of context 16, trained once for the tests that only read it (each refuses before
    any checkpoint loads); its corpus, ``text.txt``, lies beside it."""
    folder = tmp_path_factory.mktemp("short")
    (folder / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    assert main(["train-lm", "--corpus", str(folder / "text.txt"), "--out", str(folder / "lm"), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=4", "--no-progress"]) == 0
    return folder / "lm"


def test_rows_repeat_a_span_of_their_first_half_in_the_asked_fraction():
    data = LmData(torch.arange(10_000) % 9_973, tuple(range(10)), "counting")  # no repeat of its own within a row
    generator = torch.Generator().manual_seed(0)
    always = data.rows(64, 64, repeat=1.0, span=8, generator=generator)
    never = data.rows(64, 64, repeat=0.0, span=8, generator=generator)
    some = data.rows(400, 64, repeat=0.25, span=8, generator=generator)
    assert all(has_repeated_span(row, 8) for row in always)
    assert not any(has_repeated_span(row, 8) for row in never)
    assert sum(has_repeated_span(row, 8) for row in some) / 400 == pytest.approx(0.25, abs=0.06)


def test_the_vocabulary_keeps_the_most_frequent_tokens(tmp_path):
    (tmp_path / "text.txt").write_text("the cat the dog the cat a bird\n\nthe end of the story of the cat\n")
    data = LmData.from_corpus(str(tmp_path / "text.txt"), vocab=4)
    assert data.vocab == 4 and int(data.stream.max()) == 3
    counts = torch.bincount(data.stream, minlength=4)
    assert counts[0] >= counts[1] >= counts[2]  # ids by frequency; 3 is every other token
    assert counts[3] > 0


def test_checkpoint_steps_are_log_spaced_from_zero_to_the_end():
    steps = checkpoint_steps(3000, 16)
    assert steps[0] == 0 and steps[1] == 10 and steps[-1] == 3000 and len(steps) == 16
    ratios = [b / a for a, b in itertools.pairwise(steps[1:])]
    assert max(ratios) / min(ratios) < 1.2


def test_train_lm_saves_a_series_that_loads_back(tmp_path):
    (tmp_path / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(300)))
    config = TrainLmConfig(corpus=str(tmp_path / "text.txt"), vocab=10, seq_len=32, batch_size=4, d_model=16,
                           n_heads=2, n_steps=12, n_checkpoints=4, span=8)
    summary = train_lm(config, tmp_path / "lm", progress=False)
    assert summary.steps == checkpoint_steps(12, 4) and summary.final_loss < summary.first_loss
    series = checkpoint_series(tmp_path / "lm")
    assert series.steps == summary.steps and series.checkpoints[-1].tokens == 12 * 4 * 32
    first, last = (load_any_model(c.spec) for c in (series.checkpoints[0], series.checkpoints[-1]))
    assert first.cfg.d_vocab == 10 and not torch.equal(first.W_E, last.W_E)
    assert json.loads((tmp_path / "lm" / "summary.json").read_text())["settings"]["n_steps"] == 12


def test_cli_train_lm_then_dynamics(tmp_path, capsys):
    (tmp_path / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    code = main(["train-lm", "--corpus", str(tmp_path / "text.txt"), "--out", str(tmp_path / "lm"), "--steps", "6",
                 "--set", "vocab=30", "--set", "seq_len=32", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=8", "--no-progress"])
    assert code == 0 and "saved steps 0, " in capsys.readouterr().out
    code = main(["dynamics", "--model", str(tmp_path / "lm"), "--out", str(tmp_path / "dyn"), "--seq-len", "10",
                 "--batches", "4", "--batch-size", "2", "--boot", "100", "--no-progress"])
    assert code == 0 and "event induction" in capsys.readouterr().out


def test_the_printed_dynamics_command_of_a_short_context_runs(tmp_path, capsys):
    """With ``--set seq_len=16`` train-lm advised ``mechprobe dynamics --model LM --out LM-dynamics``, which refused:
    its default --seq-len 40 needs 80 positions. The printed command now gives the --seq-len the context takes."""
    (tmp_path / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    lm = tmp_path / "lm"
    assert main(["train-lm", "--corpus", str(tmp_path / "text.txt"), "--out", str(lm), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=4", "--no-progress"]) == 0
    printed = capsys.readouterr().out.strip().splitlines()[-1].split("measure it with: mechprobe ")[1]
    assert printed == f"dynamics --model {lm} --out {lm}-dynamics --seq-len 8"
    assert main([*printed.split(), "--batches", "4", "--batch-size", "2", "--boot", "100", "--no-progress"]) == 0


def test_a_vocabulary_cap_the_corpus_does_not_reach_is_said_and_recorded(tmp_path, capsys):
    """``--set vocab=100000`` on a corpus of a few distinct tokens trained on those and OTHER without saying so: the
    run now says how many ids the model has, and summary.json records them beside the cap."""
    (tmp_path / "text.txt").write_text("\n\n".join("x y z " * (2 + i % 5) for i in range(200)))
    lm = tmp_path / "lm"
    assert main(["train-lm", "--corpus", str(tmp_path / "text.txt"), "--out", str(lm), "--steps", "2",
                 "--set", "vocab=100000", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=4", "--no-progress"]) == 0
    summary = json.loads((lm / "summary.json").read_text())
    kept = len(json.loads((lm / "vocab.json").read_text())["smollm2_ids"])
    assert summary["vocab"] == kept + 1 < 10 and summary["settings"]["vocab"] == 100000
    assert load_any_model(str(lm / "step_2")).cfg.d_vocab == kept + 1
    said = f"the corpus has {kept} distinct tokens, fewer than vocab=100000 keeps: the model's vocabulary is " \
           f"those and OTHER, {kept + 1} ids"
    assert said in capsys.readouterr().out.splitlines()


def test_the_printed_dynamics_command_quotes_a_path_with_spaces(tmp_path, capsys):
    """``train-lm --out "my lm"`` printed ``mechprobe dynamics --model my lm --out my lm-dynamics``: a shell splits
    it into other arguments. The paths are quoted for the shell now, and the printed command runs."""
    import shlex

    (tmp_path / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    lm = tmp_path / "my lm"
    assert main(["train-lm", "--corpus", str(tmp_path / "text.txt"), "--out", str(lm), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=4", "--no-progress"]) == 0
    printed = shlex.split(capsys.readouterr().out.strip().splitlines()[-1].split("measure it with: ")[1])
    assert printed == ["mechprobe", "dynamics", "--model", str(lm), "--out", f"{lm}-dynamics", "--seq-len", "8"]
    assert main([*printed[1:], "--batches", "4", "--batch-size", "2", "--boot", "100", "--no-progress"]) == 0
    assert (tmp_path / "my lm-dynamics" / "summary.json").is_file()


def test_dtype_on_a_train_lm_series_is_refused_before_any_checkpoint_loads(short_lm, tmp_path, capsys, monkeypatch):
    """``dynamics --model LM --dtype float16`` once measured the float32 steps as trained and wrote the same curves as
    without it: the flag was ignored (as probe-linear refuses it on a toy folder)."""
    import analyses.dynamics.run

    lm = short_lm
    monkeypatch.setattr(analyses.dynamics.run, "load_any_model", lambda *a, **k: pytest.fail("a checkpoint loaded"))
    argv = ["dynamics", "--model", str(lm), "--out", str(tmp_path / "dyn"), "--seq-len", "8", "--dtype", "float16"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"mechprobe: error: --dtype does not apply to the series {lm} (its checkpoints "
                                        f"are mechprobe toy or train-lm models: float32, as trained); drop --dtype."]
    assert not (tmp_path / "dyn").exists()


@pytest.mark.parametrize("name", ["summary.json", "dynamics.png", "dynamics_compare.png", "refinement.json"])
def test_a_folder_where_dynamics_writes_a_file_is_refused_before_any_checkpoint_loads(short_lm, tmp_path, capsys,
                                                                                      monkeypatch, name):
    """An earlier dynamics --out whose summary.json is a folder was measured again, then the run failed writing it:
    '[Errno 21] Is a directory: ...' (an OSError, no fix), after all the work."""
    import analyses.dynamics.run

    lm = short_lm
    out = tmp_path / "dyn"
    (out / "checkpoints").mkdir(parents=True)
    (out / name / "kept").mkdir(parents=True)
    monkeypatch.setattr(analyses.dynamics.run, "load_any_model", lambda *a, **k: pytest.fail("a checkpoint loaded"))
    assert main(["dynamics", "--model", str(lm), "--out", str(out), "--seq-len", "8", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"mechprobe: error: --out {out}: {out / name} is not a file, and this command "
                                        f"writes its {name} there; move it away or choose another --out."]
    assert (out / name / "kept").is_dir()


def test_bad_settings_are_one_line():
    with pytest.raises(ConfigError, match="span"):
        TrainLmConfig(seq_len=32, span=20)
    with pytest.raises(ConfigError, match="repeat"):
        TrainLmConfig(repeat=1.5)
    for count in (4, 10**18):  # 6 steps give 0 and 6 only: refused, not clamped
        with pytest.raises(ConfigError, match=rf"n_checkpoints \({count}\) is more than"):
            TrainLmConfig(n_steps=6, n_checkpoints=count).check_checkpoint_count()
    TrainLmConfig(n_steps=12, n_checkpoints=4).check_checkpoint_count()
    assert checkpoint_steps(12, 4) == (0, 10, 11, 12)  # as many steps as asked


@pytest.mark.parametrize("n_steps", [2, 11, 2500])
def test_two_checkpoints_are_the_first_and_the_last_step(n_steps):
    """``n_checkpoints=2`` (the least the configs take) was refused for any n_steps > 10 as "more than the distinct
    log-spaced steps ... give": the steps were 0, 10 and n_steps, three."""
    assert checkpoint_steps(n_steps, 2) == (0, n_steps)
    TrainLmConfig(n_steps=n_steps, n_checkpoints=2).check_checkpoint_count()
    standard = toy_experiment("induction").PRESETS["standard"]
    dataclasses.replace(standard, series_checkpoints=2,
                        standard_train=dataclasses.replace(standard.standard_train, n_steps=n_steps))


def test_a_checkpoint_count_larger_than_the_steps_give_is_refused_before_any_work(tmp_path, capsys):
    code = main(["train-lm", "--out", str(tmp_path / "lm"), "--steps", "6", "--set", "n_checkpoints=3"])
    assert code == 2 and "n_checkpoints (3) is more than" in capsys.readouterr().err
    assert not (tmp_path / "lm").exists()


@pytest.mark.parametrize("repeat", ["nan", "inf", "-inf", "1e400", "1.5", "-0.1", "x"])
def test_a_repeat_that_is_not_a_fraction_is_one_line_naming_the_flag(repeat, tmp_path, capsys):
    """``--repeat nan`` once advised ``--repeat repeat=1.0`` (the --set form under the flag's name): no such value."""
    code = main(["train-lm", "--out", str(tmp_path / "lm"), "--repeat", repeat])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--repeat" in err and "repeat=" not in err, err
    assert not (tmp_path / "lm").exists()


def test_a_block_longer_than_the_series_context_is_refused_before_any_checkpoint_loads(short_lm, tmp_path, capsys,
                                                                                         monkeypatch):
    """A train-lm series of context 16: ``dynamics --seq-len 9`` once failed at its first checkpoint advising
    "Use seq_len <= 8" (no such flag), and ``report --series`` (|X| 40, no flag to change it) only after the whole
    report's work, with the same advice."""
    import analyses.dynamics.run
    import analyses.report.build

    lm = short_lm
    monkeypatch.setattr(analyses.dynamics.run, "load_any_model", lambda *a, **k: pytest.fail("a checkpoint loaded"))
    monkeypatch.setattr(analyses.report.build, "run_report", lambda *a, **k: pytest.fail("the report ran"))
    for argv, words in (
            (["dynamics", "--model", str(lm), "--seq-len", "9"], "--seq-len 9: the repeated block X X needs more "
             "positions than the context of 16 of the models of"),
            (["dynamics", "--model", str(lm)], "give --seq-len 8 or less"),
            (["dynamics", "--model", str(lm), "--seq-len", "8", "--corpus", str(lm.parent / "text.txt")],
             f"--corpus {lm.parent / 'text.txt'}: the early-minus-late loss reads text rows of 127 tokens, more than "
             f"the context of 16 of the models of {lm}; leave --corpus out, or train the series with --set "
             f"seq_len=128 or more."),  # it loaded the first step, then blamed the corpus's documents as too short
            (["report", "--no-toys", "--fast", "--series", str(lm)], f"--series {lm}: the report measures a series "
             f"on [BOS] X X with |X| = 40, more positions than its models' context of 16; measure it with "
             f"mechprobe dynamics --model {lm} --seq-len 8 --out DIR instead, or train it with --set seq_len=80")):
        assert main([*argv, "--out", str(tmp_path / "out"), "--no-progress"]) == 2
        err = capsys.readouterr().err
        assert words in err and len(err.strip().splitlines()) == 1, err
        assert not (tmp_path / "out").exists()


def test_a_killed_training_resumes_to_the_same_weights(tmp_path, monkeypatch):
    (tmp_path / "text.txt").write_text("\n\n".join(f"paragraph {i} " + "word " * (i % 7) + "end" for i in range(300)))
    config = TrainLmConfig(corpus=str(tmp_path / "text.txt"), vocab=10, seq_len=32, batch_size=4, d_model=16,
                           n_heads=2, n_steps=40, n_checkpoints=4, span=8, resume_every=4)
    whole = train_lm(config, tmp_path / "whole", progress=False)

    class Killed(BaseException):
        pass

    calls = {"n": 0}
    rows = LmData.rows

    def dies_at_step_25(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 25:
            raise Killed
        return rows(self, *args, **kwargs)

    monkeypatch.setattr(LmData, "rows", dies_at_step_25)
    with pytest.raises(Killed):
        train_lm(config, tmp_path / "resumed", progress=False)
    counted = {"n": 0}

    def counting(self, *args, **kwargs):
        counted["n"] += 1
        return rows(self, *args, **kwargs)

    monkeypatch.setattr(LmData, "rows", counting)
    assert whole.steps == (0, 10, 20, 40)
    assert checkpoint_series(tmp_path / "resumed").steps == (0, 10, 20)  # what was saved before the kill
    resumed = train_lm(config, tmp_path / "resumed", progress=False)
    assert counted["n"] == 40 - 24  # resumed from the state saved at step 24, not trained again from step 0
    assert resumed.steps == whole.steps and resumed.final_loss == whole.final_loss
    for step in whole.steps:
        a = load_any_model(str(tmp_path / "whole" / f"step_{step}"))
        b = load_any_model(str(tmp_path / "resumed" / f"step_{step}"))
        assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_a_corpus_shorter_than_one_row_is_refused_before_anything_is_written(tmp_path, capsys):
    # found by the fuzz test's cover (train-lm --corpus FOLDER holding one short file): step 0, series.json and
    # the vocabulary were written, then the run refused
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "notes.txt").write_text("keep", encoding="utf-8")
    out = tmp_path / "out"
    assert main(["train-lm", "--corpus", str(tmp_path / "corpus"), "--out", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "fewer than one row of 128" in err and err.count("\n") == 1
    assert not out.exists()


@pytest.mark.parametrize(("given", "fixes"), [
    ({"span": 24, "seq_len": 32}, [{"span": 16, "seq_len": 32}, {"span": 24, "seq_len": 48}]),
    ({"span": 9, "seq_len": 17}, [{"span": 8, "seq_len": 17}, {"span": 9, "seq_len": 18}]),
    ({"d_model": 30, "n_heads": 4}, [{"d_model": 28, "n_heads": 4}]),
    ({"d_model": 2, "n_heads": 4}, [{"d_model": 4, "n_heads": 4}]),
])
def test_settings_that_do_not_fit_each_other_are_refused_with_a_fix_that_works(given, fixes):
    """Each refusal names the settings and the values that would fit; those values are accepted."""
    with pytest.raises(ConfigError) as refused:
        TrainLmConfig(**given)
    message = str(refused.value)
    for fix in fixes:
        changed = {key: value for key, value in fix.items() if given[key] != value}
        assert all(f"{key} to {value}" in message for key, value in changed.items()), message
        TrainLmConfig(**fix)


@pytest.mark.parametrize("n_steps", [1, 2, 3, 6, 11, 12, 40, 97, 2500])
def test_the_most_checkpoints_and_the_fewest_steps_are_the_bounds_steps_fit_scans_for(n_steps):
    """The binary searches of analyses.series_writer against a scan of steps_fit."""
    for below in (2, 3, 5, 17, n_steps + 5):
        scanned = [c for c in range(2, min(below, n_steps + 1)) if steps_fit(n_steps, c)]
        assert most_checkpoints(n_steps, below) == (max(scanned) if scanned else None)
    for count in (2, 3, 5, 16, 40):
        assert fewest_steps(count) == next(n for n in itertools.count(1) if steps_fit(n, count))


@pytest.mark.parametrize(("n_steps", "count"), [(6, 4), (20, 16), (12, 10**18), (10**12, 10**11), (1, 2)])
def test_too_many_checkpoints_are_refused_with_counts_that_fit(n_steps, count):
    """The refusal names the count and steps that fit, each accepted; a count beyond MAX_CHECKPOINTS is refused
    before any step is computed (10**11 checkpoints in 10**12 steps tried to allocate 800 GB)."""
    with pytest.raises(ConfigError) as refused:
        TrainLmConfig(n_steps=n_steps, n_checkpoints=count).check_checkpoint_count()
    message = str(refused.value)
    if count > MAX_CHECKPOINTS:  # the advice fits the steps too (it said 10,000, which 12 steps refuse next)
        fewer = re.search(r"set n_checkpoints to (\d+) or fewer", message)
        assert fewer is not None and int(fewer.group(1)) <= MAX_CHECKPOINTS, message
        TrainLmConfig(n_steps=n_steps, n_checkpoints=int(fewer.group(1))).check_checkpoint_count()
        return
    fewer = re.search(r"set n_checkpoints to (\d+) or fewer", message)
    more = re.search(r"set n_steps to (\d+) or more", message)
    assert more is not None and (fewer is not None or n_steps < 2), message
    TrainLmConfig(n_steps=int(more.group(1)), n_checkpoints=count).check_checkpoint_count()
    if fewer is not None:
        TrainLmConfig(n_steps=n_steps, n_checkpoints=int(fewer.group(1))).check_checkpoint_count()


def test_a_model_the_machine_cannot_hold_is_refused_before_training(tmp_path, capsys):
    """train-lm --set n_layers=1000000 ran past a minute building layers (then would have run out of memory); it is
    refused from a lower bound of what training holds, against the machine's memory, before anything is made."""
    with pytest.raises(ConfigError, match=r"n_layers 1000000 x d_model 128: training holds at least 977 GiB"):
        TrainLmConfig(n_layers=1_000_000).check_size(24 * 2**30)
    TrainLmConfig().check_size(2**30)  # the default is a few MiB
    TrainLmConfig(n_layers=1_000_000).check_size(None)  # memory not known: not checked
    assert main(["train-lm", "--out", str(tmp_path / "lm"), "--set", "d_model=1000000", "--set", "n_heads=1",
                 "--no-progress"]) == 2
    assert "training holds at least" in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_a_step_the_machine_cannot_hold_is_refused_before_anything_is_made(tmp_path, capsys):
    """train-lm --set batch_size=100000000 wrote train-lm.json, vocab.json, series.json and step_0 into --out, then ran
    out of memory drawing the first step's rows: a refusal that left a half-made run behind (which the same command
    fails on again, and another command is refused on). The rows and attention patterns of one step count in the
    bound now: refused naming batch_size and seq_len before anything is made."""
    with pytest.raises(ConfigError, match=r"batch_size 100000000 x seq_len 32: one training step holds at least "
                                          r"3,076 GiB .* lower batch_size or seq_len\."):
        TrainLmConfig(seq_len=32, d_model=16, span=8, batch_size=100_000_000).check_size(24 * 2**30)
    with pytest.raises(ConfigError, match=r"batch_size 2 x seq_len 100000: one training step"):
        TrainLmConfig(seq_len=100_000, batch_size=2).check_size(24 * 2**30)
    TrainLmConfig(batch_size=64, seq_len=1024).check_size(24 * 2**30)  # about 2 GiB: trained
    (tmp_path / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    assert main(["train-lm", "--corpus", str(tmp_path / "text.txt"), "--out", str(tmp_path / "lm"), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=32", "--set", "batch_size=100000000", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=8", "--no-progress"]) == 2
    assert "one training step holds at least" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["text.txt"]


def test_an_empty_corpus_is_not_advised_a_setting_train_lm_does_not_have(tmp_path, capsys):
    """train-lm --corpus EMPTY.txt said '... no article of at least 1 characters ... Give a larger UTF-8 text or
    lower min_chars.': train-lm has no min_chars, and below 1 nothing is gained. The advice to lower it is given
    only where it is above 1 (the report's --set min_chars=200)."""
    (tmp_path / "empty.txt").write_text("")
    assert main(["train-lm", "--corpus", str(tmp_path / "empty.txt"), "--out", str(tmp_path / "lm"), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=32", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=8", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "holds no text" in err and "Give a larger UTF-8 text." in err and "min_chars" not in err, err
    assert not (tmp_path / "lm").exists()
    with pytest.raises(InputError, match="Give a larger UTF-8 text or lower min_chars"):
        list(iter_documents(str(tmp_path / "empty.txt"), min_chars=200))
