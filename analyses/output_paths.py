"""Where a command writes: output folders and files checked before any work (not the working folder, not under a
file, writable, not inside what the command reads, no folder where it writes a file), and written in one rename at
the end, so that a stopped run leaves nothing half-written and never replaces what the user had.

A command that resumes after a kill (``mechprobe toy``) works in ``OUT.partial`` instead of a temporary folder
(:func:`partial_folder`, :func:`written_resumably`); the same rename puts it at ``OUT`` when it is done.

Example: ``out = check_output_folder("--out", args.out, earlier_output=lambda p: (p / "ablation.json").is_file())``,
then ``with written_atomically(out) as tmp: ...`` writes into ``tmp``, which becomes ``out``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from mechprobe.validation import real_path
from probes.core.atomic import atomic_directory, atomic_write_text, replace_directory
from probes.core.errors import InputError


def _nearest_existing(path: Path) -> Path:
    return next(p for p in (path, *path.parents) if p.exists())


def _check_writable(flag: str, out: str, existing: Path) -> None:
    """A folder can be made in ``existing``, the nearest existing folder of ``flag``'s value ``out``."""
    try:
        tempfile.TemporaryDirectory(dir=existing).cleanup()
    except OSError as error:
        raise InputError(f"{flag} {out}: cannot write in {existing} ({error.strerror}); choose another {flag}."
                         ) from None


def check_output_folder(flag: str, out: str, *, earlier_output: Callable[[Path], bool] = lambda _: False,
                        make_parents: bool = True, writes: Sequence[str] = ()) -> Path:
    """``out`` as a folder this command may write: not empty text, not the working folder (or one above it),
    not a file nor under one, writable, and either new, empty or ``earlier_output`` of this command (which the
    new output replaces), where none of the files it ``writes`` in place is a folder. With ``make_parents=False``
    its parent folder must exist. Checked before any work."""
    if not out.strip():
        raise InputError(f"{flag} is empty; give a new folder such as runs/out.")
    path, real = Path(out), real_path(flag, out)
    if real in (Path.cwd(), *Path.cwd().parents):
        raise InputError(f"{flag} {out!r} would write into the current folder or one above it; give a new folder "
                         f"such as runs/out.")
    existing = _nearest_existing(real)
    if not existing.is_dir():
        where = "" if existing == real else f": {existing}"
        raise InputError(f"{flag} {out}{where} is a file, not a folder; give a folder path (it is created if new).")
    _check_writable(flag, out, existing)
    if not make_parents and not path.exists() and not path.parent.is_dir():
        raise InputError(f"{flag} {out}: the folder {path.parent} does not exist. Create it first (mkdir -p "
                         f"{path.parent}) or choose another {flag}.")
    if path.is_dir() and any(path.iterdir()) and not earlier_output(path):
        raise InputError(f"{flag} {out} is a folder that holds other files; give a new or empty folder (nothing of "
                         f"yours is overwritten).")
    check_files_written(f"{flag} {out}", path, writes, fix=f"move it away or choose another {flag}")
    return path


def check_files_written(where: str, folder: Path, names: Sequence[str], *, fix: str) -> None:
    """Each of the files ``names`` that this command writes in ``folder`` is a file or not there yet (a folder in its
    place failed the write after the work); checked before any work. ``where`` begins the error, ``fix`` ends it."""
    blocked = next((folder / name for name in names if (folder / name).exists() and not (folder / name).is_file()),
                   None)
    if blocked is not None:
        raise InputError(f"{where}: {blocked} is not a file, and this command writes its {blocked.name} there; {fix}.")


def check_outside(flag: str, out: Path, input_flag: str, folder: str, *, suffix: str) -> None:
    """``out`` is neither the folder ``folder`` nor inside it: what a command writes is kept apart from the run it
    reads (a train-lm series is resumed and refined in place). Checked before any work."""
    inside, real = real_path(input_flag, folder), real_path(flag, out)
    if real == inside or real.is_relative_to(inside):
        raise InputError(f"{flag} {out} lies inside {input_flag} {folder}, the run it reads, whose own files it would "
                         f"mix with; give a folder outside it, such as {inside}-{suffix}.")


def check_output_file(flag: str, out: str) -> Path:
    """``out`` as a file this command may write (it is replaced if it exists): not empty text, not a folder, in a
    folder that exists or can be made (not under a file) and is writable. Checked before any work."""
    if not out.strip():
        raise InputError(f"{flag} is empty; give a file path such as runs/out.json.")
    path, real = Path(out), real_path(flag, out)
    if path.is_dir() or real in (Path.cwd(), *Path.cwd().parents):
        raise InputError(f"{flag} {out} is a folder; give a file path such as {path / 'out.json'}.")
    existing = _nearest_existing(real.parent)
    if not existing.is_dir():
        raise InputError(f"{flag} {out}: {existing} is a file, not a folder; give a path in a folder.")
    _check_writable(flag, out, existing)
    return path


def write_output_file(path: str | Path, text: str) -> Path:
    """Write ``text`` to a file :func:`check_output_file` passed: its missing parent folders made, the file
    replaced in one rename (a run stopped part way leaves the earlier file whole, not half of the new one)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, text)


def check_not_read(flag: str, out: str, read_flag: str, spec: str) -> None:
    """``out`` (a file this command writes) is not a file of what ``read_flag`` names (a model folder or file that
    it reads): writing it would replace the input (``--json MODEL/config.json``). Checked before any work."""
    source, target = Path(spec).expanduser(), Path(out).expanduser()
    if source.exists() and target.exists() and real_path(flag, target).is_relative_to(real_path(read_flag, source)):
        raise InputError(f"{flag} {out} is a file of {read_flag} {spec}, which this command reads: writing it would "
                         f"replace it; give a path outside {spec}.")


@contextlib.contextmanager
def written_atomically(out: Path) -> Iterator[Path]:
    """A temporary folder that replaces ``out`` in one rename when the block succeeds; on error nothing is left
    (not the parent folders made for it either)."""
    made = [p for p in out.parents if not p.exists()]
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        with atomic_directory(out) as tmp:
            yield tmp
    except BaseException:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise


PARTIAL_SUFFIX = ".partial"
UNFINISHED_MARK = ".unfinished"
"""The file :func:`written_resumably` puts in the ``OUT.partial`` it makes (removed before the rename to ``OUT``):
the folder is this command's unfinished run, which it takes again whatever stopped it (a kill included, where the
run wrote no checkpoint yet)."""


def _holds_a_file(partial: Path) -> bool:
    return any(path.is_file() and path.name != UNFINISHED_MARK for path in partial.rglob("*"))


def partial_folder(out: Path) -> Path:
    """Where a resumable command works until it is done: ``OUT.partial`` beside ``OUT``."""
    return out.with_name(out.name + PARTIAL_SUFFIX)


def check_partial_folder(flag: str, out: Path, *, resumable: Callable[[Path], bool]) -> Path:
    """``OUT.partial`` is absent, or a run this command can resume (``resumable``), or one it left unfinished
    (:data:`UNFINISHED_MARK`: it starts again there); checked before any work."""
    partial = partial_folder(out)
    if partial.exists() and not (partial.is_dir() and ((partial / UNFINISHED_MARK).is_file() or resumable(partial))):
        raise InputError(f"{flag} {out}: {partial} exists and is not an unfinished run of this command to resume; "
                         f"move it away or choose another {flag}.")
    return partial


@contextlib.contextmanager
def written_resumably(out: Path, *, keep_on: tuple[type[BaseException], ...],
                      resumable: Callable[[Path], bool] = _holds_a_file) -> Iterator[Path]:
    """``OUT.partial`` (made if new) for the command to work in; when the block succeeds it replaces ``out`` in
    one rename. An error of a ``keep_on`` type (an interruption whose checkpoints the same command resumes from)
    leaves ``OUT.partial`` as it is where it is ``resumable`` (what :func:`check_partial_folder` takes: by default,
    any file written); any other error removes it if this call made it (with the parent folders made for it), so
    that no partial output is left; so does a ``keep_on`` error before it held anything to resume (a run that
    diverged at step 2 left an empty ``OUT.partial``, and a Ctrl-C of a toy without checkpoints one with its figures,
    both of which the next run refused). A kill leaves ``OUT.partial`` too, marked (:data:`UNFINISHED_MARK`): the
    next run takes it again."""
    partial = partial_folder(out)
    made = [p for p in (partial, *partial.parents) if not p.exists()]
    try:
        partial.mkdir(parents=True, exist_ok=True)
        if made:
            (partial / UNFINISHED_MARK).touch()
        yield partial
    except keep_on:
        if made and not (partial.is_dir() and resumable(partial)):
            shutil.rmtree(made[-1], ignore_errors=True)
        raise
    except BaseException:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise
    (partial / UNFINISHED_MARK).unlink(missing_ok=True)
    replace_directory(partial, out)
