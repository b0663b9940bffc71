"""The record of one ``mechprobe`` command: its name, help, own flags, run and the shared flags it takes.

Each command declares one :class:`Command` beside its work (``analyses/commands/<name>.py``, or the module of its
subpackage that holds the work: ``analyses/circuit/command.py``); :mod:`analyses.cli` builds the parser and
dispatches from its table of them and declares the shared flags once (:data:`SHARED_FLAGS`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

SHARED_FLAGS = ("device", "dtype", "progress")
"""The flag groups :mod:`analyses.cli` declares once: ``--device`` (where pretrained models run), ``--dtype`` (their
weights) and ``--no-progress``; ``--debug`` after the command is given to every command."""


@dataclass(frozen=True)
class Command:
    """One ``mechprobe NAME`` command.

    ``add_arguments(parser)`` declares its own flags; ``run(args)`` does the work and returns the exit status (a
    :class:`~probes.core.errors.MechprobeError` it raises is one error line and exit 2). ``shared`` names the
    groups of :data:`SHARED_FLAGS` it takes, added after its own flags in that order. ``progress_help`` is its
    ``--no-progress`` help; ``hub_bars``: ``--no-progress`` hides the Hugging Face loading bars too (it loads
    models); ``resumes``: an interrupted run is kept for the same command to resume (Ctrl-C says so).
    Heavy modules are imported inside ``run``, so that ``mechprobe`` starts fast.
    """

    name: str
    help: str
    description: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    shared: tuple[str, ...] = ()
    progress_help: str = "hide the progress bars"
    hub_bars: bool = False
    resumes: bool = False

    def __post_init__(self) -> None:
        unknown = [name for name in self.shared if name not in SHARED_FLAGS]
        if unknown:
            raise ValueError(f"command {self.name}: unknown shared flags {unknown}; choose from "
                             f"{', '.join(SHARED_FLAGS)}.")
