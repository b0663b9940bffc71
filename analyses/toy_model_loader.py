"""A toy run's folder as a model: :func:`load_toy_model` rebuilds the model that :mod:`analyses.toy_model_store`
wrote and the run's settings from ``summary.json`` (every file through :mod:`mechprobe.records`: a damaged or missing
one is one line saying to re-run the toy); :func:`load_any_model` takes a toy folder or anything
:func:`probes.load_model` takes. The loader lives in ``analyses`` because ``probes`` may not import ``toymodels``,
and above the toy experiments because it needs each one's config class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model as load_weights

from analyses.induction.config import InductionExperimentConfig
from analyses.lm_data import VOCAB_FILE, CutVocabTokenizer
from analyses.paper_result import SUMMARY_FILE
from analyses.scansnap.config import ScanSnapConfig
from analyses.topic.config import TopicExperimentConfig
from analyses.toy_model_store import (
    MODEL_CLASSES,
    MODEL_JSON,
    MODEL_WEIGHTS,
    STANDARD_BRIDGE,
    ModelFile,
    is_toy_folder,
)
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.errors import ModelError
from probes.core.loading import load_model
from probes.core.model_kind import HookedModel
from toymodels.standard import StandardModelConfig, build_standard_model

EXPERIMENT_CONFIGS: dict[str, type] = {"induction": InductionExperimentConfig, "topic": TopicExperimentConfig,
                                       "scansnap": ScanSnapConfig}


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
