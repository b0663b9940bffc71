"""The checked entry of the command line's inputs: integers and seeds (argparse types), head-pattern names and
targets, head counts, model specs, and series and models given once (no checkpoint series measured or drawn
twice). Where a command writes is checked in :mod:`analyses.output_paths`.

Every check raises (or makes argparse raise) one error that names the flag as the user typed it, says what was
expected and what was got; ``mechprobe`` prints it in one line and exits 2.

Example: ``parser.add_argument("--seed", type=seed_arg, default=0)``.

The benchmark scripts take the same entry: :class:`ScriptParser` (a usage error is one line, exit 2), the typed
flags :func:`count_arg`, :func:`number_arg` and :func:`list_arg` (each value checked as it is parsed), the
output checks of :mod:`analyses.output_paths`, and :func:`script_main` (a mechprobe error, an OSError or a
step that failed in a child process during the run is one line, exit 2). Example::

    parser = ScriptParser(description="...")
    parser.add_argument("--repeats", type=count_arg(1), default=3)
    parser.add_argument("--budget", type=number_arg(0, above=True), default=480.0)
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import torch

from analyses import script_start
from mechprobe import validation
from mechprobe.validation import real_path
from probes import ModelInfo, head_pattern, repeated_random_tokens
from probes.core.checkpoint_series import checkpoint_series
from probes.core.errors import ConfigError, InputError, MechprobeError
from probes.core.out_of_memory import size_refusal

_PARAMETRISED = re.compile(r"[a-z_]+:(-?\d+)")


def int_arg(text: str) -> int:
    """argparse type of every integer flag: an int that fits in 64 bits (torch and numpy take no larger)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    try:
        return validation.int64("value", value)
    except ConfigError:
        raise argparse.ArgumentTypeError(
            f"{text} does not fit in 64 bits; give an integer between -2**63 and 2**63 - 1") from None


def seed_arg(text: str) -> int:
    """argparse type of every ``--seed``: an integer with ``0 <= seed < 2**32`` (numpy's range of seeds)."""
    value = int_arg(text)
    try:
        return validation.seed("seed", value)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).rstrip(".")) from None


def count_arg(minimum: int = 1, maximum: int | None = None) -> Callable[[str], int]:
    """argparse type of an integer flag of at least ``minimum`` (a count, a size), at most ``maximum``."""

    def count(text: str) -> int:
        value = int_arg(text)
        try:
            validation.integer("value", value, minimum)
        except ConfigError:
            raise argparse.ArgumentTypeError(f"{text} is below {minimum}; give an integer >= {minimum}") from None
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(f"{text} is above {maximum}; give an integer from {minimum} to "
                                              f"{maximum}")
        return value

    count.__name__ = "int"  # what argparse names in "invalid int value: ..."
    return count


MAX_THREADS = 1024  # torch.set_num_threads overflows past 2**31 - 1; far more threads than cores only contend


def threads_arg(minimum: int = 1) -> Callable[[str], int]:
    """argparse type of every ``--threads``: ``minimum`` (0: torch's default) to :data:`MAX_THREADS`."""
    return count_arg(minimum, MAX_THREADS)


def number_arg(minimum: float = 0.0, *, positive: bool = False, maximum: float | None = None
               ) -> Callable[[str], float]:
    """argparse type of a finite number of at least ``minimum`` (``positive``: more than 0), at most ``maximum``."""

    def number(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid number: {text!r}") from None
        try:
            validation.positive("value", value) if positive else validation.at_least("value", value, minimum)
            if maximum is not None and value > maximum:
                raise ConfigError("above the maximum")
        except ConfigError:
            bound = "> 0" if positive else f">= {minimum:g}"
            bound += "" if maximum is None else f" and <= {maximum:g}"
            raise argparse.ArgumentTypeError(f"{text} is not a finite number {bound}; give one such as "
                                              f"{maximum if maximum is not None else max(minimum, 0) + 1:g}") from None
        return value

    number.__name__ = "float"
    return number


T = TypeVar("T")


def first_repeated(values: Sequence[Any]) -> int | None:
    """The index of the first of ``values`` equal to an earlier one (``0.5`` after ``0.50``), or None."""
    return next((i for i, value in enumerate(values) if value in values[:i]), None)


def list_arg(item: Callable[[str], T]) -> Callable[[str], list[T]]:
    """argparse type of a comma-separated list of ``item`` values: at least one, none of them empty, none given twice
    (``0.5,0.50`` is one value twice: the same run twice)."""

    def items(text: str) -> list[T]:
        parts = text.split(",")
        if not text.strip() or any(not part.strip() for part in parts):
            raise argparse.ArgumentTypeError(f"{text!r} has an empty item; give values separated by single commas, "
                                              f"e.g. 1,2")
        values = [item(part.strip()) for part in parts]
        twice = first_repeated(values)
        if twice is not None:
            raise argparse.ArgumentTypeError(f"{text!r} gives {parts[twice].strip()} twice; give each value once")
        return values

    items.__name__ = "list"
    return items


_GIVEN = "_flags_given"
"""The namespace attribute in which :class:`OnceParser` counts the one-value flags given (removed after parsing)."""


class _Once(argparse.Action):
    """A flag of one value (or a ``--x/--no-x`` switch) given a second time is a usage error: argparse kept the last
    silently (``dynamics --model A --model B`` measured B alone; ``--control --no-control`` ran without it)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault(_GIVEN, {})
        if self.option_strings and self.dest in given:
            parser.error(f"argument {option_string}: given twice ({given[self.dest]} already); give it once")
        given[self.dest] = option_string
        super().__call__(parser, namespace, values, option_string)


class _StoreOnce(_Once, argparse._StoreAction):
    pass


class _SwitchOnce(_Once, argparse.BooleanOptionalAction):
    pass


class OnceParser(argparse.ArgumentParser):
    """argparse whose flags of one value and ``--x/--no-x`` switches may be given once (:class:`_Once`): the parsers
    of ``mechprobe`` and of the benchmark scripts."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for action in (None, "store"):
            self.register("action", action, _StoreOnce)
        self.register("action", argparse.BooleanOptionalAction, _SwitchOnce)  # looked up by the class given

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None  # type: ignore[override]
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.__dict__.pop(_GIVEN, None)  # a command's parser counts in a namespace of its own
        return parsed, extras


class ScriptParser(OnceParser):
    """argparse for the benchmark scripts: a usage error is one line ``PROG: error: ... See PROG --help.`` on
    stderr and exit 2 (as ``mechprobe``'s); a flag of several values (``nargs="+"``) given one value twice is one
    (the same measurement twice), as :func:`list_arg`'s comma lists."""

    def parse_known_args(self, args: Sequence[str] | None = None, namespace: Any = None  # type: ignore[override]
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        for action in self._actions:
            values = getattr(parsed, action.dest, None)
            if action.nargs in ("+", "*") and isinstance(values, list):
                twice = first_repeated(values)
                if twice is not None:
                    self.error(f"argument {'/'.join(action.option_strings) or action.dest}: {values[twice]} is "
                               f"given twice; give each value once")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: error: {message}. See {self.prog} --help.", file=sys.stderr)
        raise SystemExit(2)


F = TypeVar("F", bound=Callable[..., Any])


def script_main(main: F) -> F:
    """A benchmark script's ``main``: a mechprobe error, an OSError or a step that failed in a child process
    (``subprocess.CalledProcessError``) is one ``PROG: error: ...`` line on stderr and exit 2 (the checks of its
    flags come first; this is what a late failure prints); Ctrl-C is one ``PROG: interrupted`` line and exit 130."""

    @functools.wraps(main)
    def run(*args: Any, **kwargs: Any) -> Any:
        script_start.started()
        try:
            return main(*args, **kwargs)
        except (MechprobeError, OSError) as error:
            print(f"{Path(sys.argv[0]).name}: error: {' '.join(str(error).split())}", file=sys.stderr)
            raise SystemExit(2) from None
        except (MemoryError, RuntimeError) as error:  # a size accepted that the machine cannot hold
            refusal = size_refusal(error)
            if refusal is None:
                raise
            print(f"{Path(sys.argv[0]).name}: error: {refusal}", file=sys.stderr)
            raise SystemExit(2) from None
        except subprocess.CalledProcessError as error:  # a step run as a child process
            print(f"{Path(sys.argv[0]).name}: error: {_child_failure(error)}", file=sys.stderr)
            raise SystemExit(2) from None
        except KeyboardInterrupt as error:  # Ctrl-C: one line and exit 130, as mechprobe's (a child process too)
            kept = f"; {error}" if str(error) else ""  # what the script kept of the run (gpu_check's finished parts)
            print(f"{Path(sys.argv[0]).name}: interrupted{kept}", file=sys.stderr)
            raise SystemExit(130) from None

    return run  # type: ignore[return-value]


def _child_failure(error: subprocess.CalledProcessError) -> str:
    """One line for a benchmark step that failed in a child process: the step (``mechprobe ...`` for a command
    run as ``python -c '...analyses.cli...'``), its exit status and its own error (its last line, when captured)."""
    cmd = [str(part) for part in error.cmd]
    step = " ".join(["mechprobe", *cmd[3:]] if cmd[1:2] == ["-c"] and "analyses.cli" in cmd[2] else cmd)
    captured = error.stderr.decode(errors="replace") if isinstance(error.stderr, bytes) else error.stderr or ""
    said = captured.strip().splitlines()[-1:] or ["its error is printed above"]
    return (f"a step failed (exit {error.returncode}): {step}: {said[0]}; fix that, then run the same command "
            f"again")


def text_arg(text: str) -> str:
    """argparse type of a flag that names something (a corpus, a preset, a series, a file): not empty text."""
    if not text.strip():
        raise argparse.ArgumentTypeError("the value is empty; give one (see --help)")
    return text


def device_arg(text: str) -> str:
    """argparse type of every ``--device``: a torch device that exists on this machine (``check_device``)."""
    from probes.core.loading import check_device

    try:
        check_device(text)
    except ConfigError as error:
        raise argparse.ArgumentTypeError(str(error).rstrip(".")) from None
    return text


def model_arg(text: str) -> str:
    """argparse type of a ``--model`` that names one model: not empty, not a path that is not there."""
    try:
        return check_model_spec("the model", text)
    except InputError as error:
        raise argparse.ArgumentTypeError(str(error).rstrip(".")) from None


@contextlib.contextmanager
def naming(flag: str) -> Iterator[None]:
    """The checks in the block name ``flag`` in their error (prefixed to the message unless it names it already)."""
    try:
        yield
    except MechprobeError as error:
        if flag in str(error):
            raise
        try:
            renamed = type(error)(f"{flag}: {error}")
        except TypeError:
            renamed = ConfigError(f"{flag}: {error}")
        raise renamed from None


@contextlib.contextmanager
def sized_by(flag: str, value: object, example: str) -> Iterator[None]:
    """An InputError in the block (too little data to fit on) names ``flag`` and a larger value as the fix, not the
    library's settings its message advises (``no_below``, ``held_out_fraction``: no flags of a script)."""
    try:
        yield
    except InputError as error:
        reason = str(error).split(". ")[0].rstrip(".")
        raise InputError(f"{flag} {value}: too little data ({reason}); give a larger {flag}, e.g. {example}."
                         ) from None


def check_pattern_name(flag: str, spec: str) -> None:
    """``spec`` names a head pattern (``offset:D`` and ``induction:D`` with D within 64 bits), before any work."""
    match = _PARAMETRISED.fullmatch(spec)
    if match and not -(2**63) <= int(match.group(1)) < 2**63:
        raise ConfigError(f"{flag} {spec}: the distance does not fit in 64 bits; give one shorter than the "
                          f"sequence, e.g. {spec.split(':')[0]}:1.")
    try:
        head_pattern(spec)  # an unknown name fails here, naming the known ones
    except ConfigError as error:
        raise ConfigError(f"{flag}: {error}") from None


def check_block_fits(flag: str, seq_len: int, info: ModelInfo) -> None:
    """``[BOS] X X`` with ``|X| = seq_len`` fits ``info``'s context. The refusal names ``flag`` and the longest value
    that fits, where the library's own error names its ``seq_len`` argument. After the model loads, before any work."""
    bos = int(info.bos_token_id is not None)
    if 2 * seq_len + bos > info.n_ctx:
        raise InputError(f"{flag} {seq_len}: the repeated block {'[BOS] ' * bos}X X needs {2 * seq_len + bos} "
                         f"positions, more than the context of {info.n_ctx} of {info.name}; give {flag} "
                         f"{(info.n_ctx - bos) // 2} or less.")


def check_pattern_targets(flag: str, spec: str, info: ModelInfo, seq_len: int) -> None:
    """``spec`` has at least one target in ``[BOS] X X`` with ``|X| = seq_len`` (else every score is 0/0), and on a
    causal model one at or before its query (else every score is 0 by construction)."""
    sample = repeated_random_tokens(info, seq_len=seq_len, n_sequences=1, generator=torch.Generator().manual_seed(0))
    targets = head_pattern(spec).mask(sample.tokens, sample.valid)
    if not bool(targets.any()):
        bos = "[BOS] " if sample.shape[1] > 2 * seq_len else ""
        raise ConfigError(
            f"{flag} {spec}: the pattern has no target in {bos}X X with |X| = {seq_len} ({sample.shape[1]} "
            f"positions), so its scores would be undefined; give a smaller distance or a larger --seq-len."
        )
    if info.causal and not bool(targets.tril().any()):
        raise ConfigError(
            f"{flag} {spec}: every target of the pattern is after its query, which {info.name} (causal attention) "
            f"cannot attend to, so every score would be 0 by construction; give a pattern of earlier positions "
            f"(offset:D with D >= 0, induction:D)."
        )


def check_head_count(flag: str, given: str, k: int, info: ModelInfo) -> None:
    """``k`` heads ablated leave at least one head of the model to draw the null's random head sets from."""
    total = info.n_layers * info.n_heads
    if k >= total:
        raise ConfigError(
            f"{flag} {given}: {k} heads, but the model has {total} ({info.n_layers} layers x {info.n_heads}); "
            f"ablate fewer than {total} so that random heads remain for the null."
        )


def check_detect_sequences(detect: int, batch_size: int) -> None:
    """``--detect-sequences`` rows are taken from the first batch: at most ``--batch-size`` (else fewer are timed)."""
    if detect > batch_size:
        raise ConfigError(f"--detect-sequences {detect}: detect_head is timed on rows of the first batch, which "
                          f"holds --batch-size {batch_size}; give --detect-sequences {batch_size} or fewer, or a "
                          f"larger --batch-size.")


def check_model_spec(flag: str, spec: str) -> str:
    """``spec`` names a model that may load: a packaged name, a path that exists, or a hub name (not empty text,
    not a path that is not there); checked before any work, the rest where the model loads."""
    from probes.core.loading import PACKAGED_MODELS

    if not spec.strip():
        raise InputError(f"{flag} is empty; give a packaged name ({', '.join(PACKAGED_MODELS)}), a checkpoint folder "
                         f"or a Hugging Face hub name.")
    path = Path(spec).expanduser()
    if path.is_symlink():
        real_path(flag, path)  # a link that loops is refused as one, not as a path that is not there
    if spec not in PACKAGED_MODELS and not path.exists() and (path.is_absolute() or spec.startswith((".", "~"))
                                                              or spec.count("/") > 1):
        raise InputError(f"{flag} {spec}: no such file or folder; give a checkpoint folder that exists, a packaged "
                         f"name ({', '.join(PACKAGED_MODELS)}) or a Hugging Face hub name.")
    return spec


def series_identity(spec: str) -> object:
    """What makes two series specs the same checkpoint series: a folder's real path (a trailing slash, a relative
    or an absolute spelling and a symlink name one folder), else the kind and the checkpoints' specs."""
    series = checkpoint_series(spec)
    if series.kind == "folder":
        return Path(series.source).resolve()
    return series.kind, tuple(checkpoint.spec for checkpoint in series.checkpoints)


def check_distinct_series(flag: str, specs: Sequence[str]) -> None:
    """No checkpoint series given twice in ``specs`` (in any spelling, :func:`series_identity`): it would be
    measured twice and reported as two. Checked before any work."""
    seen: dict[object, str] = {}
    for spec in specs:
        identity = series_identity(spec)
        if identity in seen:
            raise ConfigError(f"{flag} {spec} is the series {flag} {seen[identity]} names already; give each series "
                              f"once.")
        seen[identity] = spec


def check_distinct_models(flag: str, specs: Sequence[str]) -> None:
    """No model given twice in ``specs``: a name twice, or one folder in two spellings (``m``, ``m/``, ``./m``, its
    absolute path, a symlink to it), which would be measured and reported as two models. Checked before any work."""
    seen: dict[object, str] = {}
    for spec in specs:
        identity: object = Path(spec).resolve() if Path(spec).exists() else spec
        if identity in seen:
            raise ConfigError(f"{flag} {spec} is the model {flag} {seen[identity]} names already; give each model "
                              f"once.")
        seen[identity] = spec


def check_compared_folders(flag: str, folders: Sequence[str], *, out: Path, model: str) -> None:
    """Each ``--compare`` folder given once (in any spelling), and none of them the folder this command writes
    (``out``) or the series it measures (``model``): the same series would be drawn twice. Checked before any
    work."""
    seen: dict[Path, str] = {}
    for folder in folders:
        real = real_path(flag, folder)
        if real in seen:
            raise ConfigError(f"{flag} {folder} is the folder {flag} {seen[real]} names already; give each folder "
                              f"once.")
        if real == real_path("--out", out):
            raise ConfigError(f"{flag} {folder} is this run's --out: the series it measures would be drawn beside "
                              f"itself; compare with another finished run's folder, or leave {flag} {folder} out.")
        if Path(model).is_dir() and real == real_path("--model", model):
            raise ConfigError(f"{flag} {folder} is the series --model measures; {flag} takes a finished dynamics "
                              f"--out folder (or a topic or scansnap toy's folder) of another series.")
        seen[real] = folder


