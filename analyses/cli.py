"""The ``mechprobe`` command line: the parser and the dispatch, both from one table of command records
(:data:`COMMANDS`, each a :class:`~analyses.cli_command.Command` declared beside its work), and the flags the
commands share, declared once here (:func:`add_shared_flags`)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Any

import probes
from analyses.circuit.command import CIRCUIT
from analyses.cli_checks import OnceParser, device_arg
from analyses.cli_command import Command
from analyses.commands.ablate import ABLATE
from analyses.commands.heads import HEADS
from analyses.commands.probe_linear import PROBE_LINEAR
from analyses.commands.render import RENDER
from analyses.commands.report import REPORT
from analyses.commands.toy import TOY
from analyses.dynamics.cli_commands import DYNAMICS, TRAIN_LM
from analyses.plan.command import PLAN
from mechprobe.errors import Terminated, terminate_as_interrupt
from probes.core.errors import MechprobeError
from probes.core.out_of_memory import size_refusal
from toymodels.errors import TrainingInterrupted

COMMANDS: tuple[Command, ...] = (HEADS, REPORT, RENDER, PROBE_LINEAR, ABLATE, CIRCUIT, DYNAMICS, TRAIN_LM, PLAN, TOY)
"""Every ``mechprobe`` command, in the order ``mechprobe --help`` lists them."""


class UsageError(Exception):
    """A command-line usage error (unknown flag, missing argument, bad int); exits 2 in one line."""


class _Parser(OnceParser):
    """argparse with one-line errors that point to --help (sub-commands inherit the class)."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: error: {message}. See {self.prog} --help.")


def _device(parser: argparse.ArgumentParser, command: Command) -> None:
    parser.add_argument("--device", type=device_arg, default="cpu", metavar="DEV",
                        help="cpu (default), cuda, cuda:1, mps ...")


def _dtype(parser: argparse.ArgumentParser, command: Command) -> None:
    parser.add_argument("--dtype", choices=["float32", "float16", "bfloat16"],
                        help="weights of pretrained models (default float32; probes accumulate in float64 "
                        "regardless)")


def _progress(parser: argparse.ArgumentParser, command: Command) -> None:
    parser.add_argument("--no-progress", action="store_true", help=command.progress_help)


_SHARED: dict[str, Callable[[argparse.ArgumentParser, Command], None]] = {
    "device": _device, "dtype": _dtype, "progress": _progress}


def add_shared_flags(parser: argparse.ArgumentParser, command: Command) -> None:
    """The shared flags ``command`` takes (its ``shared``, in that order), then ``--debug`` (every command)."""
    for name in command.shared:
        _SHARED[name](parser, command)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the full traceback")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="mechprobe",
        description="Probe attention mechanisms (induction heads, topic attention, co-occurrence "
        "ordering) in toy models and pretrained models with TransformerLens.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {probes.__version__}")
    parser.add_argument("--debug", action="store_true", help="show the full traceback on errors")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress messages")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command_parser = sub.add_parser(command.name, help=command.help, description=command.description)
        command.add_arguments(command_parser)
        add_shared_flags(command_parser, command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``mechprobe`` command; bad input prints one ``mechprobe: error: ...`` line and returns 2.

    ``--debug`` re-raises instead, to show the full traceback.
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(arguments)
    except UsageError as error:
        if "--debug" in arguments:
            raise
        print(error, file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # while the commands' parsers are built (their modules imported) or --help prints
        if "--debug" in arguments:
            raise
        print("mechprobe: interrupted while starting; nothing was run", file=sys.stderr)
        return 130
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s")
    command = next(command for command in COMMANDS if command.name == args.command)
    terminated = _sigterm_as_interrupt()
    try:
        if getattr(args, "no_progress", False) and command.hub_bars:  # an import of seconds: a Ctrl-C is one line
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # the "Loading weights" bars too
        return command.run(args)
    except TrainingInterrupted as error:
        if args.debug:
            raise
        print(f"mechprobe: {' '.join(str(error).split())}", file=sys.stderr)
        return 128 + signal.SIGTERM
    except (MechprobeError, OSError) as error:  # every mechprobe error, toy training's included
        if args.debug:
            raise
        message = " ".join(str(error).split())  # one line, whatever the library wrote
        print(f"mechprobe: error: {message}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as error:  # a size accepted that the machine cannot hold
        refusal = size_refusal(error)
        if args.debug or refusal is None:
            raise
        print(f"mechprobe: error: {refusal}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as error:
        if args.debug:
            raise
        resumes = command.resumes  # their stopped runs are kept for the same command to resume
        stopped = "terminated" if isinstance(error, Terminated) else "interrupted"
        print(f"mechprobe: {stopped}{'; run the same command again to resume' if resumes else ''}", file=sys.stderr)
        return 128 + signal.SIGTERM if isinstance(error, Terminated) else 130
    finally:
        if terminated is not None:
            signal.signal(signal.SIGTERM, terminated)


def _sigterm_as_interrupt() -> Any:
    """SIGTERM raises :class:`~mechprobe.errors.Terminated` (a KeyboardInterrupt) while the command runs, so that it
    cleans up as after a Ctrl-C (issue 45: a SIGTERM of report left its half-written temporary folder, without a
    line); installed in the main thread where SIGTERM has its default action. Returns the handler to put back
    (None: not installed)."""
    import threading

    if threading.current_thread() is not threading.main_thread() or (
            signal.getsignal(signal.SIGTERM) != signal.SIG_DFL):
        return None
    return signal.signal(signal.SIGTERM, terminate_as_interrupt)


if __name__ == "__main__":
    sys.exit(main())
