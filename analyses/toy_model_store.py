"""A toy run's trained model on disk (``model.safetensors`` + ``model.json``), loadable like any model.

``mechprobe toy induction --out DIR`` (and the topic and Scan and Snap toys) write the trained
hooked model into ``DIR``: the weights through ``safetensors`` and ``model.json`` = ``{"format",
"experiment", "class", "config"}`` (the model's own config dataclass). :func:`load_toy_model` rebuilds
the model from them; :func:`load_any_model` takes a toy folder or anything :func:`probes.load_model`
takes. The loader lives here because ``probes`` may not import ``toymodels``.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as load_weights
from safetensors.torch import save_model as save_weights

from probes.core.atomic import atomic_write_text
from probes.core.errors import InputError, ModelError
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
STANDARD_BRIDGE = "StandardBridge"
"""The class name saved for a ``build_standard_model`` bridge (rebuilt from its StandardModelConfig)."""


@dataclass(frozen=True)
class ToyModel:
    """A toy model loaded from a run folder, the experiment that trained it and that run's settings."""

    model: HookedModel
    experiment: str
    settings: dict[str, Any]
    folder: Path


def is_toy_folder(spec: Any) -> bool:
    """True when ``spec`` names a folder holding a saved toy model (``model.json``)."""
    return isinstance(spec, (str, Path)) and (Path(spec) / MODEL_JSON).is_file()


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
    """The model saved in a toy run's ``folder``, in eval mode on ``device``, with the run's settings."""
    folder = Path(folder)
    try:
        document = json.loads((folder / MODEL_JSON).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise InputError(f"{folder / MODEL_JSON} cannot be read ({error}); re-run the toy experiment.") from None
    known = (*MODEL_CLASSES, STANDARD_BRIDGE)
    if not isinstance(document, dict) or document.get("format") != FORMAT or document.get("class") not in known:
        raise InputError(f"{folder / MODEL_JSON} is not a saved toy model of format {FORMAT} (one of "
                         f"{', '.join(known)}); re-run the toy experiment.")
    config: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in document["config"].items()}
    model: Any
    if document["class"] == STANDARD_BRIDGE:
        model = build_standard_model(StandardModelConfig(**config), device=device)
    else:
        model_class, config_class = MODEL_CLASSES[document["class"]]
        model = model_class(config_class(**config), device=device)
    try:
        load_weights(model, str(folder / MODEL_WEIGHTS), device=str(device))
    except Exception as error:  # safetensors/torch raise several types for a damaged or foreign file
        raise ModelError(f"{folder / MODEL_WEIGHTS} does not hold this {document['class']}'s weights "
                         f"({type(error).__name__}); re-run the toy experiment.") from None
    model.eval()
    settings: dict[str, Any] = {}
    if (folder / "summary.json").is_file():
        settings = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("settings") or {}
    return ToyModel(model, document["experiment"], settings, folder)


def load_any_model(spec: Any, *, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Any:
    """A hooked model from a toy run folder or from any :func:`probes.load_model` spec."""
    if is_toy_folder(spec):
        return load_toy_model(spec, device=device).model
    return load_model(spec, device=device, dtype=dtype)
