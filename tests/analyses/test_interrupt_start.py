"""Ctrl-C while ``mechprobe`` starts (issue 45: an interrupt during start-up printed a traceback): importing the
command line takes a few seconds, and an interrupt then, or while the parsers are built, is one line and exit 130,
as it is once a command runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import analyses.cli as cli
from analyses.config_overrides import tomllib  # tomllib, or tomli on Python 3.10
from tests.fresh_process import ctrl_c_as_at_a_terminal

ROOT = Path(__file__).resolve().parents[2]
INTERRUPTED = "mechprobe: interrupted while starting; nothing was run"
# The import of analyses.cli interrupted, as a Ctrl-C in those seconds does (in a fresh process).
IMPORT_INTERRUPTED = (
    "import sys\n"
    "class Interrupt:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'analyses.cli':\n"
    "            raise KeyboardInterrupt\n"
    "sys.meta_path.insert(0, Interrupt())\n"
    "from analyses.entry import main\n"
    "sys.exit(main())\n")


def test_the_console_command_starts_at_the_entry():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts == {"mechprobe": "analyses.entry:main"}


def test_an_interrupt_while_the_command_line_imports_is_one_line():
    done = subprocess.run([sys.executable, "-c", IMPORT_INTERRUPTED, "heads", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, preexec_fn=ctrl_c_as_at_a_terminal)
    assert (done.returncode, done.stdout, done.stderr) == (130, "", INTERRUPTED + "\n")


def test_an_interrupt_while_the_parsers_are_built_is_one_line(monkeypatch, capsys):
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    try:
        code = cli.main(["heads", "--help"])
    except KeyboardInterrupt:  # pytest would take it for the user's Ctrl-C and stop the session
        pytest.fail("the interrupt left main as a KeyboardInterrupt (a traceback at the console)")
    assert code == 130
    assert capsys.readouterr().err == INTERRUPTED + "\n"


def test_a_real_ctrl_c_a_second_after_the_start_prints_no_traceback():
    """SIGINT one second in (the command line is still importing on the 2-core machine, about 4 s); on a machine
    fast enough to have printed the version by then, exit 0."""
    process = subprocess.Popen([sys.executable, "-c", "import sys; from analyses.entry import main; sys.exit(main())",
                                "--version"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=ctrl_c_as_at_a_terminal)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert "Traceback" not in stderr, stderr
    assert (process.returncode, stderr) == (130, INTERRUPTED + "\n") or (process.returncode, stdout.split()[0]) == (
        0, "mechprobe"), (process.returncode, stdout, stderr)


def test_an_interrupt_while_the_hub_progress_bars_are_turned_off_is_one_line(monkeypatch, capsys):
    """``--no-progress`` of a command that loads models imports transformers' logging first (seconds, where
    nothing imported it yet): a Ctrl-C then was a KeyboardInterrupt traceback, outside the command's own handling
    (issue 45)."""
    from transformers.utils import logging as hf_logging

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(hf_logging, "disable_progress_bar", interrupted)
    try:
        code = cli.main(["dynamics", "--model", "nowhere", "--out", "nowhere-out", "--no-progress"])
    except KeyboardInterrupt:
        pytest.fail("the interrupt left main as a KeyboardInterrupt (a traceback at the console)")
    assert (code, capsys.readouterr().err) == (130, "mechprobe: interrupted; run the same command again to resume\n")
