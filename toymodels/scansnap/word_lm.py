"""Word-level language modelling as in PyTorch's transformer tutorial: tokenise, batchify, train with its SGD schedule.

- :func:`basic_english` is torchtext's ``basic_english`` tokenizer (lower-case; ``'`` ``"`` ``<br />``
  dropped or spaced; ``. , ( ) ! ?`` split off; ``;`` and ``:`` dropped), rewritten here;
- :func:`build_vocabulary` puts ``<unk>`` at id 0, then every word of the training text by decreasing
  count (ties: first appearance), as ``build_vocab_from_iterator(..., specials=["<unk>"])``;
- :func:`batchify` cuts one token stream into ``batch_size`` parallel columns ``[n_rows, batch_size]``,
  and training walks down them ``bptt`` rows at a time (each window predicts the next token of each
  position; the last window may be shorter);
- :func:`train_word_lm`: the tutorial's optimisation: SGD (no momentum) at ``lr``, multiplied by
  ``gamma`` after every epoch (``StepLR(step_size=1)``), gradient norm clipped at ``clip``; the model
  is in training mode (dropout on). Windows are fed batch-first ``[batch_size, bptt]``. It has the toy
  models' one training signature ``(model, data, config, *, callbacks, checkpointer, progress) -> History``.

Example::

    vocabulary = build_vocabulary(train_lines)
    stream = encode(train_lines, vocabulary)
    history = train_word_lm(model, batchify(stream, 20), WordLMTrainConfig(epochs=1))
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor, nn

from mechprobe.forward import model_device
from mechprobe.validation import integer, is_integer
from toymodels.errors import ToyConfigError
from toymodels.training import Callback, Checkpointer, History, train

UNKNOWN = "<unk>"
_PATTERNS = [(re.compile(p), r) for p, r in (
    (r"\'", " '  "), (r"\"", ""), (r"\.", " . "), (r"<br \/>", " "), (r",", " , "), (r"\(", " ( "),
    (r"\)", " ) "), (r"\!", " ! "), (r"\?", " ? "), (r"\;", " "), (r"\:", " "), (r"\s+", " "))]


def basic_english(line: str) -> list[str]:
    """torchtext's ``basic_english`` tokenisation of one line.

    Example: ``basic_english("Hello, World!") == ["hello", ",", "world", "!"]``
    """
    line = line.lower()
    for pattern, replacement in _PATTERNS:
        line = pattern.sub(replacement, line)
    return line.split()


def build_vocabulary(lines: Iterable[str]) -> list[str]:
    """``[<unk>, words by decreasing count]`` of the tokenised ``lines`` (ties keep first appearance)."""
    counts = Counter(w for line in lines for w in basic_english(line))
    counts.pop(UNKNOWN, None)
    return [UNKNOWN] + [w for w, _ in sorted(counts.items(), key=lambda item: -item[1])]


def encode(lines: Iterable[str], vocabulary: Sequence[str]) -> Int[Tensor, " token"]:
    """One stream of word ids; words outside ``vocabulary`` map to ``<unk>`` (id 0); empty lines vanish."""
    index = {w: i for i, w in enumerate(vocabulary)}
    if index.get(UNKNOWN) != 0:
        raise ToyConfigError(f"vocabulary[0] must be {UNKNOWN!r} (build it with build_vocabulary).")
    ids = [index.get(w, 0) for line in lines for w in basic_english(line)]
    return torch.tensor(ids, dtype=torch.long)


def batchify(stream: Int[Tensor, " token"], batch_size: int) -> Int[Tensor, "row batch"]:
    """``stream`` cut into ``batch_size`` contiguous columns (the remainder dropped), ``[rows, batch_size]``."""
    integer("batch_size", batch_size, 1, error=ToyConfigError)
    rows = len(stream) // batch_size
    if rows < 2:
        raise ToyConfigError(f"The token stream ({len(stream)} tokens) is too short for {batch_size} columns of "
                             f"at least 2 tokens; use a longer text or a smaller batch_size.")
    return stream[: rows * batch_size].reshape(batch_size, rows).T.contiguous()


def windows(columns: Int[Tensor, "row batch"], bptt: int) -> list[tuple[Tensor, Tensor]]:
    """``(inputs [batch, n], targets [batch, n])`` for every ``bptt``-row window down the columns."""
    out = []
    for start in range(0, columns.shape[0] - 1, bptt):
        n = min(bptt, columns.shape[0] - 1 - start)
        out.append((columns[start:start + n].T, columns[start + 1:start + 1 + n].T))
    return out


@dataclass(frozen=True)
class WordLMTrainConfig:
    """The tutorial's optimisation settings (``lr = 5``, ``gamma = 0.95`` per epoch, clip 0.5, ``bptt = 35``).

    ``max_steps`` stops early (None: all ``epochs``); ``seed`` drives dropout.
    """

    lr: float = 5.0
    gamma: float = 0.95
    clip: float = 0.5
    bptt: int = 35
    epochs: int = 3
    max_steps: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("lr", "clip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                    math.isfinite(value) and value > 0):
                raise ToyConfigError(f"WordLMTrainConfig.{name} must be a finite number > 0; got {value!r}.")
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, (int, float)) or not 0 < self.gamma <= 1:
            raise ToyConfigError(f"WordLMTrainConfig.gamma must lie in (0, 1]; got {self.gamma!r}.")
        for name, low in (("bptt", 1), ("epochs", 1), ("seed", 0)):
            value = getattr(self, name)
            integer(f"WordLMTrainConfig.{name}", value, low, error=ToyConfigError)
        if self.max_steps is not None and (not is_integer(self.max_steps)
                                           or self.max_steps < 0):
            raise ToyConfigError(
                f"WordLMTrainConfig.max_steps must be None or an integer >= 0; got {self.max_steps!r}.")


class TutorialSGD:
    """The tutorial's update as an optimiser for :func:`toymodels.training.train`: clip the gradient norm of all
    parameters at ``clip``, then ``param -= lr * grad`` (no momentum: nothing to checkpoint but ``lr``).

    ``lr`` is set by :func:`train_word_lm` before each step (the per-epoch schedule).
    """

    def __init__(self, params: Sequence[nn.Parameter], *, lr: float, clip: float) -> None:
        self.param_groups: list[dict[str, Any]] = [
            {"params": [p for p in params if p.requires_grad], "lr": lr, "clip": clip}]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for param in self.param_groups[0]["params"]:
            param.grad = None

    def step(self) -> None:
        group = self.param_groups[0]
        torch.nn.utils.clip_grad_norm_(group["params"], group["clip"])
        with torch.no_grad():
            for param in group["params"]:
                if param.grad is not None:
                    param.sub_(group["lr"] * param.grad)

    def state_dict(self) -> dict[str, Any]:
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {"state": {}, "param_groups": [{**group, "params": list(range(len(self.param_groups[0]["params"])))}]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        (group,) = state_dict["param_groups"]
        if len(group["params"]) != len(self.param_groups[0]["params"]):
            raise ToyConfigError(f"The saved optimiser state holds {len(group['params'])} parameters; this model has "
                                 f"{len(self.param_groups[0]['params'])}.")
        self.param_groups[0].update({k: v for k, v in group.items() if k != "params"})


def train_word_lm(
    model: nn.Module,
    columns: Int[Tensor, "row batch"],
    config: WordLMTrainConfig,
    *,
    callbacks: Sequence[Callback] = (),
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
) -> History:
    """Train ``model`` (tokens ``[batch pos]`` -> logits ``[batch pos d_vocab]``) on ``columns`` (module docstring).

    Step ``s`` (from 1) reads window ``(s - 1) % n_windows`` of epoch ``(s - 1) // n_windows``; windows move to
    the model's device. ``history.values`` holds ``loss`` (the window's loss before the update), ``epoch`` and
    ``lr`` per step. Each callback runs after every step as ``callback(step, model, history)``. Dropout draws
    from torch's global generator, seeded with ``config.seed`` inside a forked RNG state; a ``checkpointer``
    saves that generator's CPU state with the model, so a resumed CPU run ends as an uninterrupted one (on a
    GPU dropout draws from the device's generator, which is not saved). Runs on
    :func:`toymodels.training.train` (divergence raises :class:`toymodels.errors.TrainingDiverged`).
    """
    if not isinstance(config, WordLMTrainConfig):
        raise ToyConfigError(f"config must be a WordLMTrainConfig; got {type(config).__name__}.")
    device = model_device(model)
    batches = windows(columns, config.bptt)
    total = len(batches) * config.epochs if config.max_steps is None else min(config.max_steps,
                                                                              len(batches) * config.epochs)
    optimizer = TutorialSGD(list(model.parameters()), lr=config.lr, clip=config.clip)

    def epoch_of(step: int) -> int:
        return (step - 1) // len(batches)

    def loss_fn(step: int, generator: torch.Generator) -> Tensor:
        optimizer.param_groups[0]["lr"] = config.lr * config.gamma ** epoch_of(step)
        inputs, targets = batches[(step - 1) % len(batches)]
        logits = model(inputs.to(device))
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.to(device).reshape(-1))

    def record_schedule(step: int, trained: nn.Module, history: History) -> None:
        history.log(step, epoch=epoch_of(step), lr=optimizer.param_groups[0]["lr"])

    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        return train(model, loss_fn, [optimizer], n_steps=total, generator=torch.random.default_generator,
                     callbacks=[record_schedule, *callbacks], checkpointer=checkpointer, progress=progress,
                     desc="word LM")
