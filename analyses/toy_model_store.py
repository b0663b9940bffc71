"""A toy run's trained model on disk (``model.safetensors`` + ``model.json``), loadable like any model.

``mechprobe toy induction --out DIR`` (and the topic and Scan and Snap toys) write the trained
hooked model into ``DIR``: the weights through ``safetensors`` and ``model.json`` = ``{"format",
"experiment", "class", "config"}`` (the model's own config dataclass). :func:`load_toy_model` rebuilds
the model from them and the run's settings from ``summary.json`` (every file through
:mod:`mechprobe.records`: a damaged or missing one is one line saying to re-run the toy);
:func:`load_any_model` takes a toy folder or anything :func:`probes.load_model` takes. The loader lives here
because ``probes`` may not import ``toymodels``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_model as load_weights
from safetensors.torch import save_model as save_weights

from analyses.dynamics.lm_data import VOCAB_FILE, CutVocabTokenizer
from analyses.induction.config import InductionExperimentConfig
from analyses.paper_result import SUMMARY_FILE
from analyses.scansnap.config import ScanSnapConfig
from analyses.topic.config import TopicExperimentConfig
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text
from probes.core.errors import ModelError
from probes.core.loading import load_model
from probes.core.model_kind import HookedModel
from toymodels.induction import FullInductionModel, SimplifiedInductionConfig, SimplifiedInductionModel
from toymodels.scansnap.model import YZModelConfig, YZTransformer
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.topic.model import TopicModel, TopicModelConfig

MODEL_JSON = "model.json"
MODEL_WEIGHTS = "model.safetensors"
FORMAT = 1
MODEL_CLASSES: dict[str, tuple[type, type]] = {
    "SimplifiedInductionModel": (SimplifiedInductionModel, SimplifiedInductionConfig),
    "FullInductionModel": (FullInductionModel, SimplifiedInductionConfig),
    "TopicModel": (TopicModel, TopicModelConfig),
    "YZTransformer": (YZTransformer, YZModelConfig),
}
EXPERIMENT_CONFIGS: dict[str, type] = {"induction": InductionExperimentConfig, "topic": TopicExperimentConfig,
                                       "scansnap": ScanSnapConfig}
STANDARD_BRIDGE = "StandardBridge"
"""The class name saved for a ``build_standard_model`` bridge (rebuilt from its StandardModelConfig; a
``train-lm`` checkpoint, whose settings live in the series folder, not beside each checkpoint)."""


@dataclass(frozen=True)
class ModelFile:
    """``model.json``: the format, the experiment that trained the model, its class and its config's fields."""

    format: Literal[1]
    experiment: Literal["induction", "topic", "scansnap", "train-lm"]
    model_class: Literal["SimplifiedInductionModel", "FullInductionModel", "TopicModel", "YZTransformer",
                         "StandardBridge"] = field(metadata=records.key("class"))
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToyModel:
    """A toy model loaded from a run folder, the experiment that trained it and that run's config (the paper's
    experiment config: ``InductionExperimentConfig``, ``TopicExperimentConfig`` or ``ScanSnapConfig``; None for a
    ``train-lm`` checkpoint)."""

    model: HookedModel
    experiment: str
    config: Any
    folder: Path


def is_toy_folder(spec: Any) -> bool:
    """True when ``spec`` names a folder holding a saved toy model: ``model.json``, or ``model.safetensors`` without
    the ``config.json`` of a Hugging Face folder (a toy folder that lost its ``model.json``, which
    :func:`load_toy_model` refuses as such)."""
    if not isinstance(spec, (str, Path)):
        return False
    folder = Path(spec)
    return (folder / MODEL_JSON).is_file() or ((folder / MODEL_WEIGHTS).is_file()
                                               and not (folder / "config.json").exists())


def save_toy_model(model: torch.nn.Module, folder: str | Path, experiment: str) -> Path | None:
    """Write ``model`` into ``folder`` (see the module docstring); None (nothing written) for a model class
    the loader cannot rebuild, such as a TransformerBridge (its run is reproduced from summary.json)."""
    name = type(model).__name__
    config = getattr(model, "cfg", None)
    if name not in MODEL_CLASSES or not dataclasses.is_dataclass(config) or isinstance(config, type):
        return None
    folder = Path(folder)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    save_weights(model, str(folder / MODEL_WEIGHTS))
    atomic_write_text(folder / MODEL_JSON, json.dumps({"format": FORMAT, "experiment": experiment, "class": name,
                                                       "config": fields}, indent=1))
    return folder / MODEL_JSON


def save_standard_model(model: torch.nn.Module, config: StandardModelConfig, folder: str | Path,
                        experiment: str) -> Path:
    """Write a :func:`toymodels.standard.build_standard_model` bridge and its config into ``folder`` (module
    docstring); :func:`load_toy_model` rebuilds it. Example: ``save_standard_model(model, config, "runs/lm/step_10",
    "train-lm")``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model, str(folder / MODEL_WEIGHTS))
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    atomic_write_text(folder / MODEL_JSON, json.dumps({"format": FORMAT, "experiment": experiment,
                                                       "class": STANDARD_BRIDGE, "config": fields}, indent=1))
    return folder / MODEL_JSON


def load_toy_model(folder: str | Path, *, device: str | torch.device = "cpu") -> ToyModel:
    """The model saved in a toy run's ``folder``, in eval mode on ``device``, with the run's config.

    ``model.json``, ``model.safetensors`` and ``summary.json`` must all be there and whole (a ``train-lm``
    checkpoint has no ``summary.json`` of its own: its ``config`` is None, and its model reads text through the
    series' :class:`~analyses.dynamics.lm_data.CutVocabTokenizer`): a missing or damaged one raises
    :class:`~mechprobe.errors.RecordError` (or :class:`ModelError` for weights of another shape) in one line that
    names the file and the field and says to re-run the toy.
    """
    folder = Path(folder)
    path = folder / MODEL_JSON
    document = records.read_json(path, rerun=_rerun(folder, "the toy experiment"))
    if isinstance(document, dict) and isinstance(document.get("experiment"), str):
        rerun = _rerun(folder, document["experiment"])
    else:
        rerun = _rerun(folder, "the toy experiment")
    saved = records.checked(ModelFile, document, path, rerun=rerun)
    if saved.model_class == STANDARD_BRIDGE:
        standard = records.checked(StandardModelConfig, saved.config, path, at="config", rerun=rerun)
        bridge = build_standard_model(standard, device=device)
        if saved.experiment == "train-lm" and (folder.parent / VOCAB_FILE).is_file():
            bridge.tokenizer = CutVocabTokenizer.of_series(folder.parent)
        return _loaded(bridge, folder, saved, None, device, rerun)
    model_class, config_class = MODEL_CLASSES[saved.model_class]
    config: Any = records.checked(config_class, saved.config, path, at="config", rerun=rerun)
    summary = folder / SUMMARY_FILE
    if not summary.is_file():
        raise RecordError(f"{summary} is missing: it holds the settings the model was trained with. {rerun}")
    run = records.read_json(summary, rerun=rerun)
    if not isinstance(run, dict) or "settings" not in run:
        raise RecordError(f"{summary}: expected an object with the run's 'settings'; got {type(run).__name__} "
                          f"without them: it is damaged. {rerun}")
    run_config: Any = records.checked(EXPERIMENT_CONFIGS[saved.experiment], run["settings"], summary, at="settings",
                                      rerun=rerun)
    return _loaded(model_class(config, device=device), folder, saved, run_config, device, rerun)


def _loaded(model: Any, folder: Path, saved: ModelFile, run_config: Any, device: str | torch.device,
            rerun: str) -> ToyModel:
    """``model`` with the folder's weights, in eval mode, as a :class:`ToyModel`."""
    weights = folder / MODEL_WEIGHTS
    if not weights.is_file():
        raise RecordError(f"{weights} is missing (its folder is incomplete). {rerun}")
    try:
        load_weights(model, str(weights), device=str(device))
    except Exception as error:  # safetensors/torch raise several types for a damaged or foreign file
        raise ModelError(f"{weights} does not hold this {saved.model_class}'s weights ({type(error).__name__}): it "
                         f"is damaged or from another run. {rerun}") from None
    model.eval()
    return ToyModel(model, saved.experiment, run_config, folder)


def _rerun(folder: Path, experiment: str) -> str:
    if experiment == "train-lm":
        return f"Re-run `mechprobe train-lm --out {folder.parent}` (a new folder, or this one after deleting it)."
    command = f"mechprobe toy {experiment}" if experiment in EXPERIMENT_CONFIGS else "mechprobe toy NAME"
    return f"Re-run `{command} --out {folder}` (a new folder, or this one after deleting it)."


def load_any_model(spec: Any, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Any:
    """A hooked model from a toy run folder or from any :func:`probes.load_model` spec."""
    if is_toy_folder(spec):
        return load_toy_model(spec, device=device).model
    return load_model(spec, device=device, dtype=dtype)
