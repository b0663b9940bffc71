"""The scripts in examples/ run and find what they say they find."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def load(name: str) -> dict:
    return runpy.run_path(str(EXAMPLES / name), run_name="example")


def test_every_example_is_tested():
    tested = {"probe_your_own_model.py", "toy_vs_pretrained.py", "sharded_heads.py", "quickstart.ipynb"}
    assert {path.name for path in (*EXAMPLES.glob("*.py"), *EXAMPLES.glob("*.ipynb"))} == tested


def test_quickstart_notebook_is_committed_without_outputs():
    nbformat = pytest.importorskip("nbformat")
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)
    assert notebook.metadata.kernelspec.name == "python3"


def test_probe_your_own_model(capsys):
    found = load("probe_your_own_model.py")["main"]()
    assert found["previous_token"] == pytest.approx(1.0) and found["self_head_1"] == pytest.approx(1.0)
    assert found["self"] == pytest.approx(1 / 32)  # only position 0 of head 0 attends to itself
    assert "same_parity" in capsys.readouterr().out


@pytest.mark.slow
def test_toy_vs_pretrained(tmp_path, capsys):
    found = load("toy_vs_pretrained.py")["main"](tmp_path)
    assert found["smollm2-135m"] > 0.5 > found["random weights"]
    assert found["toy"] > 0.5
    assert "toy (Chen et al.)" in capsys.readouterr().out


@pytest.mark.slow
def test_sharded_heads_equal_one_process(tmp_path):
    import probes

    out = tmp_path / "heads.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(EXAMPLES / "sharded_heads.py"), str(out)]
    completed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "2 processes" in completed.stdout
    sharded = probes.ProbeResult.load(out)
    example = load("sharded_heads.py")
    model = probes.load_model("minilm-l6")
    (single,) = probes.run_probes(model, [probes.HeadScoreProbe()], example["batches"](model))
    assert sharded.provenance.n_sequences == single.provenance.n_sequences == 24
    for kind in single.scores:
        assert float((sharded.scores[kind] - single.scores[kind]).abs().max()) < 1e-6, kind
    assert json.loads(out.read_text())["type"] == "HeadScores"


@pytest.mark.slow
def test_quickstart_notebook_runs_headless(monkeypatch):
    """Executes examples/quickstart.ipynb with nbclient on the "python3" kernel, which must be this interpreter
    (ipykernel installed in the same environment), from the repository root so the notebook imports this checkout."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    notebook = nbformat.read(EXAMPLES / "quickstart.ipynb", as_version=4)
    last = "import sys\nimport probes\nprint(sys.prefix, probes.__file__)"
    notebook.cells.append(nbformat.v4.new_code_cell(last))
    monkeypatch.delenv("MPLBACKEND", raising=False)  # the kernel gets the inline backend, as in Jupyter
    nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()

    def output(index: int, kind: str) -> str:
        results = [o for o in notebook.cells[index].outputs if o.output_type in ("execute_result", "display_data")]
        assert results and kind in results[-1]["data"], (index, [list(o.get("data", {})) for o in results])
        return results[-1]["data"][kind]

    sources = [cell.source for cell in notebook.cells]
    heads = output(next(i for i, s in enumerate(sources) if s.rstrip().endswith("\nscores")), "text/html")
    assert heads.count("class='mp-view mp-heatmap'") == 3 and "http" not in heads  # shown, self-contained
    figures = [i for i, s in enumerate(sources) if ".plot(" in s]
    assert len(figures) == 3  # head maps of the model and its control, then the linear probe after the toy ran
    assert all(output(i, "image/png") for i in figures)  # shown as pictures, not "<Figure ...>"
    verdicts = output(next(i for i, s in enumerate(sources) if s.rstrip().endswith("\ntoy")), "text/html")
    assert verdicts.count("<tr class='mp-finding'>") >= 4 and "mp-holds" in verdicts
    prefix, package = notebook.cells[-1].outputs[0].text.split()
    assert Path(prefix) == Path(sys.prefix)  # the kernel is this environment's python
    assert Path(package).resolve().parent.parent == ROOT  # and it imported this checkout
