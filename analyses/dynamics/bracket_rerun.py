"""Re-running stretches of a series' training to save more checkpoints inside them (``mechprobe dynamics --refine``).

A series trained here (a ``mechprobe train-lm`` folder, the induction toy's ``OUT/series``) keeps its training state
at every saved step (``states/step_N``, :class:`toymodels.step_states.StepStates`). To add checkpoints at steps
``a < s < b`` between two saved ones, the training is built again as the first run built it, resumed from the state
of ``a`` (the fresh build when ``a`` is 0), and run to ``b``, saving the model and its state at each new step, on the
thread count the states were made with. At ``b`` its weights must equal the ones kept for ``b`` bit for bit: then the
re-run followed the first run's trajectory and the new checkpoints lie on it. Otherwise (another torch build or
device) the new checkpoints are removed and the run stops, saying so. Only checked checkpoints enter
``series.json``. A ``step_N`` folder of the series that ``series.json`` does not list, where a re-run would save
step N, is refused before any work (:func:`check_refinable`): the re-run replaced it, or removed it when it failed.

Example: ``rerun_series("runs/lm", [1800, 1900, 2000])``.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import nn

from analyses.dynamics.lm_run_folder import check_corpus_recorded
from analyses.lm_data import LmData
from analyses.series_writer import INDUCTION_TOY_MEASURE, STATES_FOLDER, write_manifest
from analyses.torch_threads import torch_threads
from analyses.toy_model_store import save_standard_model
from mechprobe import records
from probes.core.checkpoint_series import MANIFEST, checkpoint_series
from probes.core.errors import InputError
from probes.text.corpora import local_corpus_path
from toymodels.errors import CheckpointError
from toymodels.step_states import StepStates
from toymodels.training import Callback, Checkpointer, StateCallback, train

if TYPE_CHECKING:
    from analyses.dynamics.train_lm import TrainLmConfig

RERUN_PREFIX = ".rerun-"
"""The scratch folder a bracket's re-run resumes from: a new one inside the series (``.rerun-XXXX``, made for it, so
that no folder of the series' owner is taken for it), removed when it ends."""

TrainTo = Callable[[int, Checkpointer | None, Sequence[Callback], Sequence[StateCallback]], object]


@dataclass(frozen=True)
class FreshRun:
    """A series' training built again at step 0: its ``model``, ``train_to(n_steps, checkpointer, callbacks,
    state_callbacks)`` (resuming from the checkpointer's state when given) and ``save_model(folder)``, which saves
    the model as the series saves its checkpoints."""

    model: nn.Module
    train_to: TrainTo
    save_model: Callable[[Path], object]


@dataclass(frozen=True)
class SeriesTraining:
    """How a series was trained: the states' ``fingerprint``, the tokens one step reads, and ``fresh()``."""

    fingerprint: str
    tokens_per_step: int
    fresh: Callable[[], FreshRun]


@dataclass(frozen=True)
class BracketRun:
    """One re-run, from the saved step ``start`` to the saved step ``end`` (whose weights it reproduced exactly),
    saving ``added`` in between, in ``seconds``."""

    start: int
    end: int
    added: tuple[int, ...]
    seconds: float


def _lm_settings(folder: Path) -> TrainLmConfig:
    """The settings of the train-lm run in ``folder`` (its ``summary.json``), whose corpus names one text wherever
    the command is run from (:func:`~analyses.dynamics.lm_run_folder.check_corpus_recorded`), and is there."""
    from analyses.dynamics.train_lm import TrainLmSummary

    path = folder / "summary.json"
    config = records.read_record(TrainLmSummary, path,
                                 rerun=f"Run mechprobe train-lm --out {folder} to its end first.").settings
    check_corpus_recorded(config.corpus, path, "Train the series again (mechprobe train-lm, a new --out) to refine "
                                               "it, or leave --refine out.")
    corpus = local_corpus_path(config.corpus)
    if corpus is not None and not corpus.exists():
        raise InputError(f"The corpus {config.corpus} is not there: {folder} was trained on it ({path}), and --refine "
                         f"re-runs that training. Put the corpus back there to refine {folder}, or leave --refine "
                         f"out.")
    return config


def _lm_training(folder: Path, device: str | torch.device, progress: bool) -> SeriesTraining:
    from analyses.dynamics.train_lm import lm_training

    config = _lm_settings(folder)
    data = LmData.from_corpus(config.corpus, vocab=config.vocab)

    def fresh() -> FreshRun:
        run = lm_training(config, data, device=device)

        def train_to(n_steps: int, checkpointer: Checkpointer | None, callbacks: Sequence[Callback],
                     state_callbacks: Sequence[StateCallback]) -> object:
            return train(run.model, run.loss_fn, [run.optimizer], n_steps=n_steps, generator=run.generator,
                         callbacks=callbacks, checkpointer=checkpointer, progress=progress, desc="train-lm (refine)",
                         state_callbacks=state_callbacks)

        return FreshRun(run.model, train_to,
                        lambda path: save_standard_model(run.model, run.model_config, path, "train-lm"))

    return SeriesTraining(records.to_json(config, indent=None), config.batch_size * config.seq_len, fresh)


def _toy_training(settings: dict, device: str | torch.device, progress: bool) -> SeriesTraining:
    from analyses.induction.config import InductionExperimentConfig
    from analyses.induction.experiment import run_fingerprint
    from analyses.induction.findings import build_model
    from toymodels.induction.training import train_on_fresh_chains

    config = dataclasses.replace(InductionExperimentConfig.from_settings(settings), device=str(device))

    def fresh() -> FreshRun:
        model = build_model(config)

        def train_to(n_steps: int, checkpointer: Checkpointer | None, callbacks: Sequence[Callback],
                     state_callbacks: Sequence[StateCallback]) -> object:
            training = dataclasses.replace(config.standard_training(), n_steps=n_steps)
            return train_on_fresh_chains(model, config.data, training, callbacks=callbacks, checkpointer=checkpointer,
                                         progress=progress, state_callbacks=state_callbacks)

        return FreshRun(model, train_to,
                        lambda path: save_standard_model(model, config.standard_model_config(), path, "induction"))

    return SeriesTraining(run_fingerprint(config), config.standard_train.batch_size * config.data.seq_len, fresh)


def check_refinable(folder: Path) -> Literal["train-lm", "induction-toy"]:
    """Which training made the series in ``folder`` (a ``train-lm`` run or the induction toy's series); any other
    series, one saved without its training states, or one holding a ``step_N`` the manifest does not list where a
    re-run would save step N, is refused in one line."""
    if not (folder / MANIFEST).is_file():
        raise InputError(f"--refine re-runs the training of a series trained here; {folder} has no {MANIFEST} (give "
                         f"a mechprobe train-lm folder, or the induction toy's OUT/series), or leave --refine out.")
    series = checkpoint_series(folder)
    if series.extra.get("measure") == INDUCTION_TOY_MEASURE and isinstance(series.extra.get("settings"), dict):
        kind: Literal["train-lm", "induction-toy"] = "induction-toy"
    elif (folder / "summary.json").is_file() and not series.extra:
        kind = "train-lm"
        _lm_settings(folder)  # its corpus read again from any folder
    else:
        raise InputError(f"--refine re-runs the training of a series trained here (a mechprobe train-lm folder, or "
                         f"the induction toy's OUT/series); {folder} is neither. Leave --refine out, or give "
                         f"checkpoints closer together yourself.")
    for path in sorted(folder.iterdir()):  # where a re-run saves a checkpoint it adds: none of the owner's replaced
        number = path.name.removeprefix("step_")
        step = int(number) if number.isdigit() and path.name == f"step_{int(number)}" else None
        if step is not None and step not in series.steps and series.steps[0] < step < series.steps[-1]:
            raise InputError(f"{path} is not a checkpoint of the series ({MANIFEST} does not list it), and --refine "
                             f"saves the checkpoints it adds between steps {series.steps[0]} and "
                             f"{series.steps[-1]} as {folder}/step_N: move it out of {folder} (or delete it, if a "
                             f"stopped --refine left it), then run the command again.")
    states = StepStates(folder / STATES_FOLDER, steps=(), fingerprint="")
    if not states.saved():
        raise CheckpointError(f"{folder} keeps no training states ({STATES_FOLDER}/step_N), which --refine resumes "
                              f"from: it was saved by an older mechprobe. Train it again to refine it, or leave "
                              f"--refine out.")
    states.check([step for step in series.steps if step > 0])  # read whole before anything is measured
    return kind


def series_training(folder: Path, *, device: str | torch.device = "cpu", progress: bool = False) -> SeriesTraining:
    """The training of the series in ``folder`` (:func:`check_refinable`), to build again."""
    if check_refinable(folder) == "induction-toy":
        return _toy_training(checkpoint_series(folder).extra["settings"], device, progress)
    return _lm_training(folder, device, progress)


def _check_reproduced(model: nn.Module, kept: dict[str, torch.Tensor], start: int, end: int) -> None:
    state = {key: value.detach().cpu() for key, value in model.state_dict().items()}
    if state.keys() != kept.keys():
        raise CheckpointError(f"The re-run model's weights are named otherwise than the ones kept for step {end}; "
                              f"train the series again with this version.")
    for key, value in state.items():
        if not torch.equal(value, kept[key]):
            difference = float((value.double() - kept[key].double()).abs().max())
            raise CheckpointError(
                f"Re-running the training from step {start} to {end} did not reproduce the weights kept for step "
                f"{end} ({key}: largest difference {difference:.3g}), so checkpoints saved on the way would not lie "
                f"on the series' trajectory; they were removed. Refine on the machine, device and torch version the "
                f"series was trained with, or train the series again here.")


def _rerun_bracket(folder: Path, training: SeriesTraining, states: StepStates, start: int, end: int,
                   added: Sequence[int]) -> BracketRun:
    started = time.perf_counter()
    run = training.fresh()
    wanted = set(added)

    def save(step: int, model: nn.Module, history: object) -> None:
        if step in wanted:
            run.save_model(folder / f"step_{step}")

    scratch = Path(tempfile.mkdtemp(prefix=RERUN_PREFIX, dir=folder))
    new_states = StepStates(states.folder, steps=wanted, fingerprint=training.fingerprint)
    try:
        checkpointer = states.resume_from(start, scratch) if start > 0 else None
        run.train_to(end, checkpointer, [save], [new_states])
        _check_reproduced(run.model, states.weights(end), start, end)
    except BaseException:
        for step in added:
            shutil.rmtree(folder / f"step_{step}", ignore_errors=True)
            shutil.rmtree(states.folder / f"step_{step}", ignore_errors=True)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return BracketRun(start, end, tuple(sorted(added)), time.perf_counter() - started)


def rerun_series(folder: str | Path, new_steps: Sequence[int], *, device: str | torch.device = "cpu",
                 progress: bool = False) -> tuple[BracketRun, ...]:
    """Save the series in ``folder`` at ``new_steps`` too, each bracket of saved steps re-run once (module
    docstring); returns the re-runs. Steps already saved are skipped; a step outside the series is refused."""
    folder = Path(folder)
    training = series_training(folder, device=device, progress=progress)
    series = checkpoint_series(folder)
    saved = list(series.steps)
    brackets: dict[tuple[int, int], list[int]] = {}
    for step in sorted(set(new_steps) - set(saved)):
        if not saved[0] < step < saved[-1]:
            raise InputError(f"Step {step} lies outside the series' steps ({saved[0]} to {saved[-1]}); a re-run "
                             f"only adds checkpoints between two saved ones.")
        start = max(s for s in saved if s < step)
        brackets.setdefault((start, min(s for s in saved if s > step)), []).append(step)
    states = StepStates(folder / STATES_FOLDER, steps=(), fingerprint=training.fingerprint)
    kept = set(states.saved())
    missing = sorted({s for bracket in brackets for s in bracket if s > 0} - kept)
    if missing:
        raise CheckpointError(f"{folder / STATES_FOLDER} keeps no training state of step(s) {missing}, which "
                              f"--refine resumes from and checks against; this series was saved without them (by an "
                              f"older mechprobe). Train it again to refine it.")
    runs = []
    with torch_threads(states.threads() or torch.get_num_threads()):
        for (start, end), added in sorted(brackets.items()):
            runs.append(_rerun_bracket(folder, training, states, start, end, added))
            saved.extend(added)
            write_manifest(folder, saved, tokens_per_step=training.tokens_per_step, extra=dict(series.extra))
    return tuple(runs)
