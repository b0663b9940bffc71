"""Saving a training run as a checkpoint series: the log-spaced steps to save, and ``series.json``.

A series folder holds one checkpoint folder per saved step (``step_N``) and ``series.json``
(``{"checkpoints": [{"step", "tokens", "path"}, ...], ...}``, read by
:func:`probes.core.checkpoint_series.checkpoint_series`), rewritten after each saved step so that a stopped run
leaves a usable series. Extra keys of the manifest (``measure``, ``settings``) tell ``mechprobe dynamics`` what
a toy series is measured with. ``mechprobe train-lm`` and the induction toy (``--set series_checkpoints=N``) both
write series this way.

A ``train-lm`` series also holds its training state (:data:`CHECKPOINT_FOLDER`); :func:`start_over` says how to train
a damaged one again.

Example: ``write_manifest(out, {0, 10, 100}, tokens_per_step=4096)``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch

from analyses.toy_model_store import MODEL_JSON, MODEL_WEIGHTS, ModelFile
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text
from probes.core.checkpoint_series import MANIFEST
from toymodels.standard import StandardModelConfig

CHECKPOINT_FOLDER = "checkpoint"
"""The training state beside a ``train-lm`` series (weights, AdamW, row generator, loss history) that the same
command resumes from."""
STATES_FOLDER = "states"
"""``OUT/states/step_N/``: the training state at each saved step (:class:`toymodels.step_states.StepStates`), from
which ``mechprobe dynamics --refine`` re-runs a stretch of training to save more checkpoints in it."""

INDUCTION_TOY_MEASURE = "induction-toy"
"""``series.json["measure"]`` of the induction toy's series (with its ``settings``): ``mechprobe dynamics`` measures
its copier and classifier (:mod:`analyses.dynamics.toy_measure`) instead of the ``[BOS] X X`` protocol."""


def checkpoint_steps(n_steps: int, n_checkpoints: int) -> tuple[int, ...]:
    """Step 0 and about ``n_checkpoints - 1`` log-spaced steps from 10 (or 1) to ``n_steps``, distinct, ending at
    ``n_steps``. Example: ``checkpoint_steps(1000, 5) == (0, 10, 56, 178, 1000)`` up to rounding; two checkpoints
    are the first and the last step, ``(0, n_steps)``."""
    first = min(10, n_steps) if n_checkpoints > 2 else n_steps
    count = max(1, n_checkpoints - 1)
    logs = torch.linspace(math.log(first), math.log(n_steps), count, dtype=torch.float64)
    # the last is n_steps itself: past 2**53 steps exp(log(n)) is not n (2**63 - 1 gave 2**63 and 2**63 - 30719)
    return tuple(sorted({0, *(round(float(v)) for v in logs[:-1].exp()), n_steps}))


def steps_fit(n_steps: int, n_checkpoints: int) -> bool:
    """Whether :func:`checkpoint_steps` gives ``n_checkpoints`` distinct steps in ``n_steps`` (a count it cannot
    give is refused by the configs, not saved at fewer steps than asked)."""
    return n_checkpoints <= n_steps and len(checkpoint_steps(n_steps, n_checkpoints)) == n_checkpoints


def most_checkpoints(n_steps: int, below: int) -> int | None:
    """The most checkpoints, fewer than ``below``, whose log-spaced steps are distinct in ``n_steps`` (None: not
    even 2). A binary search: :func:`steps_fit` holds up to a count and not beyond it."""
    low, high = 2, min(below - 1, n_steps)
    if high < low or not steps_fit(n_steps, low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if steps_fit(n_steps, middle) else (low, middle - 1)
    return low


def fewest_steps(n_checkpoints: int) -> int:
    """The fewest training steps in which ``n_checkpoints`` log-spaced steps are distinct (a binary search between
    ``n_checkpoints`` and the first power-of-two multiple of it that fits)."""
    low, high = n_checkpoints, n_checkpoints
    while not steps_fit(high, n_checkpoints):
        low, high = high + 1, 2 * high
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if steps_fit(middle, n_checkpoints) else (middle + 1, high)
    return low


MAX_CHECKPOINTS = 10_000
"""The most checkpoints a series saves (each is a saved model)."""
MAX_STEPS = 2**63 - 1
"""The most training steps a config takes (an int64): a count of checkpoints that needs more is advised against."""


def checkpoints_refusal(count_name: str, n_checkpoints: int, steps_name: str, n_steps: int) -> str | None:
    """Why ``n_checkpoints`` log-spaced checkpoints cannot be saved in ``n_steps`` steps, with the counts that
    would fit (None: they can), each of which the settings then accept: fewer checkpoints that fit the steps, more
    steps (within :data:`MAX_STEPS`) that fit the checkpoints, or where neither, both. ``count_name`` and
    ``steps_name`` are the settings as the user gives them."""
    over = n_checkpoints > MAX_CHECKPOINTS  # refused before any step is computed
    if not over and steps_fit(n_steps, n_checkpoints):
        return None
    below = min(n_checkpoints, MAX_CHECKPOINTS + 1)
    most = most_checkpoints(n_steps, below)
    fixes = [] if most is None else [f"set {count_name} to {most} or fewer"]
    if not over and steps_fit(MAX_STEPS, n_checkpoints):  # 554 or more need more steps than an int64 holds
        fixes.append(f"set {steps_name} to {fewest_steps(n_checkpoints)} or more")
    if not fixes:
        most = most_checkpoints(MAX_STEPS, below)
        fixes.append(f"set {count_name} to {most} or fewer and {steps_name} to {fewest_steps(most or 2)} or more")
    why = (f"is more than {MAX_CHECKPOINTS:,} checkpoints (each a saved model)" if over else
           f"is more than the distinct log-spaced steps of {steps_name} {n_steps} give")
    return f"{count_name} ({n_checkpoints}) {why}; {', or '.join(fixes)}."


def start_over(out: Path) -> str:
    """How to train the ``train-lm`` run in ``out`` again from step 0 with the command that wrote it, keeping its
    settings (``train-lm.json``) and vocabulary."""
    return (f"Delete {out / MANIFEST} and {out / CHECKPOINT_FOLDER}, then run the same mechprobe train-lm command "
            f"(--out {out}) again: it trains again from step 0 and writes every step again.")


def saved_steps(out: Path, *, fix: str) -> set[int]:
    """The steps ``out/series.json`` lists (empty when there is none yet: a fresh run), each a ``step_N`` folder
    whose ``model.json`` and ``model.safetensors`` read back, in increasing order. A damaged manifest or step raises
    :class:`RecordError` naming the file and ending with ``fix`` (how the command that wrote it starts over)."""
    manifest = out / MANIFEST
    if not manifest.exists():
        return set()
    document = records.read_json(manifest, rerun=fix)
    entries = document.get("checkpoints") if isinstance(document, dict) else None
    if not isinstance(entries, list):
        raise RecordError(f"{manifest} holds no list of checkpoints: it is damaged. {fix}")
    steps: list[int] = []
    for entry in entries:
        step = entry.get("step") if isinstance(entry, dict) else None
        if type(step) is not int or step < 0 or entry.get("path") != f"step_{step}":
            raise RecordError(f"{manifest}: entry {entry!r} is not {{\"step\": N, \"path\": \"step_N\", ...}} as "
                              f"this command writes it: it is damaged. {fix}")
        folder = out / f"step_{step}"
        described = records.checked(ModelFile, records.read_json(folder / MODEL_JSON, rerun=fix), folder / MODEL_JSON,
                                    rerun=fix)
        records.checked(StandardModelConfig, described.config, folder / MODEL_JSON, at="config", rerun=fix)
        records.read_tensors(folder / MODEL_WEIGHTS, rerun=fix)
        steps.append(step)
    if steps != sorted(set(steps)):
        raise RecordError(f"{manifest} lists the steps {steps}, not unique and increasing: it is damaged. {fix}")
    return set(steps)


def check_saved_weights(out: Path, steps: Iterable[int], model: torch.nn.Module, *, fix: str) -> None:
    """Each saved ``out/step_N/model.safetensors`` of ``steps`` holds weights of ``model``'s names and shapes (a step
    whose weights were swapped for another model's is kept by a resumed run, and measured, otherwise): one
    :class:`RecordError` naming the file and ending with ``fix``."""
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}
    for step in sorted(steps):
        weights = out / f"step_{step}" / MODEL_WEIGHTS
        tensors = records.read_tensors(weights, rerun=fix)
        wrong = next((name for name, tensor in tensors.items() if shapes.get(name) != tuple(tensor.shape)), None)
        if wrong is not None:
            raise RecordError(f"{weights} holds {wrong} of shape {list(tensors[wrong].shape)}, which this run's model "
                              f"does not have (it has {list(shapes.get(wrong, ()))}): it is damaged or another "
                              f"run's. {fix}")


def write_manifest(out: Path, steps: Iterable[int], *, tokens_per_step: int,
                   extra: Mapping[str, Any] | None = None) -> None:
    """Write ``out/series.json`` listing ``out/step_N`` for each of ``steps`` (tokens seen: ``N * tokens_per_step``)
    and the ``extra`` keys beside ``checkpoints``."""
    entries = [{"step": s, "tokens": s * tokens_per_step, "path": f"step_{s}"} for s in sorted(set(steps))]
    atomic_write_text(out / MANIFEST, json.dumps({"checkpoints": entries, **(extra or {})}, indent=1))
