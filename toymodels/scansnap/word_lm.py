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
  is in training mode (dropout on). Windows are fed batch-first ``[batch_size, bptt]``.

Example::

    vocabulary = build_vocabulary(train_lines)
    stream = encode(train_lines, vocabulary)
    history = train_word_lm(model, batchify(stream, 20), WordLMTrainConfig(epochs=1))
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from jaxtyping import Int
from torch import Tensor, nn

from toymodels.errors import ToyConfigError

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
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ToyConfigError(f"batch_size must be an integer >= 1; got {batch_size!r}.")
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
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ToyConfigError(f"WordLMTrainConfig.{name} must be an integer >= {low}; got {value!r}.")
        if self.max_steps is not None and (isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int)
                                           or self.max_steps < 0):
            raise ToyConfigError(
                f"WordLMTrainConfig.max_steps must be None or an integer >= 0; got {self.max_steps!r}.")


@dataclass
class WordLMHistory:
    """Per optimiser step: ``steps``, ``epoch``, ``lr`` and the training-window ``loss`` (before the update)."""

    steps: list[int] = field(default_factory=list)
    epoch: list[int] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)


def train_word_lm(
    model: nn.Module,
    columns: Int[Tensor, "row batch"],
    config: WordLMTrainConfig,
    *,
    callbacks: Sequence[Callable[[int, nn.Module, WordLMHistory], None]] = (),
    progress: bool = False,
) -> WordLMHistory:
    """Train ``model`` (tokens ``[batch pos]`` -> logits ``[batch pos d_vocab]``) on ``columns`` (module docstring).

    Windows move to the model's device. Each callback runs after every step as ``callback(step, model, history)``.
    Dropout draws from torch's global generator, seeded with ``config.seed`` inside a forked RNG state.
    """
    from tqdm.auto import tqdm

    if not isinstance(config, WordLMTrainConfig):
        raise ToyConfigError(f"config must be a WordLMTrainConfig; got {type(config).__name__}.")
    device = next(model.parameters()).device
    batches = windows(columns, config.bptt)
    parameters = [p for p in model.parameters() if p.requires_grad]
    history = WordLMHistory()
    total = len(batches) * config.epochs if config.max_steps is None else min(config.max_steps,
                                                                              len(batches) * config.epochs)
    step = 0
    with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
        torch.manual_seed(config.seed)
        model.train()
        with tqdm(total=total, desc="word LM", disable=not progress) as bar:
            for epoch in range(config.epochs):
                lr = config.lr * config.gamma ** epoch
                for inputs, targets in batches:
                    if step >= total:
                        break
                    inputs, targets = inputs.to(device), targets.to(device)
                    logits = model(inputs)
                    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
                    if not math.isfinite(loss.item()):
                        raise ToyConfigError(f"Training diverged at step {step + 1} (loss {loss.item()}); lower lr.")
                    for p in parameters:
                        p.grad = None
                    loss.backward()
                    torch.nn.utils.clip_grad_norm_(parameters, config.clip)
                    with torch.no_grad():
                        for p in parameters:
                            if p.grad is not None:
                                p.sub_(lr * p.grad)
                    step += 1
                    history.steps.append(step)
                    history.epoch.append(epoch)
                    history.lr.append(lr)
                    history.loss.append(loss.item())
                    bar.update(1)
                    for callback in callbacks:
                        callback(step, model, history)
        model.eval()
    return history
