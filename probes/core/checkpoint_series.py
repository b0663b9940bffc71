"""A checkpoint series: one model's training checkpoints, ordered by step, as a model source like any other.

A series is a tuple of :class:`Checkpoint` s (``step``, ``tokens`` seen when known, and the
:func:`probes.load_model` spec that loads it), strictly increasing in step. Loading is left to the caller, one
checkpoint at a time (a series of Pythia revisions does not fit in memory at once). The series specs:

- ``NAME@revisions=step0,step512,step1000``: Hugging Face hub revisions (Pythia, OLMo and others publish their
  training checkpoints as git revisions). Each loads as ``NAME@revision=REV``, which :func:`probes.load_model`
  passes as ``revision=`` to ``TransformerBridge.boot_transformers`` (transformers resolves it through the hub, or
  offline through ``refs/REV`` in the local hub cache). The step is the number after ``step`` in the revision
  name (else its first number); ``tokensNB`` / ``tokensNM`` in the name (OLMo) give the tokens seen.
- ``NAME@checkpoint_index=0,3,10`` or ``NAME@checkpoint_value=V1,V2``: TransformerLens's legacy repos
  (``attn-only-2l``), each loading as ``NAME@checkpoint_index=N``; the step is the index (resp. the value, the
  step or token count in the checkpoint's file name).
- a folder with ``series.json`` (``{"checkpoints": [{"step", "tokens", "path"}, ...]}``, paths relative to the
  folder; ``mechprobe train-lm`` and the induction toy write one; its other keys are kept as the series'
  ``extra``), or a folder of checkpoint folders or weight files (``.pt``, ``.pth``, ``.bin``, ``.ckpt``,
  ``.safetensors``) whose names end with a number (``step_100``, ``checkpoint-2000``, ``500.pt``), ordered by that
  number; other files (``notes2.txt``, the ``500.json`` config beside ``500.pt``) are not checkpoints.

:func:`check_revisions` asks transformers for each hub revision's config before any model is loaded, so a
missing revision fails in one line before the first checkpoint is measured.

Example::

    series = checkpoint_series("EleutherAI/pythia-70m@revisions=step0,step1000,step143000")
    for checkpoint in series.checkpoints:
        model = probes.load_model(checkpoint.spec)
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mechprobe.validation import is_integer, real_path
from probes.core.errors import ConfigError, ModelError

MANIFEST = "series.json"
SERIES_FORMS = (
    "NAME@revisions=step0,step1000,... (Hugging Face revisions), NAME@checkpoint_index=0,1,... or "
    "NAME@checkpoint_value=... (legacy TransformerLens repos), or a folder holding series.json or checkpoint "
    "folders/files whose names end with their step (step_100, checkpoint-2000)"
)
SERIES_KEYS = ("revisions", "checkpoint_index", "checkpoint_value")
_TRAILING_NUMBER = re.compile(r"(\d+)(?:\.[A-Za-z]+)?$")
_TOKENS = re.compile(r"tokens(\d+(?:\.\d+)?)([KMBT]?)", re.IGNORECASE)
_SCALE = {"": 1, "K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


@dataclass(frozen=True)
class Checkpoint:
    """One training checkpoint: its ``step``, the ``tokens`` seen by then (None when unknown) and the
    :func:`probes.load_model` spec (or toy run folder) that loads it."""

    step: int
    spec: str
    tokens: int | None = None

    def __post_init__(self) -> None:
        if not is_integer(self.step) or self.step < 0:
            raise ConfigError(f"A checkpoint's step must be an integer >= 0; got {self.step!r} for {self.spec!r}.")
        if self.tokens is not None and (not is_integer(self.tokens)
                                        or self.tokens < 0):
            raise ConfigError(f"A checkpoint's tokens seen must be an integer >= 0 or None; got {self.tokens!r}.")


@dataclass(frozen=True)
class CheckpointSeries:
    """A model's checkpoints in step order. ``source`` is the series spec; ``kind`` is ``revisions``,
    ``legacy`` or ``folder``; ``hub_name`` the hub repo of a ``revisions`` series; ``extra`` the keys of a
    ``series.json`` beside ``checkpoints`` (e.g. what a toy series is measured with), else empty."""

    source: str
    kind: str
    checkpoints: tuple[Checkpoint, ...]
    hub_name: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.checkpoints) < 2:
            raise ConfigError(f"A checkpoint series needs at least 2 checkpoints (the first is the control); "
                              f"{self.source!r} gives {len(self.checkpoints)}.")
        steps = [c.step for c in self.checkpoints]
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ConfigError(f"The checkpoints of {self.source!r} must have distinct steps in increasing order; "
                              f"got {steps}.")

    @property
    def steps(self) -> tuple[int, ...]:
        return tuple(c.step for c in self.checkpoints)


def step_of_revision(revision: str) -> int:
    """The training step a hub revision names: the number after ``step`` (``step1000``, ``step1000-tokens4B``),
    else the name's first number. Example: ``step_of_revision("step143000") == 143000``."""
    match = re.search(r"step[_-]?(\d+)", revision, re.IGNORECASE) or re.search(r"(\d+)", revision)
    if match is None:
        raise ConfigError(f"Revision {revision!r} names no training step; give revisions such as step1000 (Pythia) "
                          f"or step1000-tokens4B (OLMo).")
    if re.match(r"\.\d", revision[match.end():]) or re.search(r"step[_]?-\d", revision, re.IGNORECASE):
        raise ConfigError(f"Revision {revision!r} names a fractional or negative step; a training step is an integer "
                          f">= 0, e.g. step1000.")
    return int(match.group(1))


def tokens_of_revision(revision: str) -> int | None:
    """The tokens seen a revision name states (``...-tokens4B``), else None."""
    match = _TOKENS.search(revision)
    if match is None:
        return None
    return int(float(match.group(1)) * _SCALE[match.group(2).upper()])


def _split_list(spec: str) -> tuple[str, str, list[str]] | None:
    name, at, suffix = spec.partition("@")
    if not at:
        return None
    key, equals, values = suffix.partition("=")
    if key not in SERIES_KEYS or not equals:
        raise ConfigError(f"{spec!r} is not a checkpoint series; give {SERIES_FORMS}.")
    items = [v.strip() for v in values.split(",")]
    if not name.strip() or not values.strip():
        raise ConfigError(f"{spec!r}: name the model before @ and at least two checkpoints after {key}=.")
    if not all(items):
        raise ConfigError(f"{spec!r}: an empty item in the list after {key}=; give the checkpoints separated by "
                          f"single commas, e.g. {key}={','.join(i for i in items if i) or '0,10'}.")
    return name.strip(), key, items


# The keys of a checkpoint's config that make it one architecture, context and vocabulary (Hugging Face config.json;
# TransformerLens and toy model.json under "config"): checkpoints of one run agree on every one that they state. The
# seed is not one: a series of redrawn initialisations is the toys' control.
_RUN_KEYS = ("model_type", "architectures", "vocab_size", "d_vocab", "hidden_size", "d_model", "num_hidden_layers",
             "n_layers", "num_attention_heads", "n_heads", "d_head", "intermediate_size", "d_mlp", "class",
             "experiment", "format", "n_ctx", "max_position_embeddings", "n_positions")


def _run_signature(path: Path) -> dict[str, Any] | None:
    """What makes checkpoint ``path`` a model of one architecture and vocabulary (None where it states none)."""
    for name in ("config.json", "model.json"):
        file = path / name
        if not file.is_file():
            continue
        try:
            document = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            if name == "model.json":  # a mechprobe toy's or train-lm's file: its loader names what wrote it
                return None
            raise ModelError(f"{file} does not read as JSON ({type(error).__name__}); re-create that checkpoint.") \
                from None
        if not isinstance(document, dict):
            return None
        inner = document["config"] if isinstance(document.get("config"), dict) else {}
        values = {**inner, **{k: v for k, v in document.items() if k != "config"}}
        return {key: values[key] for key in _RUN_KEYS if key in values}
    return None


def _check_one_run(folder: Path, checkpoints: tuple[Checkpoint, ...]) -> None:
    """Refuse a series folder whose checkpoints are not one training run: another architecture, context or
    vocabulary in a key both checkpoints state (a key one of them lacks is left to its loader, which names a damaged
    file)."""
    first: tuple[Checkpoint, dict[str, Any]] | None = None
    for checkpoint in checkpoints:
        signature = _run_signature(Path(checkpoint.spec))
        if signature is None:
            continue
        if first is None:
            first = (checkpoint, signature)
            continue
        differing = [k for k in signature if k in first[1] and signature[k] != first[1][k]]
        if differing:
            key = differing[0]
            raise ConfigError(
                f"{folder} is not one training run: the checkpoint at step {checkpoint.step} has {key} "
                f"{signature.get(key)!r} where step {first[0].step}'s has {first[1][key]!r}; a series is one run of "
                f"one architecture, context and vocabulary: keep only its checkpoints in the folder (or in "
                f"{MANIFEST})."
            )


def _check_distinct_files(where: Path, checkpoints: tuple[Checkpoint, ...], *, fix: str) -> None:
    """Refuse two steps that are one checkpoint on disk (the same path twice, or a link to another step's
    checkpoint): it would be measured as two points of the run."""
    seen: dict[Path, int] = {}
    for checkpoint in checkpoints:
        real = real_path(f"{where}: step {checkpoint.step},", checkpoint.spec)  # a link that loops: one line
        if real in seen:
            raise ConfigError(f"{where}: steps {seen[real]} and {checkpoint.step} are the same checkpoint ({real}); "
                              f"a series holds one checkpoint per step: {fix}.")
        seen[real] = checkpoint.step


def _manifest_entry(manifest: Path, folder: Path, entry: Any) -> Checkpoint:
    """One ``series.json`` entry as a checkpoint: an integer step and tokens (not fractions, not negative), and a
    relative path inside the series' folder whose own number, if its name ends in one, is its step."""
    if not isinstance(entry, dict) or not {"step", "path"} <= set(entry):
        raise ConfigError(f"{manifest}: entry {entry!r} is not {{\"step\": N, \"tokens\": N or null, \"path\": "
                          f"\"...\"}}; rewrite it or re-run what wrote the series.")
    step, tokens, path = entry["step"], entry.get("tokens"), entry["path"]
    if not is_integer(step) or step < 0:
        raise ConfigError(f"{manifest}: step {step!r} is not an integer >= 0; give each checkpoint's training step.")
    if tokens is not None and (not is_integer(tokens) or tokens < 0):
        raise ConfigError(f"{manifest}: tokens {tokens!r} at step {step} is not an integer >= 0 or null.")
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"{manifest}: path {path!r} at step {step} is not a path inside {folder}.")
    resolved, inside = real_path(f"{manifest}: step {step},", folder / path), real_path(str(manifest), folder)
    if Path(path).is_absolute() or not resolved.is_relative_to(inside) or resolved == inside:
        raise ConfigError(f"{manifest}: path {path!r} at step {step} is outside the series folder {folder}; a series "
                          f"holds its own checkpoints (paths relative to the folder, inside it).")
    named = _TRAILING_NUMBER.search(Path(path).name)
    if named is not None and int(named.group(1)) != step:
        raise ConfigError(f"{manifest}: step {step} points to {path!r}, named for step {named.group(1)}; the steps "
                          f"and paths are swapped or mixed up: rewrite {MANIFEST} or re-run what wrote it.")
    return Checkpoint(step, str(folder / path), tokens)


def _from_folder(folder: Path) -> CheckpointSeries:
    manifest = folder / MANIFEST
    if manifest.exists() or manifest.is_symlink():  # a folder, a loop or a dangling link too: refused, not skipped
        try:
            document = json.loads(manifest.read_text(encoding="utf-8"))
            entries = document["checkpoints"]
            extra = {key: value for key, value in document.items() if key != "checkpoints"}
            if not isinstance(entries, list):
                raise TypeError("checkpoints is not a list")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            raise ConfigError(f"{manifest} is not a series manifest ({type(error).__name__}: {error}); it must be "
                              f'{{"checkpoints": [{{"step": N, "tokens": N or null, "path": "..."}}, ...]}}.'
                              ) from None
        checkpoints = tuple(_manifest_entry(manifest, folder, e) for e in entries)
        steps = [c.step for c in checkpoints]
        if any(b <= a for a, b in itertools.pairwise(steps)):
            raise ConfigError(f"{manifest}: the steps must be unique and increasing in the order listed; got {steps}. "
                              f"Rewrite {MANIFEST} or re-run what wrote it.")
        seen = [(c.step, c.tokens) for c in checkpoints if c.tokens is not None]  # --compare's x axis: it grows
        back = next(((a, b) for a, b in itertools.pairwise(seen) if b[1] < a[1]), None)
        if back is not None:
            raise ConfigError(f"{manifest}: the tokens seen go down from {back[0][1]} at step {back[0][0]} to "
                              f"{back[1][1]} at step {back[1][0]}; they only grow with the steps. Rewrite {MANIFEST} "
                              f"or re-run what wrote it.")
        missing = [c.spec for c in checkpoints if not Path(c.spec).exists()]
        if missing:
            raise ModelError(f"{manifest} names checkpoints that are not there: {', '.join(missing[:3])}.")
        _check_distinct_files(manifest, checkpoints, fix=f"rewrite {MANIFEST} or re-run what wrote it")
        _check_one_run(folder, checkpoints)
        return CheckpointSeries(str(folder), "folder", checkpoints, extra=extra)
    from probes.core.tl_checkpoint import WEIGHT_SUFFIXES

    numbered = []  # checkpoint folders, and weight files (not notes2.txt, nor the config 500.json beside 500.pt)
    for entry in sorted(folder.iterdir()):
        match = _TRAILING_NUMBER.search(entry.name)
        if match is not None and not entry.name.startswith(".") and (entry.is_dir() or
                                                                      entry.suffix in WEIGHT_SUFFIXES):
            numbered.append(Checkpoint(int(match.group(1)), str(entry)))
    if not numbered:
        raise ConfigError(f"{folder} holds no {MANIFEST} and no checkpoint folders or files named by their step "
                          f"(step_100, checkpoint-2000); give {SERIES_FORMS}.")
    ordered = tuple(sorted(numbered, key=lambda c: c.step))
    _check_distinct_files(folder, ordered, fix="keep one of them in the folder")
    _check_one_run(folder, ordered)
    return CheckpointSeries(str(folder), "folder", ordered)


def checkpoint_series(spec: Any) -> CheckpointSeries:
    """The :class:`CheckpointSeries` that ``spec`` names (the forms are in the module docstring); no model is
    loaded. A series given as a :class:`CheckpointSeries` is returned as it is.

    Example: ``checkpoint_series("attn-only-2l@checkpoint_index=0,10,50").steps == (0, 10, 50)``.
    """
    if isinstance(spec, CheckpointSeries):
        return spec
    if not isinstance(spec, (str, Path)) or not str(spec).strip():
        raise ConfigError(f"A checkpoint series is {SERIES_FORMS}; got {spec!r}.")
    text = str(spec).strip()
    path = Path(text).expanduser()
    if path.is_dir():
        return _from_folder(path)
    split = _split_list(text)
    if split is None:
        if path.exists() or text.startswith((".", "/", "~")) or text.endswith(("/", "\\")):
            raise ConfigError(f"{text!r} is not a folder of checkpoints; give {SERIES_FORMS}.")
        raise ConfigError(f"{text!r} is no folder here, and as a model name it names one model, not a series; give "
                          f"{SERIES_FORMS}.")
    name, key, items = split
    if key == "revisions":
        checkpoints = tuple(Checkpoint(step_of_revision(r), f"{name}@revision={r}", tokens_of_revision(r))
                            for r in items)
        return CheckpointSeries(text, "revisions", tuple(sorted(checkpoints, key=lambda c: c.step)), hub_name=name)
    try:
        values = [int(v) for v in items]
    except ValueError:
        raise ConfigError(f"{text!r}: {key} takes integers separated by commas, e.g. {key}=0,5,20.") from None
    if key == "checkpoint_index" and any(v < 0 for v in values):
        raise ConfigError(f"{text!r}: give checkpoint indices >= 0 in a series (they are its steps).")
    checkpoints = tuple(Checkpoint(v, f"{name}@{key}={v}") for v in values)
    return CheckpointSeries(text, "legacy", tuple(sorted(checkpoints, key=lambda c: c.step)))


def same_spec(a: str, b: str) -> bool:
    """Whether two model or series specs name the same thing: the same folder or file however it is spelt
    (relative, absolute, through a link), else the same text. Example: ``same_spec("runs/lm", "./runs/lm/")``."""
    if a.strip() == b.strip():
        return True
    first, second = Path(a.strip()).expanduser(), Path(b.strip()).expanduser()
    return first.exists() and second.exists() and first.resolve() == second.resolve()


def revision_of(spec: str) -> tuple[str, str] | None:
    """``(name, revision)`` of a ``NAME@revision=REV`` model spec, else None."""
    name, at, suffix = spec.partition("@")
    key, equals, revision = suffix.partition("=")
    if not at or key != "revision":
        return None
    if not equals or not revision.strip() or not name.strip():
        raise ConfigError(f"{spec!r}: a hub revision is given as NAME@revision=REV (e.g. "
                          f"EleutherAI/pythia-70m@revision=step1000).")
    return name.strip(), revision.strip()


def missing_revision_error(name: str, revision: str, error: BaseException) -> ModelError:
    """The one-line :class:`ModelError` for a hub revision that cannot be resolved (``error`` from transformers)."""
    first = " ".join(str(error).split())[:200] or type(error).__name__
    return ModelError(f"{name} has no revision {revision!r} that can be loaded here (not on the hub, or not in the "
                      f"local Hugging Face cache when offline): {first} Check the revision name (Pythia: step0, "
                      f"step1, ..., step143000) or run where the hub is reachable.")


def check_revisions(series: CheckpointSeries) -> None:
    """Resolve every hub revision's config through transformers (``AutoConfig.from_pretrained(name,
    revision=REV)``, the call that loading makes first) before anything is measured; the first that fails is
    one :class:`ModelError` line. Series of other kinds pass unchanged."""
    if series.kind != "revisions" or series.hub_name is None:
        return
    from transformers import AutoConfig

    for checkpoint in series.checkpoints:
        found = revision_of(checkpoint.spec)
        assert found is not None
        try:
            AutoConfig.from_pretrained(found[0], revision=found[1])
        except Exception as error:  # transformers and the hub raise OSError, RevisionNotFoundError, ValueError ...
            raise missing_revision_error(found[0], found[1], error) from None
