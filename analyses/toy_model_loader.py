"""A toy run's folder as a model: :func:`load_toy_model` rebuilds the model that :mod:`analyses.toy_model_store`
wrote and the run's settings from ``summary.json`` (every file through :mod:`mechprobe.records`: a damaged or missing
one is one line naming the command that wrote it); :func:`load_any_model` takes a toy folder or anything
:func:`probes.load_model` takes. The loader lives in ``analyses`` because ``probes`` may not import ``toymodels``,
and above the toy experiments because it needs each one's config class.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as load_weights

from analyses.cli_checks import check_model_spec, naming
from analyses.induction.experiment import SERIES_FOLDER
from analyses.lm_data import VOCAB_FILE, CutVocabTokenizer
from analyses.paper_result import SUMMARY_FILE
from analyses.series_writer import start_over
from analyses.toy_model_store import (
    MODEL_CLASSES,
    MODEL_JSON,
    MODEL_WEIGHTS,
    STANDARD_BRIDGE,
    ModelFile,
    is_toy_folder,
)
from analyses.toy_registry import toy_names, toy_spec
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.checkpoint_series import MANIFEST
from probes.core.errors import ConfigError, ModelError
from probes.core.loading import check_model_path, load_model, non_finite_parameter
from probes.core.model_kind import HookedModel
from toymodels.standard import StandardModelConfig, build_standard_model


@dataclass(frozen=True)
class ToyModel:
    """A toy model loaded from a run folder, the experiment that trained it and that run's config (the paper's
    experiment config: ``InductionExperimentConfig``, ``TopicExperimentConfig`` or ``ScanSnapConfig``; None for a
    ``train-lm`` checkpoint)."""

    model: HookedModel
    experiment: str
    config: Any
    folder: Path



def load_toy_model(folder: str | Path, *, device: str | torch.device = "cpu") -> ToyModel:
    """The model saved in a toy run's ``folder``, in eval mode on ``device``, with the run's config.

    ``model.json``, ``model.safetensors`` and ``summary.json`` must all be there and whole (a ``train-lm``
    checkpoint has no ``summary.json`` of its own: its ``config`` is None, and its model reads text through the
    series' :class:`~analyses.lm_data.CutVocabTokenizer`): a missing or damaged one raises
    :class:`~mechprobe.errors.RecordError` (or :class:`ModelError` for weights of another shape) in one line that
    names the file and the field and the command that wrote it (the toy, or the train-lm run of a series step).
    """
    folder = Path(folder)
    saved, config, rerun = _model_file(folder)
    if saved.model_class == STANDARD_BRIDGE:
        bridge = build_standard_model(config, device=device)
        if saved.experiment == "train-lm" and (folder.parent / VOCAB_FILE).is_file():
            bridge.tokenizer = CutVocabTokenizer.of_series(folder.parent)
            if len(bridge.tokenizer) != config.d_vocab:  # the vocabulary of another run: every token read wrong
                raise RecordError(f"{folder.parent / VOCAB_FILE} holds {len(bridge.tokenizer)} tokens with OTHER, and "
                                  f"the model in {folder} reads {config.d_vocab}: the vocabulary is another run's. "
                                  f"{rerun}")
        return _loaded(bridge, folder, saved, None, device, rerun)
    model_class, _ = MODEL_CLASSES[saved.model_class]
    summary = folder / SUMMARY_FILE
    if not summary.exists() and not summary.is_symlink():  # (a folder or a link in its place: read_json names it)
        raise RecordError(f"{summary} is missing: it holds the settings the model was trained with. {rerun}")
    run = records.read_json(summary, rerun=rerun)
    if not isinstance(run, dict) or "settings" not in run:
        raise RecordError(f"{summary}: expected an object with the run's 'settings'; got {type(run).__name__} "
                          f"without them: it is damaged. {rerun}")
    run_config: Any = records.checked(toy_spec(saved.experiment).config_class(), run["settings"], summary,
                                      at="settings", rerun=rerun)
    return _loaded(model_class(config, device=device), folder, saved, run_config, device, rerun)


def _model_file(folder: Path) -> tuple[ModelFile, Any, str]:
    """``folder/model.json`` read, the model's config it holds, and what to re-run when a file of the folder is
    damaged."""
    path = folder / MODEL_JSON
    document = records.read_json(path, rerun=_rerun(folder, None))
    named = document.get("experiment") if isinstance(document, dict) else None
    rerun = _rerun(folder, named if isinstance(named, str) else None)
    saved = records.checked(ModelFile, document, path, rerun=rerun)
    config_class = StandardModelConfig if saved.model_class == STANDARD_BRIDGE else MODEL_CLASSES[saved.model_class][1]
    return saved, records.checked(config_class, saved.config, path, at="config", rerun=rerun), rerun


def train_lm_context(spec: str) -> int | None:
    """The context (``n_ctx``) of the train-lm model saved in the folder ``spec``, read from its ``model.json``
    without loading the model; None for any other model. Example: ``train_lm_context("runs/lm/step_0") == 128``."""
    if not is_toy_folder(spec):
        return None
    saved, config, _ = _model_file(Path(spec))
    return config.n_ctx if saved.experiment == "train-lm" else None


def check_toy_checkpoints(specs: Iterable[str]) -> None:
    """Each checkpoint of a series (its ``specs``) that is a local path holds a model, checked before the first one
    is measured: a toy or train-lm step is loaded (one at a time, then dropped: its ``model.json``, weights of the
    model's shapes and finite, and a train-lm step's vocabulary), any other folder or file must be one
    :func:`probes.load_model` reads (a step emptied, or a file in its place, was found only when its turn came, after
    the steps before it were measured). A damaged one is refused in one line naming the file and the command that
    wrote it.

    Example: ``check_toy_checkpoints(["runs/lm/step_0", "runs/lm/step_10"])``."""
    for spec in specs:
        if is_toy_folder(spec):
            load_toy_model(spec)
        else:
            check_model_path(spec)


def _loaded(model: Any, folder: Path, saved: ModelFile, run_config: Any, device: str | torch.device,
            rerun: str) -> ToyModel:
    """``model`` with the folder's weights, in eval mode, as a :class:`ToyModel`."""
    weights = folder / MODEL_WEIGHTS
    if not weights.is_file():
        raise records.not_a_file(weights, rerun)
    try:
        load_weights(model, str(weights), device=str(device))
    except Exception as error:  # safetensors/torch raise several types for a damaged or foreign file
        raise ModelError(f"{weights} does not hold this {saved.model_class}'s weights ({type(error).__name__}): it "
                         f"is damaged or from another run. {rerun}") from None
    broken = non_finite_parameter(model)
    if broken is not None:  # every probe of it would read NaN
        raise ModelError(f"{weights}: {broken} holds NaN or infinite values: the file is damaged, or its run "
                         f"diverged. {rerun}")
    model.eval()
    return ToyModel(model, saved.experiment, run_config, folder)


def _rerun(folder: Path, experiment: str | None) -> str:
    """How to write ``folder`` again, naming the command that wrote it: a step of a ``train-lm`` series (whose folder
    holds the cut vocabulary), a step of the induction toy's series (``OUT/series/step_N``) or a toy run's folder.
    ``experiment`` is the one ``model.json`` names (None where it does not read)."""
    series = folder.parent
    if experiment == "train-lm" or (experiment is None and (series / VOCAB_FILE).is_file()):
        return f"{folder} is a step of the train-lm run in {series}. {start_over(series)}"
    if experiment in ("induction", None) and series.name == SERIES_FOLDER and (series / MANIFEST).is_file():
        return (f"{folder} is a step of the series the induction toy saved in {series.parent}: run the same "
                f"mechprobe toy induction command (--out {series.parent}) again; its new run replaces that folder.")
    command = f"mechprobe toy {experiment}" if experiment in toy_names() else "mechprobe toy NAME"
    return f"Re-run `{command} --out {folder}` (a new folder, or this one after deleting it)."


def load_any_model(spec: Any, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Any:
    """A hooked model from a toy run folder (a train-lm step too) or from any :func:`probes.load_model` spec. A
    checkpoint series' own folder is refused: it holds many models."""
    if is_toy_folder(spec):
        return load_toy_model(spec, device=device).model
    if isinstance(spec, (str, Path)) and (Path(spec) / MANIFEST).is_file():
        raise ModelError(f"{spec} is a checkpoint series ({MANIFEST}), many models: give one of the step "
                         f"folders it lists, or measure the series over its steps "
                         f"with mechprobe dynamics --model {spec}.")
    return load_model(spec, device=device, dtype=dtype)


def check_pretrained_spec(flag: str, spec: str, *, toys: str = "") -> str:
    """``spec`` as a pretrained model, checked before any work (:func:`~analyses.cli_checks.check_model_spec`):
    where it is a local path, one :func:`probes.load_model` reads (a Hugging Face or TransformerLens checkpoint), not
    a toy or train-lm folder, a checkpoint series or another command's output. ``toys``: where this command takes
    toys instead (the report: its own toys and ``--series``); by default, the commands that probe a toy folder.

    Example: ``check_pretrained_spec("--model", "runs/toy")`` raises ``ModelError("--model runs/toy is a toy model's
    folder ...")``."""
    check_model_spec(flag, spec)
    path = Path(spec).expanduser()
    takes = (f"{flag} takes a pretrained model: a packaged or Hugging Face hub name, a Hugging Face checkpoint folder "
             f"or a TransformerLens checkpoint")
    if is_toy_folder(path):
        instead = toys or f"probe the toy with mechprobe heads, ablate or probe-linear --model {spec}"
        raise ModelError(f"{flag} {spec} is a toy model's folder (written by mechprobe toy or train-lm); {takes}. "
                         f"{instead[0].upper()}{instead[1:]}.")
    if (path / MANIFEST).exists() or (path / MANIFEST).is_symlink():
        instead = toys or f"measure it with mechprobe dynamics --model {spec}"
        raise ModelError(f"{flag} {spec} is a checkpoint series ({MANIFEST}), many models; {takes}. "
                         f"{instead[0].upper()}{instead[1:]}.")
    with naming(flag):
        check_model_path(spec)
    return spec


def refuse_toy_dtype(spec: str, dtype: str | None) -> None:
    """``--dtype`` sets how a pretrained model's weights load; a toy or train-lm folder's model loads in float32, as
    trained, so the flag is refused there instead of ignored."""
    if dtype is not None and is_toy_folder(spec):
        raise ConfigError(f"--dtype does not apply to a toy folder ({spec}: its model is float32, as trained); "
                          f"drop --dtype.")
