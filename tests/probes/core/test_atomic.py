"""Folders replaced in one rename (:mod:`probes.core.atomic`): a Ctrl-C at any os call of the replacement leaves
``path`` holding the earlier folder or the new one, whole, under its own name, and nothing else (issue 45: stopped
between the renames, the earlier folder was left only as a hidden ``.NAME.old-PID`` and ``NAME`` was gone; stopped
while it was removed, half of it stayed there)."""

from __future__ import annotations

from pathlib import Path

import pytest

import probes.core.atomic as atomic
from probes.core.atomic import atomic_directory
from tests.interrupt_points import raising_at


def write(folder: Path, text: str) -> None:
    (folder / "sub").mkdir(parents=True, exist_ok=True)
    (folder / "a.txt").write_text(text)
    (folder / "sub" / "b.txt").write_text(text)


def contents(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): p.read_text() for p in sorted(folder.rglob("*")) if p.is_file()}


# the replacement's calls: os.replace (the earlier folder aside), os.replace (the new one in), shutil.rmtree (the
# earlier one removed)
@pytest.mark.parametrize("n", [1, 2, 3])
def test_a_ctrl_c_at_any_call_of_a_folder_replacement_keeps_one_whole_folder(tmp_path, monkeypatch, n):
    out = tmp_path / "out"
    write(out, "earlier")
    calls: list[str] = []
    with pytest.raises(KeyboardInterrupt), atomic_directory(out) as tmp:
        write(tmp, "new")
        monkeypatch.setattr(atomic.os, "replace", raising_at(n, calls, "replace", atomic.os.replace))
        monkeypatch.setattr(atomic.shutil, "rmtree", raising_at(n, calls, "rmtree", atomic.shutil.rmtree))
    monkeypatch.undo()
    assert contents(out) == dict.fromkeys(["a.txt", "sub/b.txt"], "earlier" if n < 3 else "new")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
