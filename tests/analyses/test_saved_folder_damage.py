"""Every file mechprobe reads back, damaged in turn: a toy folder given to ``probe-linear`` and a report's ``results/``
and toy folder given to ``render``. Each damage (truncated, another container, a key removed or added, not UTF-8,
a corrupt safetensors file, the file or its folder deleted) is refused with exit 2 in one ``mechprobe: error:`` line
that names the damaged file and what to re-run, with no traceback, and leaves every other file as it was.

The toy folder is made by hand (a Scan and Snap model at the fast preset's sizes and its settings), the report by
``mechprobe report`` on a tiny random-weight GPT-NeoX with the topic toy (about 40 s on 2 busy cores: slow).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from analyses.cli import main
from analyses.scansnap.config import PRESETS
from analyses.toy_model_store import save_toy_model
from probes.core.atomic import atomic_write_text
from tests.random_checkpoints import make_random_checkpoint
from toymodels.scansnap.model import YZModelConfig, YZTransformer

Damage = Callable[[Path], None]


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def not_utf8(path: Path) -> None:
    path.write_bytes(b"\xff\xfe" + path.read_bytes())


def delete(path: Path) -> None:
    shutil.rmtree(path) if path.is_dir() else path.unlink()


def looping_link(path: Path) -> None:
    path.unlink()
    path.symlink_to(path.name)


def _edit(change: Callable[[object], object]) -> Damage:
    def damage(path: Path) -> None:
        path.write_text(json.dumps(change(json.loads(path.read_text(encoding="utf-8")))), encoding="utf-8")
    return damage


def _swap_container(document: object) -> object:
    """The first value that is an object or a list becomes the other container (an empty list when none is)."""
    assert isinstance(document, dict)
    key = next((k for k, v in document.items() if isinstance(v, (dict, list))), next(iter(document)))
    return {**document, key: {} if isinstance(document[key], list) else []}


def _remove_key(document: object) -> object:
    assert isinstance(document, dict)
    first = next(iter(document))
    return {k: v for k, v in document.items() if k != first}


def _extra_key(document: object) -> object:
    assert isinstance(document, dict)
    return {**document, "extra_key": 1}


JSON_DAMAGES: dict[str, Damage] = {
    "truncated": truncate, "not_utf8": not_utf8, "deleted": delete,
    "a_list_not_an_object": _edit(lambda document: [document]),
    "a_field_of_the_other_container": _edit(_swap_container),
    "a_key_removed": _edit(_remove_key),
}
def other_shapes(path: Path) -> None:
    """Every tensor one row longer (a 0-d one, one value long): a whole file, of another run's shapes."""
    from safetensors.torch import load_file, save_file

    save_file({name: torch.cat([t, t[:1]]) if t.dim() else t.reshape(1)
               for name, t in load_file(str(path)).items()}, str(path))


BINARY_DAMAGES: dict[str, Damage] = {"truncated": truncate, "deleted": delete,
                                     "garbage": lambda path: path.write_bytes(b"not a safetensors file" * 4),
                                     "tensors_of_other_shapes": other_shapes}


def snapshot(folder: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def refused(argv: list[str], capsys) -> str:
    """``mechprobe ARGV`` exits 2 with one error line and prints nothing else; returns the line."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mechprobe: error: "), captured.err
    assert "Traceback" not in captured.err and captured.out == ""
    return lines[0]


# -- a toy folder, read by probe-linear -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def toy_folder(tmp_path_factory) -> Path:
    settings = PRESETS["fast"]
    folder = tmp_path_factory.mktemp("toy") / "scansnap"
    folder.mkdir()
    model = YZTransformer(YZModelConfig(d_vocab=settings.data.d_vocab, n_ctx=settings.data.seq_len))
    save_toy_model(model, folder, "scansnap")
    atomic_write_text(folder / "summary.json", json.dumps({"settings": dataclasses.asdict(settings)}))
    return folder


def probe_linear(folder: Path, out: Path) -> list[str]:
    return ["probe-linear", "--model", str(folder), "--target", "next", "--out", str(out), "--no-progress",
            "--set", "toy_sequences=64", "--set", "n_boot=20", "--set", "n_folds=2", "--set", "control=false"]


def test_the_undamaged_toy_folder_is_probed(toy_folder, tmp_path, capsys):
    assert main(probe_linear(toy_folder, tmp_path / "out")) == 0
    assert (tmp_path / "out" / "summary.json").is_file()


TOY_CASES = [(name, kind, damage) for name in ("model.json", "summary.json") for kind, damage in JSON_DAMAGES.items()]
TOY_CASES += [("model.json", "an_extra_key", _edit(_extra_key))]
TOY_CASES += [("model.safetensors", kind, damage) for kind, damage in BINARY_DAMAGES.items()]
TOY_CASES += [(name, "a_looping_link", looping_link) for name in ("model.json", "summary.json", "model.safetensors")]


@pytest.mark.parametrize("name, kind, damage", TOY_CASES, ids=[f"{n}-{k}" for n, k, _ in TOY_CASES])
def test_a_damaged_toy_folder_is_one_line_naming_the_file(toy_folder, tmp_path, capsys, name, kind, damage):
    folder = tmp_path / "scansnap"
    shutil.copytree(toy_folder, folder)
    damage(folder / name)
    before = snapshot(tmp_path)
    line = refused(probe_linear(folder, tmp_path / "out"), capsys)
    assert str(folder / name) in line, line
    assert f"Re-run `mechprobe toy scansnap --out {folder}`" in line or \
        (name == "model.json" and "Re-run `mechprobe toy NAME" in line), line
    assert snapshot(tmp_path) == before  # no --out left, nothing else touched
    if kind == "a_looping_link":  # model.safetensors and summary.json were called "missing" (issue 45)
        assert "is a symbolic link that loops or points nowhere" in line, line


def test_a_damaged_toy_setting_names_the_field(toy_folder, tmp_path, capsys):
    folder = tmp_path / "scansnap"
    shutil.copytree(toy_folder, folder)
    summary = json.loads((folder / "summary.json").read_text())
    summary["settings"]["data"]["seq_len"] = "long"
    (folder / "summary.json").write_text(json.dumps(summary))
    line = refused(probe_linear(folder, tmp_path / "out"), capsys)
    assert f"{folder / 'summary.json'}: settings/data/seq_len: expected an integer; got 'long'." in line, line
    config = json.loads((folder / "model.json").read_text())
    config["config"]["d_vocab"] = [1]
    (folder / "model.json").write_text(json.dumps(config))
    line = refused(probe_linear(folder, tmp_path / "out"), capsys)
    assert f"{folder / 'model.json'}: config/d_vocab: expected an integer; got [1]." in line, line


# -- a report folder, read by render --------------------------------------------------------------------------

REPORT_SETTINGS = ["--fast", "--no-progress", "--toy-seeds", "1", "--set", "toys=topic", "--max-batches", "4",
                   "--batch-size", "4", "--set", "max_documents=300", "--set", "topics.held_out_fraction=0",
                   "--set", "topics.chunk_words=0", "--set", "topics.no_below=3", "--set", "topics.n_topics=4",
                   "--set", "pretrained.n_boot=50", "--set", "pretrained.n_permutations=700",
                   "--set", "pretrained.causal.enabled=false", "--set", "linear.max_examples=200",
                   "--set", "linear.n_boot=50", "--set", "linear.toy_control_draws=1",
                   "--set", "linear.toy_sequences=16"]


@pytest.fixture(scope="module")
def saved_report(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("report")
    model = make_random_checkpoint("gpt_neox", root / "neox", seed=0)
    assert main(["report", "--model", str(model), *REPORT_SETTINGS, "--out", str(root / "report")]) == 0
    return root / "report"


def copy_report(saved: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "report"
    shutil.copytree(saved, folder)
    return folder


def assert_render_refuses(folder: Path, damaged: Path, kind: str, capsys) -> str:
    before = snapshot(folder)
    line = refused(["render", str(folder)], capsys)
    named = str(damaged) in line or (kind == "deleted" and str(damaged.parent) in line)
    assert named and "Re-run mechprobe report" in line, (damaged, kind, line)
    assert snapshot(folder) == before  # nothing rewritten
    return line


@pytest.mark.slow
def test_the_undamaged_report_renders(saved_report, tmp_path, capsys):
    folder = copy_report(saved_report, tmp_path)
    (folder / "report.md").unlink()
    assert main(["render", str(folder)]) == 0
    assert (folder / "report.md").read_bytes() == (saved_report / "report.md").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("kind", [*JSON_DAMAGES, "an_extra_key"])
def test_each_damaged_results_json_is_one_line_naming_the_file(saved_report, tmp_path, capsys, kind):
    damage = JSON_DAMAGES.get(kind, _edit(_extra_key))
    names = sorted(p.relative_to(saved_report) for p in (saved_report / "results").rglob("*.json"))
    assert len(names) >= 8  # report.json, the toy, the model's run, the linear index and 4 linear results
    for name in names:
        folder = copy_report(saved_report, tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}")
        damage(folder / name)
        assert_render_refuses(folder, folder / name, kind, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(BINARY_DAMAGES))
def test_each_damaged_safetensors_file_is_one_line_naming_the_file(saved_report, tmp_path, capsys, kind):
    names = sorted(p.relative_to(saved_report) for p in (saved_report / "results").rglob("*.safetensors"))
    assert len(names) == 5  # the model's run and 4 linear results
    for i, name in enumerate(names):
        folder = copy_report(saved_report, tmp_path / str(i))
        BINARY_DAMAGES[kind](folder / name)
        assert_render_refuses(folder, folder / name, kind, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_linear_result_whose_accuracies_are_not_accuracies_is_refused(saved_report, tmp_path, capsys, value):
    """render drew a linear result whose accuracies were all -1 (or NaN, with examples scored) as it was (issue 45)."""
    from safetensors.torch import load_file, save_file

    names = sorted(p.relative_to(saved_report) for p in (saved_report / "results" / "linear").rglob("*.safetensors"))
    assert len(names) == 4
    for i, name in enumerate(names):
        folder = copy_report(saved_report, tmp_path / str(i))
        tensors = load_file(str(folder / name))
        save_file({k: torch.full_like(t, value) if k.startswith("accuracy/") else t for k, t in tensors.items()},
                  str(folder / name))
        line = assert_render_refuses(folder, folder / name, "edited", capsys)
        assert "accuracies lie in [0, 1]" in line, line


@pytest.mark.slow
def test_a_deleted_folder_or_figure_is_refused_not_drawn_without(saved_report, tmp_path, capsys):
    figures = sorted((saved_report / "toy" / "topic").glob("*.png"))
    assert figures
    parts = [saved_report / "toy", saved_report / "toy" / "topic", figures[0],
             *sorted(p for p in (saved_report / "results").rglob("*") if p.is_dir())]
    for i, part in enumerate(parts):
        folder = copy_report(saved_report, tmp_path / str(i))
        damaged = folder / part.relative_to(saved_report)
        delete(damaged)
        assert_render_refuses(folder, damaged, "deleted", capsys)


@pytest.mark.slow
def test_a_ctrl_c_while_render_draws_a_figure_leaves_every_figure_whole(saved_report, tmp_path, monkeypatch, capsys):
    """render redraws the figures in the user's report folder: a Ctrl-C while one was saved left half a PNG there
    (issue 45); each is now renamed into place, so every figure stays as it was, and render again finishes."""
    from matplotlib.figure import Figure

    folder = copy_report(saved_report, tmp_path)
    figures = {path: path.read_bytes() for path in folder.rglob("*.png")}
    real = Figure.savefig

    def half_then_interrupted(self, path, **kwargs):
        Path(path).write_bytes(b"\x89PNG\r\n\x1a\n")
        raise KeyboardInterrupt

    monkeypatch.setattr(Figure, "savefig", half_then_interrupted)
    assert main(["render", str(folder)]) == 130
    assert capsys.readouterr().err == "mechprobe: interrupted\n"
    assert {path: path.read_bytes() for path in folder.rglob("*.png")} == figures
    assert not [path for path in folder.rglob("*") if ".tmp" in path.name]
    monkeypatch.setattr(Figure, "savefig", real)
    assert main(["render", str(folder)]) == 0
