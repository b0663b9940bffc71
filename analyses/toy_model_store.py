"""A toy run's trained model on disk (``model.safetensors`` + ``model.json``): the format and its writers.

``mechprobe toy induction --out DIR`` (and the topic and Scan and Snap toys) write the trained
hooked model into ``DIR``: the weights through ``safetensors`` and ``model.json`` = ``{"format",
"experiment", "class", "config"}`` (the model's own config dataclass); ``mechprobe train-lm`` writes each
checkpoint the same way. :mod:`analyses.toy_model_loader` reads them back. The writers sit below the toy
experiments that call them, the loader above them (it needs each experiment's config class).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from safetensors.torch import save_model as save_weights

from analyses.toy_registry import TOYS
from mechprobe import records
from probes.core.atomic import atomic_write_text
from toymodels.standard import StandardModelConfig

MODEL_JSON = "model.json"
MODEL_WEIGHTS = "model.safetensors"
HF_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json")
"""Files a Hugging Face checkpoint folder holds and a toy folder never does."""
FORMAT = 1
MODEL_CLASSES: dict[str, tuple[type, type]] = {model.__name__: (model, config) for spec in TOYS
                                                for model, config in spec.models}
"""Each toy model class a toy folder may hold, by the name ``model.json`` saves, with its config class (the toys'
records: :mod:`analyses.toy_registry`)."""
STANDARD_BRIDGE = "StandardBridge"
"""The class name saved for a ``build_standard_model`` bridge (rebuilt from its StandardModelConfig; a
``train-lm`` checkpoint, whose settings live in the series folder, not beside each checkpoint)."""
if TYPE_CHECKING:
    Experiment = str
    ModelClass = str
else:  # what records.checked reads model.json's fields against: a toy's name or train-lm, a class saved
    _EXPERIMENTS = (*(spec.name for spec in TOYS), "train-lm")
    _MODEL_CLASSES = (*MODEL_CLASSES, STANDARD_BRIDGE)
    Experiment = Literal[_EXPERIMENTS]
    ModelClass = Literal[_MODEL_CLASSES]


@dataclass(frozen=True)
class ModelFile:
    """``model.json``: the format, the experiment that trained the model, its class and its config's fields."""

    format: Literal[1]
    experiment: Experiment
    model_class: ModelClass = field(metadata=records.key("class"))
    config: dict[str, Any] = field(default_factory=dict)


def is_toy_folder(spec: Any) -> bool:
    """True when ``spec`` names a folder holding a saved toy model: ``model.json``, or ``model.safetensors`` without
    the files of a Hugging Face folder (a toy folder that lost its ``model.json``, which
    :func:`~analyses.toy_model_loader.load_toy_model` refuses as such; a Hugging Face folder that lost its
    ``config.json`` keeps its tokenizer files, and is refused as a checkpoint without config.json, not told to re-run
    a toy)."""
    if not isinstance(spec, (str, Path)):
        return False
    folder = Path(spec)
    return (folder / MODEL_JSON).is_file() or ((folder / MODEL_WEIGHTS).is_file()
                                               and not any((folder / name).exists() for name in HF_FILES))


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
    docstring); :func:`~analyses.toy_model_loader.load_toy_model` rebuilds it. Example:
    ``save_standard_model(model, config, "runs/lm/step_10", "train-lm")``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model, str(folder / MODEL_WEIGHTS))
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    atomic_write_text(folder / MODEL_JSON, json.dumps({"format": FORMAT, "experiment": experiment,
                                                       "class": STANDARD_BRIDGE, "config": fields}, indent=1))
    return folder / MODEL_JSON
