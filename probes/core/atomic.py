"""Write files and folders so that a crash never leaves one that looks complete."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from probes.core.errors import InputError


def _check_parent(path: Path) -> None:
    if not path.parent.is_dir():
        raise InputError(
            f"Cannot write {path}: the folder {path.parent} does not exist. Create it first "
            f"(mkdir -p {path.parent}) or choose another path."
        )


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder, then rename."""
    path = Path(path)
    _check_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temporary path beside ``path`` (with its suffix, for writers that choose the format by it: a figure's
    ``savefig``) for a block to write; renamed to ``path`` when the block succeeds, removed on error, so that a
    run stopped while writing leaves the earlier file or none, never half of the new one."""
    path = Path(path)
    _check_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces ``path`` in one rename.

    An existing ``path`` is kept until the new folder is complete. On error the temporary folder
    is removed and ``path`` is left as it was.
    """
    path = Path(path)
    _check_parent(path)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        replace_directory(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def replace_directory(complete: str | os.PathLike[str], path: str | os.PathLike[str]) -> Path:
    """Put the finished folder ``complete`` at ``path`` (same parent folder) by renames; an existing ``path`` is
    moved aside first and removed only after ``complete`` took its place (stopped between the renames, it is put
    back: the user's folder is never left under a hidden name). Returns ``path``."""
    complete, path = Path(complete), Path(path)
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    try:
        os.replace(complete, path)
    except BaseException:  # a Ctrl-C or error between the renames: the earlier folder goes back to its name
        if old is not None and old.exists() and not path.exists():
            os.replace(old, path)
        raise
    if old is not None:
        try:
            shutil.rmtree(old, ignore_errors=True)
        except BaseException:  # a Ctrl-C while the earlier folder was removed: finish, leave no hidden half of it
            shutil.rmtree(old, ignore_errors=True)
            raise
    return path
