"""A file written through a temporary file beside it and renamed into place, so that a crash never leaves half of it
under its name: the one temporary-name, fsync, rename and clean-up that every package's writers share
(``probes.core.atomic``'s text files, ``analyses``' figures, ``toymodels.training``'s checkpoint files)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from mechprobe.errors import InputError


def check_parent(path: Path) -> None:
    """``path``'s folder exists (an :class:`InputError` saying how to make it otherwise)."""
    if not path.parent.is_dir():
        raise InputError(
            f"Cannot write {path}: the folder {path.parent} does not exist. Create it first "
            f"(mkdir -p {path.parent}) or choose another path."
        )


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], *, fsync: bool = False, keep_suffix: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` for a block to write; renamed to ``path`` when the block succeeds, removed on
    error or interrupt, so that a run stopped while writing leaves the earlier file or none, never half of the new
    one. Its name is ``.NAME.XXXX.tmp`` followed by ``path``'s suffix (for writers that choose the format by it: a
    figure's ``savefig``), or by nothing with ``keep_suffix=False``. With ``fsync`` the written file is synced to
    disk before the rename (a crash after it leaves the new file whole, not empty)."""
    path = Path(path)
    check_parent(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}" if keep_suffix else ".tmp",
                               dir=path.parent)
    try:
        os.close(fd)
        yield Path(tmp)
        if fsync:
            with open(tmp, "rb+") as handle:
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
