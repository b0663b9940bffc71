"""mechprobe's own model folders given where a model is expected. A toy folder and a train-lm step are checkpoint
folders (``heads``, ``ablate`` and ``circuit`` refused them as "not a Hugging Face checkpoint (no config.json)"); a
checkpoint series' own folder holds many models and is refused naming its steps and ``dynamics``; ``--dtype`` on a
float32 toy is refused, not ignored; a model without ``hook_z`` is refused before the heads' means are taken (it
was a KeyError traceback)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

import probes
from analyses.cli import main
from analyses.induction.config import PRESETS as INDUCTION
from analyses.induction.findings import build_model
from analyses.toy_model_loader import load_toy_model
from analyses.toy_model_store import save_toy_model
from probes.causal import head_output_means
from probes.core.atomic import atomic_write_text
from probes.core.errors import ModelError
from tests.analyses.test_cli_bad_input import fails_in_one_line

pytestmark = pytest.mark.usefixtures("one_thread")

PROTOCOL = ["--seq-len", "5", "--batches", "2", "--batch-size", "2", "--no-progress"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The fast induction toy at initialisation, saved as a toy run folder, and a 2-step train-lm run."""
    root = tmp_path_factory.mktemp("own")
    config = INDUCTION["fast"]
    toy = root / "induction"
    toy.mkdir()
    save_toy_model(build_model(config), toy, "induction")
    atomic_write_text(toy / "summary.json", json.dumps({"settings": dataclasses.asdict(config)}))
    (root / "text.txt").write_text("\n\n".join(f"line {i} " + "x y z " * (i % 5) for i in range(300)))
    assert main(["train-lm", "--corpus", str(root / "text.txt"), "--out", str(root / "lm"), "--steps", "2",
                 "--set", "vocab=30", "--set", "seq_len=16", "--set", "batch_size=2", "--set", "d_model=16",
                 "--set", "n_checkpoints=2", "--set", "span=4", "--no-progress"]) == 0
    return {"toy": toy, "lm": root / "lm", "step": root / "lm" / "step_2"}


@pytest.mark.parametrize("which", ["toy", "step"])
def test_heads_scores_a_toy_folder_and_a_train_lm_step_as_their_models(folders, which, tmp_path, capsys):
    out = tmp_path / "heads.json"
    assert main(["heads", "--model", str(folders[which]), *PROTOCOL, "--json", str(out)]) == 0
    capsys.readouterr()
    model = load_toy_model(folders[which]).model
    expected = probes.head_scores(model, kinds=("induction", "previous_token", "duplicate_token"), seq_len=5,
                                  n_batches=2, batch_size=2, seed=0, progress=False)
    written = probes.ProbeResult.load(out)
    for kind, scores in expected.scores.items():
        torch.testing.assert_close(written.scores[kind], scores)


def test_ablate_runs_on_a_train_lm_step(folders, tmp_path, capsys):
    argv = ["ablate", "--model", str(folders["step"]), "--heads", "1.0", "--draws", "5", *PROTOCOL, "--out",
            str(tmp_path / "ablate")]
    assert main(argv) == 0
    capsys.readouterr()
    document = json.loads((tmp_path / "ablate" / "ablation.json").read_text())
    result = document["model"]["result"]["result"]
    assert result["heads"] == [[1, 0]] and document["command"]["model"] == str(
        folders["step"])


@pytest.mark.parametrize("command", [["heads"], ["ablate", "--heads", "1.0"], ["circuit"],
                                     ["probe-linear", "--target", "parent"]])
def test_a_checkpoint_series_folder_is_refused_naming_its_steps(folders, command, tmp_path, capsys):
    lm = folders["lm"]
    fails_in_one_line([*command, "--model", str(lm), "--out", str(tmp_path / "out"), "--no-progress"]
                      if command != ["heads"] else [*command, "--model", str(lm), "--no-progress"], capsys,
                      f"{lm} is a checkpoint series (series.json), many models: give one of the step folders it "
                      f"lists, or measure the series over its steps with mechprobe dynamics --model {lm}.",
                      error=ModelError)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("which", ["toy", "step", "lm"])
def test_the_report_says_it_takes_pretrained_models_and_where_toys_go(folders, which, tmp_path, capsys,
                                                                      monkeypatch):
    """``report --model TOY`` said "not a Hugging Face checkpoint (no config.json in it)", and a series folder the
    same, without saying that the report's --model takes pretrained models only (issue 45). Both are refused before
    any work, pointing to the report's own toys and --series."""
    import analyses.report.build

    monkeypatch.setattr(analyses.report.build, "run_report", lambda *a, **k: pytest.fail("the report ran"))
    what = "a checkpoint series (series.json), many models" if which == "lm" else "a toy model's folder"
    fails_in_one_line(["report", "--model", str(folders[which]), "--out", str(tmp_path / "out"), "--no-progress"],
                      capsys, f"--model {folders[which]} is {what}", "--model takes a pretrained model",
                      "The report trains its own toys (--set toys=NAME,...)", "checkpoints with --series DIR",
                      error=ModelError)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("edit", "words"), [
    (lambda v: {**v, "smollm2_ids": v["smollm2_ids"][:1] * 2 + v["smollm2_ids"][2:]}, "its ids repeat"),
    (lambda v: {**v, "other": v["other"] + 1}, "'other' is not their count"),
    (lambda v: {**v, "note": "mine"}, "it holds other keys"),
    (lambda v: {"smollm2_ids": v["smollm2_ids"][:-1], "other": v["other"] - 1}, "the vocabulary is another run's"),
], ids=["an_id_twice", "other_miscounted", "an_extra_key", "another_runs"])
def test_a_train_lm_vocabulary_that_is_not_the_runs_is_refused(folders, edit, words, tmp_path, capsys):
    """A train-lm series' vocab.json with an id twice, a count that disagrees, or the (whole) vocabulary of another
    run was read as it was: every token the step's model read mapped to another word (issue 45)."""
    lm = tmp_path / "lm"
    shutil.copytree(folders["lm"], lm)
    vocab = lm / "vocab.json"
    vocab.write_text(json.dumps(edit(json.loads(vocab.read_text()))))
    fails_in_one_line(["heads", "--model", str(lm / "step_2"), *PROTOCOL], capsys, str(vocab), words)


@pytest.mark.parametrize("command", [["heads"], ["ablate", "--heads", "1.0"], ["circuit"]])
def test_dtype_on_a_toy_folder_is_refused_not_ignored(folders, command, tmp_path, capsys, monkeypatch):
    import analyses.toy_model_loader

    monkeypatch.setattr(analyses.toy_model_loader, "load_toy_model", lambda *a, **k: pytest.fail("a model loaded"))
    out = [] if command == ["heads"] else ["--out", str(tmp_path / "out")]
    fails_in_one_line([*command, "--model", str(folders["toy"]), "--dtype", "float16", *PROTOCOL, *out], capsys,
                      f"--dtype does not apply to a toy folder ({folders['toy']}: its model is float32, as trained); "
                      f"drop --dtype.")
    assert not (tmp_path / "out").exists()


def test_probe_linear_on_a_train_lm_step_says_what_it_takes(folders, tmp_path, capsys):
    """It said "whose target is --target None": no such target."""
    fails_in_one_line(["probe-linear", "--model", str(folders["step"]), "--target", "parent", "--out",
                       str(tmp_path / "out"), "--no-progress"], capsys,
                      f"{folders['step']} holds a train-lm step, whose data has no parent, topic or next-class labels "
                      f"of its own: probe-linear takes a paper toy's folder or a pretrained model. Measure its run "
                      f"with mechprobe dynamics --model {folders['lm']}.")
    assert not (tmp_path / "out").exists()


def test_a_model_without_hook_z_is_refused_before_its_means_are_taken(folders, tmp_path, capsys):
    """The simplified induction toy has no per-head output hook: ``ablate`` gave a KeyError traceback from
    TransformerLens's hook lookup while taking the heads' means."""
    model = load_toy_model(folders["toy"]).model
    batch = probes.repeated_random_tokens(probes.ModelInfo.of(model), seq_len=5, n_sequences=2,
                                          generator=torch.Generator().manual_seed(0))
    with pytest.raises(ModelError, match=r"Head ablation needs each head's output before W_O at blocks\.1\.attn"
                                         r"\.hook_z"):
        head_output_means(model, (1,), [batch])
    fails_in_one_line(["ablate", "--model", str(folders["toy"]), "--heads", "1.0", *PROTOCOL, "--out",
                       str(tmp_path / "out")], capsys, "blocks.1.attn.hook_z", error=ModelError)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["heads", *PROTOCOL], ["probe-linear", "--target", "parent", "--no-progress"]])
def test_weights_holding_nan_are_refused_naming_the_parameter(folders, command, tmp_path, capsys):
    """A toy folder whose weights hold NaN was probed: heads ranked a head of score nan, probe-linear wrote its
    curves (exit 0)."""
    from safetensors.torch import load_file, save_file

    toy = tmp_path / "induction"
    shutil.copytree(folders["toy"], toy)
    weights = load_file(toy / "model.safetensors")
    name = sorted(weights)[0]
    weights[name] = torch.full_like(weights[name], float("nan"))
    save_file(weights, toy / "model.safetensors")
    out = ["--out", str(tmp_path / "out")] if command[0] != "heads" else []
    fails_in_one_line([*command, "--model", str(toy), *out], capsys,
                      f"{toy / 'model.safetensors'}: {name} holds NaN or infinite values: the file is damaged, or its "
                      f"run diverged. Re-run `mechprobe toy induction --out {toy}`", error=ModelError)
    assert not (tmp_path / "out").exists()
