"""Write files and folders so that a crash never leaves one that looks complete (a single file through
:func:`mechprobe.atomic.atomic_file`, shared with the other packages)."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mechprobe.atomic import atomic_file, check_parent


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary ``.NAME.XXXX.tmp`` in the same folder, synced, then rename."""
    path = Path(path)
    with atomic_file(path, fsync=True, keep_suffix=False) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return path


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder; on success it replaces ``path`` in one rename.

    An existing ``path`` is kept until the new folder is complete. On error the temporary folder
    is removed and ``path`` is left as it was.
    """
    path = Path(path)
    check_parent(path)
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
