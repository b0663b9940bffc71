"""Bad input on the command line: exit code 2, one `mechprobe...: error:` line, no traceback, nothing
left behind; ``--debug`` raises the typed error instead (its traceback is shown)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from analyses.cli import UsageError, main
from probes.core.errors import ConfigError, InputError, MechprobeError, ModelError
from probes.core.out_of_memory import size_refusal
from tests.analyses.cli_fuzz import flags_it_lacks, without_flags

TINY_HEADS = ["--seq-len", "3", "--batches", "1", "--batch-size", "1", "--no-progress"]


def fails_in_one_line(argv: list[str], capsys, *words: str, error: type[BaseException] = MechprobeError) -> str:
    """Run ``mechprobe ARGV``: exit 2 and one error line holding ``words``; with --debug, ``error`` is raised."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.replace("\r", "\n").splitlines()
    errors = [line for line in lines if "error:" in line]
    assert len(errors) == 1 and errors[0] == lines[-1] and errors[0].startswith("mechprobe"), captured.err
    err = errors[0]
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    command = argv[0] if argv else ""
    assert not flags_it_lacks(command, err, argv), f"the error advises flags {command} does not take: {err}"
    for word in words:
        assert word in err, (word, err)
    with pytest.raises(error):
        main(["--debug", *argv])
    capsys.readouterr()
    return err


# ---- mechprobe toy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("settings, words", [
    (["seeed=3"], ["unknown setting", "Did you mean seed?", "Known settings"]),
    (["seed=abc"], ["expected an integer", "e.g. --set seed=0"]),
    (["seed=1.5"], ["expected an integer"]),
    (["data.static_masks=maybe"], ["expected a boolean (true/false)"]),
    (["lda.alpha=nan"], ["expected a number"]),
    (["joint.loss=hinge"], ["expected one of squared, cross_entropy"]),
    (["lda.d_vocab=abc"], ["expected an integer or none"]),
    (["seed"], ["expects KEY=VALUE"]),
    (["=3"], ["expects KEY=VALUE"]),
    (["seed=1", "seed=2"], ["given twice"]),
    (["lda.alpha=0"], ["alpha", "0.1"]),  # parsed, then refused by the config's own validation
])
def test_toy_set_errors(tmp_path, capsys, settings, words):
    out = tmp_path / "run"
    argv = ["toy", "topic", "--out", str(out)]
    for setting in settings:
        argv += ["--set", setting]
    fails_in_one_line(argv, capsys, *words, error=ConfigError)
    assert not out.exists()


@pytest.mark.parametrize("setting, words", [
    ("sweep.num_last=4,,5", ["expected comma-separated integers"]),
    ("sweep.num_last=a,b", ["expected comma-separated integers"]),
    ("sweep.eta_z=1,inf", ["expected comma-separated numbers", "e.g. --set sweep.", "eta_z=0.5,1.0"]),
])
def test_toy_set_tuple_errors(tmp_path, capsys, setting, words):
    fails_in_one_line(["toy", "scansnap", "--out", str(tmp_path / "run"), "--set", setting], capsys, *words,
                      error=ConfigError)
    assert not (tmp_path / "run").exists()


def test_toy_unknown_preset_and_missing_out(tmp_path, capsys):
    fails_in_one_line(["toy", "induction", "--preset", "huge", "--out", str(tmp_path / "r")], capsys,
                      "Unknown preset 'huge'", "choose from", error=ConfigError)
    fails_in_one_line(["toy", "induction"], capsys, "needs --out DIR", error=ConfigError)
    fails_in_one_line(["toy", "induction", "--seeds", "0", "--out", str(tmp_path / "r")], capsys,
                      "--seeds must be >= 1; got 0", error=ConfigError)
    assert not (tmp_path / "r").exists()


def test_toy_unknown_experiment_and_flag(capsys):
    fails_in_one_line(["toy", "gpt5"], capsys, "invalid choice", "mechprobe toy --help", error=UsageError)
    fails_in_one_line(["toy", "topic", "--steps", "3"], capsys, "unrecognized arguments: --steps", error=UsageError)


def test_toy_rejects_dtype(tmp_path, capsys):
    fails_in_one_line(["toy", "topic", "--out", str(tmp_path / "r"), "--dtype", "float16"], capsys,
                      "--dtype does not apply to `mechprobe toy`", "float32", "Drop --dtype", error=ConfigError)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # "new/" (made for the run) is gone


NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.mark.parametrize("argv, words, error", [  # --device is checked as it is parsed (a usage error)
    (["--device", "nonsense"], ["--device", "device 'nonsense' is not a torch device", "use cpu, cuda, cuda:N"],
     UsageError),
    (["--set", "device=nonsense"], ["device 'nonsense' is not a torch device"], ConfigError),
    (["--device", "meta"], ["--device", "runs on cpu, cuda or mps"], UsageError),
    pytest.param(["--device", "cuda"], ["device 'cuda'", "no usable CUDA GPU", "use cpu"], UsageError, marks=NO_CUDA),
    pytest.param(["--set", "device=cuda:1"], ["device 'cuda:1'", "no usable CUDA GPU"], ConfigError, marks=NO_CUDA),
    (["--device", "cpu", "--set", "device=cpu"], ["--device and --set device=", "give only one"], ConfigError),
])
def test_toy_bad_device_fails_before_any_training(tmp_path, capsys, monkeypatch, argv, words, error):
    import analyses.topic.experiment

    monkeypatch.setattr(analyses.topic.experiment, "run", lambda *a, **k: pytest.fail("trained despite a bad device"))
    fails_in_one_line(["toy", "topic", "--no-progress", "--out", str(tmp_path / "new" / "run"), *argv], capsys, *words,
                      error=error)
    assert list(tmp_path.iterdir()) == []  # no output folder (nor its parent) was made


def test_toy_out_that_is_a_file(tmp_path, capsys):
    target = tmp_path / "file.txt"
    target.write_text("keep me", encoding="utf-8")
    fails_in_one_line(["toy", "topic", "--out", str(target)], capsys, "is a file, not a folder", error=InputError)
    fails_in_one_line(["toy", "topic", "--out", str(target / "sub")], capsys, "is a file, not a folder",
                      error=InputError)
    assert target.read_text(encoding="utf-8") == "keep me"


def test_toy_error_during_the_run_removes_the_folder_it_made(tmp_path, capsys):
    """A WikiText file that does not exist is found only when the run reads it, after --out was created."""
    out = tmp_path / "new" / "run"
    missing = tmp_path / "missing.tokens"
    argv = ["toy", "scansnap", "--preset", "wikitext", "--set", f"wikitext.train_text={missing}", "--no-progress",
            "--out", str(out)]
    fails_in_one_line(argv, capsys, "missing.tokens does not exist", error=ValueError)
    assert list(tmp_path.iterdir()) == []
    kept = tmp_path / "mine"
    kept.mkdir()
    (kept / "notes.txt").write_text("x", encoding="utf-8")
    assert main([*argv[:-1], str(kept)]) == 2
    assert (kept / "notes.txt").is_file()  # a folder that existed before is not removed


TINY_TOY = ["toy", "induction", "--preset", "fast", "--no-progress"] + [
    arg for item in ["checkpoint_every=2", "n_train=32", "n_val=16", "train.stage_steps=2,2,2", "data.seq_len=20",
                     "probe_sequences=8", "eval_seq_lens=10", "eval_alphas=1.0"] for arg in ("--set", item)]


def test_toy_that_fails_midway_leaves_no_partial_out_and_keeps_an_earlier_output(tmp_path, monkeypatch, capsys):
    """The toy run works in OUT.partial and renames it to OUT when done: an error after training (planted in the
    saving of summary.json, once checkpoints and figures were written) leaves neither OUT nor OUT.partial nor the
    parent folders made for them, and an earlier output of the same command in OUT stays byte for byte."""
    from analyses.paper_result import PaperResult

    out = tmp_path / "new" / "run"

    def planted(self, *args, **kwargs):
        assert list(tmp_path.rglob("checkpoint.json"))  # midway indeed: training wrote its checkpoint
        raise RuntimeError("planted failure")

    with monkeypatch.context() as patch:
        patch.setattr(PaperResult, "save", planted)
        with pytest.raises(RuntimeError, match="planted failure"):
            main([*TINY_TOY, "--out", str(out)])
    assert list(tmp_path.iterdir()) == []
    assert main([*TINY_TOY, "--out", str(out)]) == 0
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["run"]
    before = user_files(out)
    assert "summary.json" in before and "checkpoint/checkpoint.json" in before
    with monkeypatch.context() as patch:
        patch.setattr(PaperResult, "save", planted)
        with pytest.raises(RuntimeError, match="planted failure"):
            main([*TINY_TOY, "--out", str(out)])
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == ["run"] and user_files(out) == before
    capsys.readouterr()


def test_a_toy_that_diverges_before_writing_anything_leaves_no_partial(tmp_path, capsys):
    """Found by the fuzz cover (`toy topic --set joint.lr=1e23`): the run diverged at step 2 and kept an empty
    OUT.partial for a resume, which the next run (with a lower learning rate) then refused as foreign."""
    out = tmp_path / "new" / "run"
    assert main(["toy", "topic", "--no-progress", "--out", str(out), "--set", "joint.lr=1e23"]) == 2
    assert "diverged" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("files", [
    {"summary.json": '{"toy": {}, "pretrained": {}}', "results/report.json": "{}", "report.html": "<p>"},  # report
    {"summary.json": '{"series": "s", "steps": [0, 10]}', "checkpoints/0000-step0.json": "{}"},  # dynamics --out
    {"series.json": '{"checkpoints": []}', "checkpoint/meta.json": "{}", "step_0/model.json": "{}"},  # train-lm
])
def test_toy_out_of_another_commands_folder_is_refused_not_replaced(tmp_path, capsys, files):
    """toy --out REPORT (or a dynamics --out folder, a train-lm series) was taken as an earlier toy run, since it holds
    a summary.json or a checkpoint(s) folder: the run finished and replaced the folder whole (results/, report.html,
    the measured checkpoints gone)."""
    folder = tmp_path / "theirs"
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text, encoding="utf-8")
    before = user_files(tmp_path)
    fails_in_one_line([*TINY_TOY, "--out", str(folder)], capsys, f"--out {folder} is a folder that holds other "
                      "files", error=InputError)
    assert user_files(tmp_path) == before


def test_toy_refuses_a_full_out_or_a_foreign_out_partial_before_training(tmp_path, monkeypatch, capsys):
    import analyses.toy_seeds

    def no_training(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(analyses.toy_seeds, "run_with_seeds", no_training)
    full = tmp_path / "full"
    full.mkdir()
    (full / "notes.txt").write_text("keep", encoding="utf-8")
    fails_in_one_line([*TINY_TOY, "--out", str(full)], capsys, f"--out {full} is a folder that holds other files",
                      error=InputError)
    foreign = tmp_path / "run.partial"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep", encoding="utf-8")
    fails_in_one_line([*TINY_TOY, "--out", str(tmp_path / "run")], capsys,
                      f"{foreign} exists and is not an unfinished run of this command to resume", error=InputError)
    (tmp_path / "file.partial").write_text("keep", encoding="utf-8")
    fails_in_one_line([*TINY_TOY, "--out", str(tmp_path / "file")], capsys, "file.partial exists", error=InputError)
    assert user_files(tmp_path) == {"full": None, "full/notes.txt": b"keep", "run.partial": None,
                                    "run.partial/notes.txt": b"keep", "file.partial": b"keep"}


# ---- mechprobe heads --------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, words", [
    (["--batch-size", "0"], ["--batch-size (sequences per batch) must be >= 1; got 0"]),
    (["--batch-size", "-3"], ["--batch-size", "got -3"]),
    (["--batches", "0"], ["--batches", ">= 1"]),
    (["--top", "0"], ["--top", ">= 1"]),
    (["--seq-len", "1"], ["--seq-len", ">= 2"]),
])
def test_heads_sizes_are_checked_before_the_model_loads(capsys, argv, words):
    # A spec that cannot load proves the check comes first: the size error is reported, not the model.
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", *argv], capsys, *words, error=ConfigError)


@pytest.mark.parametrize("argv, words", [
    (["--batch-size", "abc"], ["invalid int value: 'abc'", "mechprobe heads --help"]),
    (["--dtype", "float64"], ["invalid choice: 'float64'"]),
    (["--sequence-length", "5"], ["unrecognized arguments"]),
])
def test_heads_argparse_errors_are_one_line(capsys, argv, words):
    fails_in_one_line(["heads", "--model", "minilm-l6", *argv], capsys, *words, error=UsageError)


def test_missing_command_is_one_line(capsys):
    fails_in_one_line([], capsys, "required: COMMAND", error=UsageError)


@pytest.mark.parametrize("device, words", [
    ("gpu", ["--device", "device 'gpu' is not a torch device", "cpu, cuda"]),
    ("meta", ["--device", "runs on cpu, cuda or mps"]),
    pytest.param("cuda", ["no usable CUDA GPU", "use cpu"],
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
])
def test_heads_bad_device(capsys, device, words):
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", "--device", device], capsys, *words, error=UsageError)


def test_heads_json_path_that_is_a_folder_or_inside_a_file(tmp_path, capsys):
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", "--json", str(tmp_path)], capsys, "is a folder",
                      error=InputError)
    blocker = tmp_path / "file"
    blocker.write_text("", encoding="utf-8")
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", "--json", str(blocker / "x.json")], capsys,
                      "is a file, not a folder", error=InputError)
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", "--html", str(tmp_path)], capsys,
                      "--html", "is a folder", error=InputError)
    fails_in_one_line(["heads", "--model", "not-loaded-xyz", "--html", str(tmp_path / "missing" / "h.html")], capsys,
                      "does not exist", error=InputError)


@pytest.mark.parametrize("command", [["heads"], ["ablate", "--heads", "1.0"], ["circuit"]])
def test_a_seq_len_longer_than_the_context_names_the_flag(command, tmp_path, capsys):
    """These advised "Use seq_len <= 255", the library's argument, which no command has: the fix is --seq-len."""
    out = [] if command == ["heads"] else ["--out", str(tmp_path / "out")]
    fails_in_one_line([*command, "--model", "minilm-l6", "--seq-len", "300", "--batches", "2", "--batch-size", "1",
                       "--no-progress", *out], capsys, "--seq-len 300: the repeated block [BOS] X X needs 601 "
                      "positions, more than the context of 512 of", "; give --seq-len 255 or less.", error=InputError)
    assert not (tmp_path / "out").exists()


def model_folder(path, config) -> str:
    path.mkdir()
    (path / "config.json").write_text(config if isinstance(config, str) else json.dumps(config), encoding="utf-8")
    return str(path)


def test_heads_model_folder_of_an_unsupported_architecture(tmp_path, capsys):
    folder = model_folder(tmp_path / "xlnet", {"architectures": ["XLNetLMHeadModel"], "model_type": "xlnet"})
    fails_in_one_line(["heads", "--model", folder, *TINY_HEADS], capsys, "'xlnet' checkpoint", "XLNetLMHeadModel",
                      "cannot wrap", "GPT2LMHeadModel", error=ModelError)
    folder = model_folder(tmp_path / "foo", {"architectures": ["FooForCausalLM"], "model_type": "foo"})
    fails_in_one_line(["heads", "--model", folder, *TINY_HEADS], capsys, "'foo' checkpoint", error=ModelError)


def test_heads_model_folder_with_a_broken_config_or_no_weights(tmp_path, capsys):
    folder = model_folder(tmp_path / "broken", "{not json")
    fails_in_one_line(["heads", "--model", folder, *TINY_HEADS], capsys, "is not valid JSON", error=ModelError)
    folder = model_folder(tmp_path / "empty", {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 1,
                                                "n_head": 2, "n_embd": 8, "vocab_size": 10, "n_positions": 16})
    fails_in_one_line(["heads", "--model", folder, *TINY_HEADS], capsys, "Cannot load the checkpoint",
                      "model.safetensors", error=ModelError)


def test_heads_unknown_pattern_fails_before_the_model_loads(capsys, monkeypatch):
    import analyses.heads

    monkeypatch.setattr(analyses.heads, "load_any_model", lambda *a, **k: pytest.fail("the model was loaded"))
    fails_in_one_line(["heads", "--model", "minilm-l6", "--pattern", "offset:x"], capsys,
                      "Unknown head pattern 'offset:x'", "offset:D", error=ConfigError)


@pytest.mark.parametrize("patterns, words", [
    (["offset:1", "offset:01"], "--pattern offset:01 is the pattern --pattern offset:1 names: it would be"),
    (["induction:2", "induction:002"], "--pattern induction:002 is the pattern --pattern induction:2 names"),
    (["induction", "induction"], "--pattern induction is the pattern --pattern induction names"),
])
def test_heads_one_pattern_given_twice_is_refused_before_the_model_loads(capsys, monkeypatch, patterns, words):
    """``heads --pattern offset:1 --pattern offset:01`` once scored the same pattern twice, as two kinds."""
    import analyses.heads
    from probes import head_pattern

    monkeypatch.setattr(analyses.heads, "load_any_model", lambda *a, **k: pytest.fail("the model was loaded"))
    argv = ["heads", "--model", "minilm-l6", *(arg for pattern in patterns for arg in ("--pattern", pattern))]
    fails_in_one_line(argv, capsys, words, "give each pattern once.", error=ConfigError)
    assert head_pattern("offset:01").name == "offset:1" and head_pattern("offset:-02").name == "offset:-2"


def test_heads_empty_model_spec(capsys):
    fails_in_one_line(["heads", "--model", "", *TINY_HEADS], capsys, "--model", "the model is empty", error=UsageError)


# ---- mechprobe report -------------------------------------------------------------------------------

def report_argv(tmp_path, *argv: str) -> list[str]:
    return ["report", "--no-toys", "--fast", "--no-progress", "--model", "minilm-l6", "--out",
            str(tmp_path / "report"), *argv]


@pytest.mark.parametrize("argv, words, error", [
    (["--batch-size", "0"], ["--batch-size must be >= 1; got 0"], ConfigError),
    (["--batch-size", "-3"], ["--batch-size must be >= 1; got -3"], ConfigError),
    (["--max-batches", "3"], ["--max-batches must be >= 4"], ConfigError),
    (["--device", "gpu"], ["--device", "not a torch device"], UsageError),
    (["--toy-seeds", "0"], ["toy_seeds must be an integer >= 1; got 0"], ConfigError),
    (["--corpus", ""], ["--corpus", "the value is empty"], UsageError),
    (["--corpus", "/no/such/corpus.txt"], ["--corpus", "Unknown corpus"], InputError),
])
def test_report_settings_are_checked_before_any_work(tmp_path, capsys, argv, words, error):
    fails_in_one_line(report_argv(tmp_path, *argv), capsys, *words, error=error)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["--budget-minutes", "5"], "--budget-minutes sets how --settle settles; add --settle, or drop it."),
    (["--max-tokens", "1000"], "--max-tokens sets how --settle settles"),
    (["--budget-minutes", "5", "--max-tokens", "1000"], "--budget-minutes and --max-tokens set how --settle settles"),
])
def test_report_settle_budgets_without_settle_are_refused(tmp_path, capsys, monkeypatch, argv, words):
    """``report --budget-minutes 5`` without ``--settle`` once ran the fixed-sample report and ignored the budget."""
    import analyses.report.build

    monkeypatch.setattr(analyses.report.build, "run_report", lambda *a, **k: pytest.fail("the report ran"))
    fails_in_one_line(report_argv(tmp_path, *argv), capsys, words, error=ConfigError)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(analyses.report.build, "run_report", lambda config, out, **k: Path(out) / "report.html")
    assert main(report_argv(tmp_path, *argv, "--set", "settle.enabled=true")) == 0  # --settle by its setting


@pytest.mark.parametrize("argv, words", [
    (["--toy-preset", "paper"], "--toy-preset sets the toy models, which this report skips (--no-toys); drop it"),
    (["--toy-seeds", "3"], "--toy-seeds sets the toy models"),
    (["--toy-preset", "fast", "--toy-seeds", "3"], "--toy-preset and --toy-seeds set the toy models"),
])
def test_report_toy_flags_with_no_toys_are_refused(tmp_path, capsys, monkeypatch, argv, words):
    """``report --no-toys --toy-preset standard`` (or ``--toy-seeds 3``) once ran without any toy, the flag ignored."""
    import analyses.report.build

    monkeypatch.setattr(analyses.report.build, "run_report", lambda *a, **k: pytest.fail("the report ran"))
    fails_in_one_line(report_argv(tmp_path, *argv), capsys, words, error=ConfigError)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(analyses.report.build, "run_report", lambda config, out, **k: Path(out) / "report.html")
    assert main([arg for arg in report_argv(tmp_path, *argv) if arg != "--no-toys"]) == 0  # with the toys


@pytest.mark.slow  # about 25 s: two reports (the second with --debug) up to the first model's ordering finding
def test_report_with_too_little_text_to_rank_the_ordering_names_the_flag(tmp_path, capsys):
    """``report --max-batches 4`` on a small model once ended 'Too few co-occurring topic tokens to rank; probe more
    text (raise max_batches).': the report has no such setting (``--set max_batches=`` is refused as unknown)."""
    from tests.random_checkpoints import make_random_checkpoint

    neox = make_random_checkpoint("gpt_neox", tmp_path / "neox", seed=0)
    fails_in_one_line(["report", "--no-toys", "--fast", "--no-progress", "--model", str(neox), "--max-batches", "4",
                       "--out", str(tmp_path / "report")], capsys,
                      "Too few co-occurring topic tokens to rank; probe more text: give --max-batches more than 4.",
                      error=InputError)
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("command", [["heads", "--batches", "2", "--no-progress"], ["plan", "--tokens", "64"]])
def test_json_that_is_a_file_of_the_model_read_is_refused_before_any_work(tmp_path, capsys, command):
    """``heads --model DIR --json DIR/config.json`` (or ``plan``) once wrote its scores over the model's config.json:
    the model no longer loaded ('Should have a `model_type` key in its config.json')."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "gpt_neox"}', encoding="utf-8")
    for spec, target in ((str(model), model / "config.json"), (f"{model}/", model / "config.json")):
        fails_in_one_line([command[0], "--model", spec, "--json", str(target), *command[1:]], capsys,
                          f"--json {target} is a file of --model {spec}, which this command reads: writing it would "
                          f"replace it; give a path outside {spec}.", error=InputError)
        assert (model / "config.json").read_text(encoding="utf-8") == '{"model_type": "gpt_neox"}'
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]


@pytest.mark.parametrize("routes, words", [
    ("bare,,suite", "--routes takes a comma-separated list"), ("bare,", "--routes takes a comma-separated list"),
    (",", "--routes takes a comma-separated list"), ("bare,bare", "--routes bare,bare: bare is named twice"),
    ("suite, bridge,suite", "suite is named twice"),
])
def test_plan_routes_with_an_empty_or_repeated_item_are_refused(tmp_path, capsys, monkeypatch, routes, words):
    """``plan --routes bare,,suite`` once dropped the empty item, and ``bare,bare`` measured the route twice."""
    import analyses.plan.shapes

    monkeypatch.setattr(analyses.plan.shapes, "meta_models", lambda *a, **k: pytest.fail("a model was built"))
    fails_in_one_line(["plan", "--model", "smollm2-135m", "--tokens", "64", "--routes", routes], capsys, words,
                      error=ConfigError)


@pytest.mark.parametrize("second", ["{m}/", "./m", "{m}", "link"])
def test_report_one_model_given_twice_is_refused(tmp_path, capsys, monkeypatch, second):
    """``report --model m --model m/`` once measured and reported one folder as two models (the same spelling twice
    was dropped silently)."""
    import analyses.report.build

    (tmp_path / "m").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(analyses.report.build, "run_report", lambda *a, **k: pytest.fail("the report ran"))
    again = second.format(m=tmp_path / "m")
    fails_in_one_line(["report", "--no-toys", "--fast", "--no-progress", "--out", str(tmp_path / "out"), "--model",
                       str(tmp_path / "m"), "--model", again], capsys,
                      f"--model {again} is the model --model {tmp_path / 'm'} names already", error=ConfigError)
    assert not (tmp_path / "out").exists()


def test_report_unknown_toy_preset_fails_before_any_work(tmp_path, capsys):
    argv = ["report", "--fast", "--no-progress", "--toy-preset", "huge", "--out", str(tmp_path / "report")]
    fails_in_one_line(argv, capsys, "--toy-preset 'huge'", "choose from", error=ConfigError)
    assert list(tmp_path.iterdir()) == []


def test_report_out_that_is_a_file_a_missing_folder_or_the_current_one(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("keep me", encoding="utf-8")
    fails_in_one_line(["report", "--no-toys", "--out", str(target)], capsys, "is a file, not a folder",
                      error=InputError)
    assert target.read_text(encoding="utf-8") == "keep me"
    fails_in_one_line(["report", "--no-toys", "--out", str(tmp_path / "missing" / "r")], capsys,
                      "does not exist", "mkdir -p", error=InputError)
    for current in (".", ".."):
        fails_in_one_line(["report", "--no-toys", "--out", current], capsys,
                          "would write into the current folder or one above it", error=InputError)
    fails_in_one_line(["report", "--no-toys", "--out", ""], capsys, "--out is empty", error=InputError)


def test_report_corpus_folder_without_text(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    (folder / "notes.md").write_text("# not a .txt file", encoding="utf-8")
    fails_in_one_line(report_argv(tmp_path, "--corpus", str(folder)), capsys, "holds no .txt files", error=InputError)
    assert not (tmp_path / "report").exists()


@pytest.mark.parametrize("content, words", [
    (b"", ["holds no text", "lower min_chars"]),
    (b"short line\n", ["holds no text", "at least 200 characters"]),
    (b"one paragraph " * 20, ["--corpus", "LDA needs at least 2 non-empty documents", "Give a corpus with more"]),
    (b"x" * 300 + b"\x00\x01\x02 binary", ["looks binary"]),
    ("caf\u00e9 ".encode("latin-1") * 100, ["is not UTF-8 text", "iconv"]),
])
def test_report_bad_corpus_file_leaves_nothing(tmp_path, capsys, content, words):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(content)
    fails_in_one_line(report_argv(tmp_path, "--corpus", str(corpus)), capsys, *words, error=InputError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]


def test_render_of_a_folder_without_results(tmp_path, capsys):
    fails_in_one_line(["render", str(tmp_path)], capsys, "has no results/ folder", error=InputError)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "report.json").write_text("{broken", encoding="utf-8")
    fails_in_one_line(["render", str(tmp_path)], capsys, "is not valid JSON", "Re-run mechprobe report",
                      error=InputError)


def test_render_of_an_empty_missing_or_file_out_names_it_as_given(tmp_path, capsys):
    """render '' said '. has no results/ folder' (the working folder, not what was typed); a missing folder or a
    file was said to have no results/ folder."""
    assert main(["render", ""]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "argument OUT: the value is empty" in err, err
    fails_in_one_line(["render", str(tmp_path / "missing")], capsys, f"{tmp_path / 'missing'}: no such folder; "
                      f"give the folder mechprobe report --out wrote.", error=InputError)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    fails_in_one_line(["render", str(tmp_path / "file")], capsys, f"{tmp_path / 'file'} is a file, not a folder",
                      error=InputError)


@pytest.mark.parametrize(("files", "words"), [
    (["series.json", "step_0/model.json"], "is a checkpoint series (mechprobe report --series"),
    (["summary.json", "dynamics.png", "checkpoints/0000-step0.json"], "is the --out folder of mechprobe dynamics"),
    (["summary.json", "parent_share.png"], "is the --out folder of mechprobe toy"),
])
def test_render_of_another_commands_folder_names_what_it_is(tmp_path, capsys, files, words):
    """render of a dynamics --out folder, a checkpoint series (train-lm --out, the toy's OUT/series) or a toy folder
    said 'has no results/ folder: render needs a folder written by mechprobe report (reports from before saved
    results must be re-run)': the wrong cause, an old report."""
    folder = tmp_path / "given"
    for name in files:
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text("{}", encoding="utf-8")
    before = sorted(folder.rglob("*"))
    err = fails_in_one_line(["render", str(folder)], capsys, f"{folder} {words}", "give the folder mechprobe "
                            "report --out wrote", error=InputError)
    assert "reports from before saved results" not in err and sorted(folder.rglob("*")) == before


@pytest.mark.parametrize("name", ["summary.json", "report.md", "report.html"])
def test_render_where_a_file_it_writes_is_a_folder_is_refused_before_any_work(tmp_path, capsys, name):
    """``render OUT`` whose report.html is a folder rebuilt the report, rewrote summary.json and report.md, then failed
    '[Errno 21] Is a directory: ...' (an OSError, no fix)."""
    (tmp_path / name / "kept").mkdir(parents=True)
    fails_in_one_line(["render", str(tmp_path)], capsys, f"render {tmp_path}: {tmp_path / name} is not a file, and "
                      f"this command writes its {name} there; move it away, then render again.", error=InputError)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name] and (tmp_path / name / "kept").is_dir()


def test_render_where_the_figures_folder_or_a_figure_is_not_what_it_writes_is_refused(tmp_path, capsys):
    """``render OUT`` with OUT/figures a file failed '[Errno 17] File exists', with a figure a folder '[Errno 21] Is
    a directory' (an OSError, no fix), after rewriting summary.json and report.md."""
    (tmp_path / "figures").write_text("kept", encoding="utf-8")
    fails_in_one_line(["render", str(tmp_path)], capsys, f"{tmp_path / 'figures'} is not a folder, and this command "
                      f"draws the report's figures there; move it away, then render again.", error=InputError)
    (tmp_path / "figures").unlink()
    (tmp_path / "figures" / "verdicts_forest.png").mkdir(parents=True)
    fails_in_one_line(["render", str(tmp_path)], capsys, f"{tmp_path / 'figures' / 'verdicts_forest.png'} is not a "
                      f"file, and this command writes its verdicts_forest.png there", error=InputError)


# ---- every command: output folders, integers and seeds, head sets (issue 38) --------------------------------------

def out_argv(command: str, out: str) -> list[str]:
    """A command line of ``command`` whose only bad input is ``--out OUT`` (the model is never loaded)."""
    return {"ablate": ["ablate", "--model", "not-loaded-xyz", "--heads", "1.0", "--no-progress"],
            "probe-linear": ["probe-linear", "--model", "not-loaded-xyz", "--target", "parent", "--no-progress"],
            "toy": ["toy", "scansnap", "--no-progress"],
            "report": ["report", "--no-toys", "--fast", "--no-progress", "--model", "not-loaded-xyz"]}[command] + [
        "--out", out]


def user_files(folder) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize("command", ["ablate", "probe-linear", "toy", "report"])
@pytest.mark.parametrize("out, words", [
    ("", ["--out is empty"]),
    (".", ["--out '.' would write into the current folder or one above it"]),
    ("..", ["would write into the current folder or one above it"]),
    ("file", ["--out", "is a file, not a folder"]),
    ("file/sub", ["is a file, not a folder"]),
    ("full", ["--out full is a folder that holds other files", "new or empty folder"]),
    ("/proc/mechprobe/out", ["--out /proc/mechprobe/out: cannot write in /proc"]),
])
def test_every_out_folder_is_checked_before_any_work_and_nothing_is_touched(tmp_path, capsys, monkeypatch, command,
                                                                            out, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "file").write_text("keep", encoding="utf-8")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "notes.txt").write_text("keep", encoding="utf-8")
    (tmp_path / "summary.json").write_text("keep", encoding="utf-8")  # `--out ''` once overwrote it
    before = user_files(tmp_path)
    fails_in_one_line(out_argv(command, out), capsys, *words, error=InputError)
    assert user_files(tmp_path) == before


def test_an_earlier_output_of_the_same_command_is_replaced_whole(tmp_path, capsys, monkeypatch):
    import analyses.ablate
    from tests.probes.causal.planted_models import PlantedInductionModel

    monkeypatch.setattr(analyses.ablate, "load_any_model", lambda spec, **kwargs: PlantedInductionModel())
    out = tmp_path / "new" / "run"  # parent folders are made (at the end)
    argv = ["ablate", "--model", "planted", "--heads", "1.0", "--seq-len", "4", "--batches", "2", "--draws", "3",
            "--no-control", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    (out / "stale.txt").write_text("from before", encoding="utf-8")
    assert main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ablation.json"]
    capsys.readouterr()


@pytest.mark.parametrize("argv, words", [
    (["heads", "--model", "x", "--seed", "99999999999999999999999"],
     ["argument --seed: 99999999999999999999999 does not fit in 64 bits"]),
    (["heads", "--model", "x", "--batches", "-99999999999999999999999"], ["argument --batches", "64 bits"]),
    (["heads", "--model", "x", "--seed", "-1"], ["argument --seed", "0 <= seed < 2**32", "got -1"]),
    (["ablate", "--model", "x", "--heads", "1.0", "--out", "o", "--seed", "4294967296"],
     ["argument --seed", "0 <= seed < 2**32", "got 4294967296"]),
    (["ablate", "--model", "x", "--heads", "1.0", "--out", "o", "--draws", str(2**63)],
     ["argument --draws", "64 bits"]),
    (["toy", "scansnap", "--out", "o", "--seeds", str(2**64)], ["argument --seeds", "64 bits"]),
    (["report", "--no-toys", "--out", "o", "--seed", "-1"], ["argument --seed", "0 <= seed < 2**32"]),
    (["report", "--no-toys", "--out", "o", "--max-batches", str(2**70)], ["argument --max-batches", "64 bits"]),
    (["report", "--no-toys", "--out", "o", "--settle", "--budget-minutes", "0"], ["argument --budget-minutes", "> 0"]),
    (["report", "--no-toys", "--out", "o", "--settle", "--max-tokens", "0"], ["argument --max-tokens", ">= 1"]),
])
def test_integers_past_64_bits_and_seeds_out_of_range_are_usage_errors(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    fails_in_one_line(argv, capsys, *words, error=UsageError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, words", [
    (["toy", "scansnap", "--set", "train.seed=-1"], ["--set train.seed", "0 <= seed < 2**32", "got -1"]),
    (["toy", "scansnap", "--set", "train.seed=99999999999999999999999"], ["--set train.seed", "2**63"]),
    (["probe-linear", "--model", "x", "--target", "parent", "--set", "seed=4294967296"],
     ["--set seed", "0 <= seed < 2**32"]),
    (["probe-linear", "--model", "x", "--target", "parent", "--set", f"max_batches={2**63}"],
     ["--set max_batches", "2**63"]),
    (["report", "--no-toys", "--set", "topics.seed=-3"], ["--set topics.seed", "0 <= seed < 2**32", "got -3"]),
])
def test_set_integers_and_seeds_have_the_same_range_as_the_flags(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    fails_in_one_line([*argv, "--out", "o"], capsys, *words, error=ConfigError)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def planted_everywhere(monkeypatch):
    """`mechprobe heads` and `ablate` load the planted 2 x 4-head model (context 64) whatever --model says."""
    import analyses.ablate
    import analyses.heads
    from tests.probes.causal.planted_models import PlantedInductionModel

    for module in (analyses.ablate, analyses.heads):
        monkeypatch.setattr(module, "load_any_model", lambda spec, **kwargs: PlantedInductionModel())


ABLATE = ["ablate", "--model", "planted", "--seq-len", "4", "--batches", "2", "--draws", "3", "--no-control",
          "--no-progress"]


@pytest.mark.parametrize("flags, words", [
    (["--top", "induction:8"], ["--top induction:8: 8 heads, but the model has 8 (2 layers x 4)", "fewer than 8"]),
    (["--top", "induction:100"], ["--top induction:100", "the model has 8"]),
    (["--heads", "0.0,0.1,0.2,0.3,1.0,1.1,1.2,1.3"], ["--heads", "8 heads, but the model has 8"]),
    (["--top", "offset:1000:2"], ["--top offset:1000: the pattern has no target", "|X| = 4"]),
    (["--top", f"offset:{2**64}:2"], ["--top offset:18446744073709551616: the distance does not fit in 64 bits"]),
    (["--heads", "1.0,,1.1"], ["--heads must be LAYER.HEAD pairs", "'1.0,,1.1'"]),
    (["--heads", "1.0,"], ["--heads must be LAYER.HEAD pairs"]),
    (["--heads", "1.0", "--draws", "-1"], ["--draws (n_draws) must be an integer >= 0; got -1"]),
    (["--heads", "1.0", "--max-rows", "0"], ["--max-rows (max_rows) must be an integer >= 1"]),
])
def test_ablate_head_sets_the_model_cannot_take_are_refused(planted_everywhere, tmp_path, capsys, flags, words):
    base = without_flags(tuple(ABLATE), [flag for flag in flags if flag.startswith("--")])  # each flag given once
    fails_in_one_line([*base, *flags, "--out", str(tmp_path / "run")], capsys, *words, error=ConfigError)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("pattern, words", [
    ("offset:1000", ["--pattern offset:1000: the pattern has no target in X X with |X| = 3 (6 positions)"]),
    ("induction:50", ["--pattern induction:50: the pattern has no target"]),
    (f"offset:{2**63}", ["the distance does not fit in 64 bits"]),
])
def test_heads_pattern_without_a_target_at_this_length_is_refused(planted_everywhere, tmp_path, capsys, pattern,
                                                                  words):
    json_path = tmp_path / "scores.json"
    fails_in_one_line(["heads", "--model", "planted", *TINY_HEADS[2:-1], "--seq-len", "3", "--pattern", pattern,
                       "--json", str(json_path)], capsys, *words, error=ConfigError)
    assert not json_path.exists()


# ---- settings a preset or a model kind does not use (issue 38) -----------------------------------------


@pytest.mark.parametrize("preset, setting, unused", [
    ("fast", "train.n_steps=0", "train.n_steps (the staged schedule runs train.stage_steps"),
    ("paper", "train.stage_steps=1,1,1", "train.stage_steps (the joint schedule runs train.n_steps"),
    ("paper", "standard_train.lr=0.1", "standard_train (the simplified model is built from simplified"),
    ("standard", "train.lr_c=2", "train (the standard model trains by standard_train)"),
])
def test_toy_settings_the_preset_does_not_use_are_refused_by_name(tmp_path, capsys, preset, setting, unused):
    out = tmp_path / "out"
    fails_in_one_line(["toy", "induction", "--preset", preset, "--set", setting, "--out", str(out)], capsys,
                      f"--set {setting.partition('=')[0]}:", f"does not use {unused}", "drop the setting",
                      error=ConfigError)
    assert not out.exists()


@pytest.mark.parametrize("settings, words", [
    (["distances=100000"], "distances: 100000 has no target in rows of seq_len 128 tokens"),
    (["distances=1,128"], "distances: 128 has no target in rows of seq_len 128 tokens"),
    (["seq_len=3", "distances=1,2,3"], "reaches back at most 2); give distances <= 2, or (mechprobe probe-linear) a "
                                       "larger --set seq_len."),
])
def test_probe_linear_distances_with_no_target_in_a_row_are_refused_before_the_model_loads(
        tmp_path, capsys, monkeypatch, settings, words):
    """``--set distances=100000`` once loaded the model and probed it, then failed with 'The kept examples of
    '100000' hold 0 class(es) ... Feed more text or choose more classes.': the wrong cause, after the work."""
    import analyses.linear.experiment

    monkeypatch.setattr(analyses.linear.experiment, "load_any_model", lambda *a, **k: pytest.fail("the model loaded"))
    sets = [item for setting in settings for item in ("--set", setting)]
    fails_in_one_line(["probe-linear", "--model", "minilm-l6", "--target", "parent", "--out", str(tmp_path / "out"),
                       *sets], capsys, words, error=ConfigError)
    assert list(tmp_path.iterdir()) == []


def test_probe_linear_settings_the_model_kind_does_not_use_are_refused_by_name(tmp_path, capsys):
    import dataclasses

    from analyses.scansnap.config import PRESETS
    from analyses.toy_model_store import save_toy_model
    from tests.random_checkpoints import make_random_checkpoint
    from toymodels.scansnap.model import YZModelConfig, YZTransformer

    toy = tmp_path / "toy"
    toy.mkdir()
    data = PRESETS["fast"].data
    save_toy_model(YZTransformer(YZModelConfig(d_vocab=data.d_vocab, n_ctx=data.seq_len)), toy, "scansnap")
    (toy / "summary.json").write_text(json.dumps({"settings": dataclasses.asdict(PRESETS["fast"])}))
    out = tmp_path / "out"
    base = ["probe-linear", "--target", "next", "--out", str(out), "--no-progress"]
    fails_in_one_line([*base, "--model", str(toy), "--dtype", "float16"], capsys, "--dtype does not apply to a toy "
                      "folder", "drop --dtype", error=ConfigError)
    for setting in ("distances=1,2", "seq_len=64", "corpus=wikitext-2"):
        fails_in_one_line([*base, "--model", str(toy), "--set", setting], capsys,
                          f"--set {setting.partition('=')[0]}: a toy folder does not use", error=ConfigError)
    neox = make_random_checkpoint("gpt_neox", tmp_path / "neox", seed=0)  # context 512
    base[2] = "parent"
    fails_in_one_line([*base, "--model", str(neox), "--set", "toy_sequences=10"], capsys,
                      "--set toy_sequences: a pretrained model does not use toy_sequences", error=ConfigError)
    fails_in_one_line([*base, "--model", str(neox), "--set", "seq_len=600"], capsys,
                      "--set seq_len=600 is longer than", "context (512 tokens); give seq_len <= 512",
                      error=ConfigError)
    assert not out.exists()


def test_probe_linear_on_a_model_folder_without_tokenizer_files_says_so(tmp_path, capsys):
    from tests.random_checkpoints import make_random_checkpoint

    neox = make_random_checkpoint("gpt_neox", tmp_path / "neox", seed=0)
    for path in neox.iterdir():
        if "token" in path.name:
            path.unlink()
    fails_in_one_line(["probe-linear", "--model", str(neox), "--target", "parent", "--out", str(tmp_path / "out"),
                       "--no-progress"], capsys, "turns text into no tokens", "tokenizer.save_pretrained",
                      error=InputError)
    assert not (tmp_path / "out").exists()


def _torch_error(size: int) -> RuntimeError:
    try:
        torch.empty(size, dtype=torch.int64)
    except RuntimeError as error:
        return error
    raise AssertionError(f"torch allocated {size} int64 values")


def test_a_size_the_machine_cannot_hold_is_told_from_any_other_error():
    """Overflowing sizes (2**62 values) and allocations past the machine's memory (2**40) are refused as sizes;
    any other error is not (it keeps its traceback: a bug is not bad input)."""
    for size in (2**62, 2**40):
        refusal = size_refusal(_torch_error(size))
        assert refusal is not None and refusal.startswith("out of memory (") and "lower it" in refusal, refusal
    assert size_refusal(MemoryError()) is not None
    assert size_refusal(RuntimeError("mat1 and mat2 shapes cannot be multiplied")) is None
    assert size_refusal(ValueError("can't allocate memory")) is None


def test_a_huge_batch_accepted_by_a_config_is_one_line_when_training_allocates_it(tmp_path, capsys):
    """toy topic --set joint.batch_size=2**63-1 passed every check (it is an integer >= 1) and then ended in a
    RuntimeError traceback ('Storage size calculation overflowed') at the first training step."""
    out = tmp_path / "topic"
    code = main(["toy", "topic", "--preset", "fast", "--set", f"joint.batch_size={2**63 - 1}", "--out", str(out),
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("mechprobe: error: out of memory ("), err
    assert list(tmp_path.iterdir()) == []  # no folder and no DIR.partial left


def test_an_error_that_is_not_a_size_keeps_its_traceback(monkeypatch):
    import dataclasses

    import analyses.cli

    def broken(args):
        raise RuntimeError("mat1 and mat2 shapes cannot be multiplied")

    monkeypatch.setattr(analyses.cli, "COMMANDS", tuple(dataclasses.replace(command, run=broken)
                                                         for command in analyses.cli.COMMANDS))
    with pytest.raises(RuntimeError, match="mat1 and mat2"):
        main(["heads", "--model", "smollm2-135m"])


@pytest.mark.parametrize(("argv", "flag", "first"), [
    (["dynamics", "--model", "a", "--model", "b", "--out", "o"], "--model", "--model"),
    (["report", "--no-toys", "--seed", "1", "--seed", "2", "--list-settings"], "--seed", "--seed"),
    (["plan", "--model", "m", "--tokens", "8", "--json", "a.json", "--json", "b.json"], "--json", "--json"),
    (["ablate", "--model", "m", "--heads", "1.0", "--out", "o", "--control", "--no-control"], "--no-control",
     "--control"),
    (["ablate", "--model", "m", "--heads", "1.0", "--heads", "1.1", "--out", "o"], "--heads", "--heads"),
])
def test_a_flag_of_one_value_given_twice_is_a_usage_error(argv, flag, first, capsys):
    """argparse kept the last value silently: dynamics --model A --model B measured B alone, report --seed 1
    --seed 2 ran seed 2, plan --json a --json b wrote b alone, --control --no-control ran without the control."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"argument {flag}: given twice ({first} already); give it once" in err, err


def test_flags_given_once_each_and_repeatable_flags_parse_as_before():
    from analyses.cli import build_parser

    args = build_parser().parse_args(["report", "--no-toys", "--seed", "1", "--model", "a", "--model", "b", "--set",
                                      "x=1", "--set", "y=2", "--out", "o"])
    assert (args.seed, args.models, args.overrides) == (1, ["a", "b"], ["x=1", "y=2"])
    assert "_flags_given" not in vars(args)


def test_a_symbolic_link_that_loops_is_named_as_one(tmp_path, capsys):
    """Python 3.11's Path.resolve raised RuntimeError ('Symlink loop from ...', a traceback) for every output flag
    and for dynamics --compare; a --model that loops was called a path that is not there."""
    from analyses.cli_checks import check_model_spec
    from mechprobe.validation import real_path

    loop = tmp_path / "loop"
    loop.symlink_to("loop")
    with pytest.raises(InputError, match=r"--out .*loop: a symbolic link on it loops"):
        real_path("--out", loop)
    with pytest.raises(InputError, match="a symbolic link on it loops"):
        check_model_spec("--model", str(loop))
    assert real_path("--out", tmp_path / "new" / "x") == (tmp_path / "new" / "x").resolve()
    fails_in_one_line(["toy", "scansnap", "--out", str(loop)], capsys, "--out", "loops")
    assert loop.is_symlink() and not (tmp_path / "loop.partial").exists()
    fails_in_one_line(["render", str(loop)], capsys, "render", "a symbolic link on it loops")
