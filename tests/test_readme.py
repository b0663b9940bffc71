"""The README's Python example runs as written (in a scratch folder)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.mark.slow
def test_readme_python_example_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    assert blocks, "the README has no Python example"
    (tmp_path / "runs").mkdir()
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(blocks[0], "README.md", "exec"), namespace)  # our own documentation
    assert namespace["scores"].top_heads("induction", 1)[0][2] > 0.5
    assert (tmp_path / "runs" / "smollm2-heads" / "result.json").is_file()
