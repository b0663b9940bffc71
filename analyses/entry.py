"""The ``mechprobe`` console command. Importing the command line takes a few seconds (torch, TransformerLens); a
Ctrl-C meanwhile is one line and exit 130, as it is once a command runs, not a Python traceback."""

from __future__ import annotations

import sys


def main() -> int:
    """Import :mod:`analyses.cli` and run its ``main`` on ``sys.argv``."""
    try:
        from analyses.cli import main as run
    except KeyboardInterrupt:
        print("mechprobe: interrupted while starting; nothing was run", file=sys.stderr)
        return 130
    return run()
