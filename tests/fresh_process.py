"""Run ``python -m analyses.cli ...`` in a new interpreter (a fresh process: nothing of this one carries over)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_in_fresh_process(args: list[str], out: Path, hash_seed: int) -> subprocess.CompletedProcess:
    """``python -m analyses.cli ARGS --out OUT`` in a new interpreter with the given ``PYTHONHASHSEED``."""
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "analyses.cli", *args, "--out", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mechprobe {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
    return done


def ctrl_c_as_at_a_terminal() -> None:
    """``preexec_fn`` of a child process a test sends SIGINT to (or whose imports raise it): SIGINT at its default
    disposition, so that Python installs its KeyboardInterrupt handler as under a terminal. A background job of a
    non-interactive shell ignores SIGINT, and children inherit that, so without this such a test would see a Ctrl-C
    ignored wherever the suite ran in the background (a CI job, ``nohup make test &``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def fast_toy_args(name: str) -> list[str]:
    """``mechprobe toy NAME --preset fast --no-progress`` (without ``--out``)."""
    return ["toy", name, "--preset", "fast", "--no-progress"]
