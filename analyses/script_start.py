"""The first import of every benchmark script: a Ctrl-C while the script imports torch and the rest (a few
seconds) is one line ``SCRIPT: interrupted while starting; nothing was run`` and exit 130, as once its ``main``
runs (:func:`analyses.cli_checks.script_main`, which puts Python's own handler back), not a traceback.

Installed only where the running program is a script of ``benchmarks/`` and SIGINT has Python's default handler
(not where it is ignored, nor in a test process that imports a script).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType


def starting(signum: int, frame: FrameType | None) -> None:
    """SIGINT while the script starts: one line, exit 130 (nothing has been written yet)."""
    print(f"{Path(sys.argv[0]).name}: interrupted while starting; nothing was run", file=sys.stderr, flush=True)
    os._exit(130)


def started() -> None:
    """The script's main runs: a Ctrl-C is a KeyboardInterrupt again (script_main makes it one line)."""
    if signal.getsignal(signal.SIGINT) is starting:
        signal.signal(signal.SIGINT, signal.default_int_handler)


_main = getattr(sys.modules.get("__main__"), "__file__", None) or ""
if Path(_main).resolve().parent.name == "benchmarks" and signal.getsignal(signal.SIGINT) is signal.default_int_handler:
    signal.signal(signal.SIGINT, starting)
