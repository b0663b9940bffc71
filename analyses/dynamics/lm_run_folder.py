"""A ``mechprobe train-lm`` folder as the same command finds it again, whatever stopped the run that wrote it.

``OUT/train-lm.json`` records the run's settings and is written before anything else of the run (the corpus is
read first, and nothing is written while it is), so a folder is either new, empty, or marked as a train-lm run:
- with the same settings the same command resumes it: from ``OUT/checkpoint`` when a training checkpoint was
  saved, else from step 0, saving again every step it passes (training is deterministic, so the steps already
  in ``OUT/series.json`` are rewritten with the same weights);
- with other settings it is refused before any work, naming the settings that differ (a series is one run).
A corpus file or folder is recorded by its absolute path (:func:`absolute_corpus`), so that the run is resumed, and
refined, on the same text wherever the command is run from; a relative one, recorded by an older mechprobe without
the folder it was relative to, is refused naming it (:func:`check_corpus_recorded`).

Example: ``check_rerun(Path("runs/lm"), records.dump(config))`` before ``train_lm(config, "runs/lm")``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from analyses.lm_data import VOCAB_FILE, kept_ids
from analyses.series_writer import CHECKPOINT_FOLDER, saved_steps, start_over
from mechprobe import records
from mechprobe.errors import RecordError
from probes.core.atomic import atomic_write_text
from probes.core.checkpoint_series import MANIFEST
from probes.core.errors import InputError
from probes.text.corpora import local_corpus_path

SETTINGS_FILE = "train-lm.json"
"""``{"settings": {...}}``: the settings of the train-lm run in this folder."""


def is_train_lm_folder(folder: Path) -> bool:
    """Whether ``folder`` holds a train-lm run (complete or stopped) that the same command takes again."""
    return (folder / SETTINGS_FILE).is_file()


def resumable(out: Path) -> bool:
    """Whether ``out`` (a folder with files) holds a train-lm run the same command takes again; a folder with a
    run's files (its ``vocab.json`` beside ``series.json`` or ``checkpoint/``) but not the settings file that lets
    it be resumed (deleted, or written before there was one) is refused naming that file. Any other folder (another
    series, the induction toy's) is not one: the caller refuses it as a folder of other files."""
    if is_train_lm_folder(out):
        return True
    if (out / VOCAB_FILE).is_file() and any((out / name).exists() for name in (MANIFEST, CHECKPOINT_FOLDER)):
        raise InputError(f"{out / SETTINGS_FILE} is missing: it records the settings of the train-lm run in {out}, "
                         f"without which the run cannot be resumed. Give a new --out, or delete {out} to train it "
                         f"again.")
    return False


def absolute_corpus(corpus: str) -> str:
    """``corpus`` as a train-lm run records it: a file or folder by its absolute path, a named corpus as given."""
    path = local_corpus_path(corpus)
    return corpus if path is None else str(path.resolve())


def check_corpus_recorded(corpus: str, record: Path, fix: str) -> None:
    """The corpus ``record`` holds names one text wherever the command is run from; a relative path is refused
    naming it, with ``fix``: the folder it was relative to was not recorded."""
    path = local_corpus_path(corpus)
    if path is not None and not path.is_absolute():
        raise InputError(f"{record} records the corpus {corpus!r} relative to the folder the run was started from, "
                         f"which it does not record (an older mechprobe wrote it): which text it is cannot be told "
                         f"from here. {fix}")


def check_rerun(out: Path, settings: dict[str, Any]) -> set[int]:
    """The steps already saved in ``out`` when it holds a train-lm run of ``settings`` (``records.dump`` of a
    config), nothing when it holds none; any other run is refused naming what differs. Reads no corpus."""
    path = out / SETTINGS_FILE
    if not path.exists():
        return set()
    elsewhere = f"give a new --out, or delete {out} to train it again"
    document = records.read_json(path, rerun=f"It records the settings of the train-lm run in {out}: {elsewhere}.")
    recorded = document.get("settings") if isinstance(document, dict) else None
    if not isinstance(recorded, dict):
        raise RecordError(f"{path} holds no settings: it is damaged. It records the settings of the train-lm run in "
                          f"{out}: {elsewhere}.")
    if isinstance(recorded.get("corpus"), str):
        check_corpus_recorded(recorded["corpus"], path, f"Give a new --out (or delete {out}) to train on --corpus "
                                                        f"{settings.get('corpus')} again.")
    differ = [f"{key} {recorded.get(key)!r} there, {value!r} here" for key, value in settings.items()
              if recorded.get(key) != value]
    differ += [f"{key} {value!r} there, not a setting here" for key, value in recorded.items() if key not in settings]
    if differ:
        raise InputError(f"--out {out} holds a train-lm run with other settings ({'; '.join(differ)}): run the "
                         f"command with its settings to resume it, or {elsewhere} with these settings.")
    if not (out / MANIFEST).exists() and (out / CHECKPOINT_FOLDER).exists():
        raise RecordError(f"{out / MANIFEST} is missing: it lists the steps this run saved before its checkpoint in "
                          f"{out / CHECKPOINT_FOLDER}. Delete that checkpoint folder: the same command then trains "
                          f"again from step 0 and writes every step again.")
    return saved_steps(out, fix=start_over(out))


def check_vocabulary(out: Path, corpus: str, kept: Sequence[int]) -> None:
    """A run resumed in ``out`` cuts its corpus to the vocabulary its saved steps were trained in (``vocab.json``);
    a corpus whose text changed since (another file at the same path) is refused before anything is written: the
    saved steps would read text through the new vocabulary, and training go on over other rows. A damaged
    ``vocab.json`` is written again, as before."""
    if not (out / VOCAB_FILE).is_file():
        return
    try:
        saved = kept_ids(out)
    except InputError:
        return
    if saved != list(kept):
        raise InputError(f"--out {out} was trained on another text of the corpus {corpus!r}: its vocabulary "
                         f"({out / VOCAB_FILE}) is not the one the corpus gives now, so the text changed since. Put "
                         f"that text back to resume {out}, or give a new --out (or delete {out}) to train on the "
                         f"text as it is now.")


def mark_run(out: Path, settings: dict[str, Any]) -> None:
    """Make ``out`` (and its parents) and record ``settings`` in it, unless it already holds them."""
    out.mkdir(parents=True, exist_ok=True)
    if not is_train_lm_folder(out):
        atomic_write_text(out / SETTINGS_FILE, records.to_json({"settings": settings}))
