"""What a toy run's training did: the step each checkpoint restore returned and the steps that trained.

``python -m tests.toymodels.step_spy OUT.json ARGS...`` runs ``mechprobe ARGS...`` in this fresh process and writes
``{"restored": [...], "trained": [...]}`` to OUT.json (also when the command fails); in-process, ``spy(monkeypatch)``
returns the same record, filled as the command runs. "trained" holds the steps whose loss
:func:`toymodels.training.train` computed (one per optimiser step), so a run that read its checkpoint at step S
trains exactly S+1 .. N, and one that ignored it trains 1 .. N again.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

import toymodels.training
from toymodels.training import Checkpointer

# every module that imports train by name (the spy replaces it there too)
_USERS = ("toymodels", "toymodels.induction.training", "toymodels.scansnap.training", "toymodels.scansnap.word_lm",
          "toymodels.topic.training")


def spy(patch: Any) -> dict[str, list[int]]:
    """Record restores and trained steps; ``patch(obj, name, value)`` installs (``monkeypatch.setattr``)."""
    record: dict[str, list[int]] = {"restored": [], "trained": []}
    restore, train = Checkpointer.restore, toymodels.training.train

    def spied_restore(self, *args, **kwargs):
        restored = restore(self, *args, **kwargs)
        record["restored"].append(-1 if restored is None else restored[0])  # -1: nothing to restore
        return restored

    def spied_train(model, loss_fn, *args, **kwargs):
        def counted(step, generator):
            record["trained"].append(step)
            return loss_fn(step, generator)
        return train(model, counted, *args, **kwargs)

    patch(Checkpointer, "restore", spied_restore)
    for name in ("toymodels.training", *_USERS):
        module = importlib.import_module(name)
        assert module.train is train, name  # a module that imports train by name and is not listed would escape
        patch(module, "train", spied_train)
    return record


if __name__ == "__main__":
    from analyses.cli import main

    seen = spy(setattr)
    try:
        code = main(sys.argv[2:])
    finally:
        with open(sys.argv[1], "w", encoding="utf-8") as handle:
            json.dump(seen, handle)
    sys.exit(code)
