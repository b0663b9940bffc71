"""Masked-LM training of the topic models on LDA documents, with norm-recording callbacks.

The training set (:class:`MaskedLMData`) is a fixed set of ``n_documents`` documents drawn from its
``seed`` (the reference code's setting); with ``static_masks`` each document is masked once, otherwise
it is re-masked every time it is drawn. ``n_documents=None`` draws fresh documents every step.
Minibatches are drawn from the training loop's generator (seeded with the training config's ``seed``),
so checkpoints resume exactly. A TopicModel without hooks is trained through
``TopicModel.query_logits`` on the selected positions only (the loss reads nothing else); with hooks
attached, or for a TransformerBridge, the full forward pass runs.

Example::

    model = TopicModel(TopicModelConfig())
    data = MaskedLMData(LDAConfig(), MaskingConfig(), MaskedLMDataConfig(), seed=0)
    history = train_topic_model(model, data, TopicTrainingConfig(n_steps=200), callbacks=[record_attention_norms()])
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn

from mechprobe.forward import model_device
from mechprobe.validation import at_least, fraction, is_integer, one_of, positive
from toymodels.errors import ToyConfigError
from toymodels.topic.data import Documents, LDAConfig, MaskedDocuments, MaskingConfig, mask_documents, sample_documents
from toymodels.topic.model import TopicModel
from toymodels.training import Callback, Checkpointer, History, make_optimizer, train

LossKind = Literal["squared", "cross_entropy"]


@dataclass(frozen=True)
class MaskedLMDataConfig:
    """The masked-LM training set: ``n_documents`` documents (None: fresh ones every step), masked once
    (``static_masks``) or at every draw; ``exclude_masked_keys`` hides the selected positions from the
    attention keys (the reference code does)."""

    n_documents: int | None = 4096
    static_masks: bool = True
    exclude_masked_keys: bool = True

    def __post_init__(self) -> None:
        if self.n_documents is not None:
            at_least("n_documents", self.n_documents, 1, error=ToyConfigError)
        for name in ("static_masks", "exclude_masked_keys"):
            one_of(name, getattr(self, name), (True, False), error=ToyConfigError)
        if self.n_documents is None and self.static_masks:
            raise ToyConfigError(
                "static_masks=True needs a fixed training set: set n_documents to a number, or use "
                "static_masks=False with fresh documents (n_documents=None)."
            )


@dataclass(frozen=True)
class TopicTrainingConfig:
    """Optimisation settings; ``seed`` seeds the minibatch draws (and dynamic masks).

    ``l2`` is the optimiser's weight decay on every trained parameter. ``value_l2`` is the paper's
    regulariser of the W_V stage (Theorem 2): ``value_l2 * ||W_V||_F^2`` added to the mean masked-LM
    loss of each batch (see :func:`value_l2_penalty`; nothing is added while W_V is frozen).
    ``loss`` is ``"cross_entropy"`` (the paper's experiments) or ``"squared"`` (its theory).
    """

    n_steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-3
    optimizer: Literal["sgd", "adam"] = "adam"
    momentum: float = 0.0
    l2: float = 0.0
    value_l2: float = 0.0
    loss: LossKind = "squared"
    seed: int = 0

    def __post_init__(self) -> None:
        for name, minimum in (("n_steps", 0), ("batch_size", 1)):
            value = getattr(self, name)
            if not is_integer(value):
                raise ToyConfigError(f"{name} must be an integer >= {minimum}; got {value!r}.")
            at_least(name, value, minimum, error=ToyConfigError)
        positive("lr", self.lr, error=ToyConfigError)
        one_of("optimizer", self.optimizer, ("sgd", "adam"), error=ToyConfigError)
        fraction("momentum", self.momentum, open_high=True, error=ToyConfigError)
        for name in ("l2", "value_l2"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                math.isfinite(value) and value >= 0
            ):
                raise ToyConfigError(f"{name} must be a finite number >= 0 (0 = off); got {value!r}.")
        one_of("loss", self.loss, ("squared", "cross_entropy"), error=ToyConfigError)
        if not is_integer(self.seed):
            raise ToyConfigError(f"seed must be an integer; got {self.seed!r}.")


class MaskedLMData:
    """Draws masked minibatches: ``batch(batch_size, generator) -> (MaskedDocuments, key_mask)``.

    ``key_mask[b, k]`` is False at selected positions when ``exclude_masked_keys`` (the
    reference code removes them from the attention keys) and True elsewhere. The fixed training set
    (``config.n_documents``) and its static masks are drawn from ``seed``.
    """

    def __init__(self, lda: LDAConfig, masking: MaskingConfig, config: MaskedLMDataConfig = MaskedLMDataConfig(),
                 *, seed: int = 0) -> None:
        self.lda, self.masking, self.config, self.seed = lda, masking, config, seed
        self.documents: Documents | None = None
        self.masked: MaskedDocuments | None = None
        if config.n_documents is not None:
            data_generator = torch.Generator().manual_seed(seed)
            self.documents = sample_documents(lda, config.n_documents, data_generator)
            if config.static_masks:
                self.masked = mask_documents(self.documents, masking, data_generator, lda=lda)

    def batch(self, batch_size: int, generator: torch.Generator) -> tuple[MaskedDocuments, Bool[Tensor, "batch pos"]]:
        if self.documents is None:
            masked = mask_documents(sample_documents(self.lda, batch_size, generator), self.masking, generator,
                                    lda=self.lda)
        else:
            index = torch.randint(0, self.documents.tokens.shape[0], (batch_size,), generator=generator)
            if self.masked is not None:
                masked = _take(self.masked, index)
            else:
                documents = Documents(self.documents.tokens[index], self.documents.lengths[index],
                                      self.documents.theta[index], self.documents.word_topics[index])
                masked = mask_documents(documents, self.masking, generator, lda=self.lda)
        key_mask = ~masked.selected if self.config.exclude_masked_keys else torch.ones_like(masked.selected)
        return masked, key_mask


def _take(masked: MaskedDocuments, index: Tensor) -> MaskedDocuments:
    n_pos = int(masked.is_word[index].sum(-1).max())
    return MaskedDocuments(*(getattr(masked, f.name)[index, :n_pos] for f in dataclasses.fields(masked)))


def masked_lm_loss(logits: Float[Tensor, "batch pos d_out"], targets: Int[Tensor, "batch pos"],
                   selected: Bool[Tensor, "batch pos"], kind: LossKind) -> Tensor:
    """Mean over selected positions of the cross-entropy, or of ``||logits - onehot(target)||^2``."""
    chosen, wanted = logits[selected], targets[selected]
    if chosen.shape[0] == 0:
        return logits.sum() * 0.0
    if kind == "cross_entropy":
        return F.cross_entropy(chosen, wanted)
    return ((chosen - F.one_hot(wanted, chosen.shape[-1]).to(chosen.dtype)) ** 2).sum(-1).mean()


def selected_positions(
    selected: Bool[Tensor, "batch pos"],
) -> tuple[Int[Tensor, "batch query"], Bool[Tensor, "batch query"]]:
    """Each row's selected positions in order, padded to the longest row.

    ``index[b, j]`` is row ``b``'s ``j``-th selected position and ``valid[b, j]`` says whether
    there is one (padding slots point at position 0), so ``x.gather(1, index)[valid]`` equals
    ``x[selected]`` in the same order.
    """
    counts = selected.sum(1)
    width = int(counts.max()) if selected.numel() else 0
    index = torch.sort((~selected).to(torch.uint8), dim=1, stable=True).indices[:, :width]
    return index, torch.arange(width, device=selected.device) < counts[:, None]


def batch_loss(model: nn.Module, masked: MaskedDocuments, key_mask: Bool[Tensor, "batch pos"], pad_id: int,
               kind: LossKind) -> Tensor:
    """``masked_lm_loss`` of ``model`` on ``masked``; a hook-free TopicModel computes only the selected rows."""
    if isinstance(model, TopicModel) and not model.has_active_hooks():
        index, valid = selected_positions(masked.selected)
        logits = model.query_logits(masked.inputs, index, key_mask)
        return masked_lm_loss(logits, masked.targets.gather(1, index), valid, kind)
    return masked_lm_loss(model_logits(model, masked.inputs, key_mask, pad_id), masked.targets, masked.selected, kind)


def value_l2_penalty(model: nn.Module, coefficient: float) -> Tensor:
    """``coefficient * ||W_V||_F^2`` (sum of the squared entries of the first layer's W_V; no bias).

    Zero (a constant) when ``coefficient`` is 0 or W_V is frozen. Example: a TopicModel with
    ``W_V = [[1, 2], [0, -1]]`` and ``coefficient = 0.1`` gives ``0.1 * (1 + 4 + 0 + 1) = 0.6``.
    """
    value = attention_weights(model)["W_V"]
    if coefficient == 0 or not value.requires_grad:
        return value.new_zeros(())
    return coefficient * value.pow(2).sum()


def model_logits(model: nn.Module, inputs: Tensor, key_mask: Tensor, pad_id: int) -> Tensor:
    """Logits of a :class:`TopicModel` (keys hidden by ``key_mask``) or of a TransformerBridge."""
    if isinstance(model, TopicModel):
        return model(inputs, key_mask=key_mask)
    attention_mask = (key_mask & (inputs != pad_id)).long()
    return model(inputs, attention_mask=attention_mask)


_BRIDGE_WEIGHT = re.compile(r"(?:^|\.)attn\.(?:_original_component\.)?([qkv])\.(?:_original_component\.)?weight$")


def attention_weights(model: nn.Module) -> dict[str, Tensor]:
    """``{"W_Q", "W_K", "W_V"}`` of the first layer: a TopicModel's matrices or a bridge's q/k/v weights."""
    if isinstance(model, TopicModel):
        return {"W_Q": model.W_Q, "W_K": model.W_K, "W_V": model.W_V}
    found: dict[str, Tensor] = {}
    for name, parameter in model.named_parameters():
        match = _BRIDGE_WEIGHT.search(name)
        if match and f"W_{match.group(1).upper()}" not in found:
            found[f"W_{match.group(1).upper()}"] = parameter
    if set(found) != {"W_Q", "W_K", "W_V"}:
        raise ToyConfigError(
            f"Could not find the attention's q/k/v weights in {type(model).__name__}; found {sorted(found)}."
        )
    return found


def record_attention_norms(every: int = 1) -> Callback:
    """Callback logging the Frobenius norms ``w_v_norm``, ``w_k_norm``, ``w_q_norm`` every ``every`` steps."""
    if every < 1:
        raise ToyConfigError(f"every must be >= 1; got {every}.")

    def callback(step: int, model: nn.Module, history: History) -> None:
        if step % every == 0 or step == 1:
            with torch.no_grad():
                norms = {f"w_{k[-1].lower()}_norm": float(w.norm()) for k, w in attention_weights(model).items()}
            history.log(step, **norms)

    return callback


def record_weight_displacement(model: nn.Module, every: int = 1) -> Callback:
    """Callback logging how far the attention's weights have moved from ``model``'s weights now (call it before
    training: step 0), relative to their size then, every ``every`` steps:
    ``w_v_displacement = ||W_V(t) - W_V(0)|| / ||W_V(0)||`` and ``w_kq_displacement``, the same for W_K and W_Q
    taken together (``||[W_K(t) - W_K(0), W_Q(t) - W_Q(0)]|| / ||[W_K(0), W_Q(0)]||``; Frobenius norms).

    Example: ``train_topic_model(model, data, config, callbacks=[record_weight_displacement(model, 10)])``.
    """
    if every < 1:
        raise ToyConfigError(f"every must be >= 1; got {every}.")
    with torch.no_grad():
        start = {name: weight.detach().clone() for name, weight in attention_weights(model).items()}
    sizes = {"w_v": float(start["W_V"].norm()), "w_kq": math.hypot(float(start["W_K"].norm()),
                                                                   float(start["W_Q"].norm()))}
    for name, size in sizes.items():
        if not size > 0:
            raise ToyConfigError(f"The model's {name} weights are all zero, so their displacement relative to "
                                 f"initialisation is undefined; initialise them with init_std > 0.")

    def callback(step: int, trained: nn.Module, history: History) -> None:
        if step % every == 0 or step == 1:
            with torch.no_grad():
                now = attention_weights(trained)
                moved = {name: float((now[name] - start[name]).norm()) for name in start}
            history.log(step, w_v_displacement=moved["W_V"] / sizes["w_v"],
                        w_kq_displacement=math.hypot(moved["W_K"], moved["W_Q"]) / sizes["w_kq"])

    return callback


def record_value(name: str, measure: Callable[[nn.Module], float], every: int) -> Callback:
    """Callback logging ``measure(model)`` (e.g. a probe's number) as ``name`` every ``every`` steps."""
    if every < 1:
        raise ToyConfigError(f"every must be >= 1; got {every}.")

    def callback(step: int, model: nn.Module, history: History) -> None:
        if step % every == 0 or step == 1:
            was_training = model.training
            model.eval()
            with torch.no_grad():
                history.log(step, **{name: float(measure(model))})
            model.train(was_training)

    return callback


def training_fingerprint(model: nn.Module, data: MaskedLMData, config: TopicTrainingConfig) -> str:
    """What a checkpoint of :func:`train_topic_model` must match to resume: the data, the settings, the model class."""
    return json.dumps([dataclasses.asdict(data.lda), dataclasses.asdict(data.masking), dataclasses.asdict(data.config),
                       data.seed, dataclasses.asdict(config), type(model).__name__], sort_keys=True, default=str)


def train_topic_model(
    model: nn.Module,
    data: MaskedLMData,
    config: TopicTrainingConfig,
    *,
    callbacks: Sequence[Callback] = (),
    checkpointer: Checkpointer | None = None,
    progress: bool = False,
) -> History:
    """Train ``model`` (a TopicModel or a bidirectional TransformerBridge) as a masked LM on ``data``.

    ``config.seed`` drives the minibatch sampling (and dynamic masks), done on the CPU; each batch then
    moves to the model's device. The logged ``loss`` is the optimised objective (with the
    ``value_l2`` penalty when it is on). With a ``checkpointer`` (fingerprint:
    :func:`training_fingerprint`) the run resumes from its last checkpoint and ends identical to an
    uninterrupted one.
    """
    if not isinstance(data, MaskedLMData):
        raise ToyConfigError(f"data must be a MaskedLMData (LDA documents with their masking); got "
                             f"{type(data).__name__}. Build it as MaskedLMData(lda, masking, data_config, seed=...).")
    lda = data.lda
    model_cfg = getattr(model, "cfg", None)
    if model_cfg is None:
        raise ToyConfigError(f"model must carry a cfg with d_vocab (a TopicModel or a HookedTransformer); got "
                             f"{type(model).__name__}.")
    n_model_vocab = int(model_cfg.d_vocab)
    if lda.vocab_size > n_model_vocab:
        raise ToyConfigError(
            f"The documents use {lda.vocab_size} token ids (words + [MASK] + [PAD]) but the model's "
            f"vocabulary has d_vocab = {n_model_vocab}; build the model with d_vocab >= {lda.vocab_size}."
        )
    optimizer = make_optimizer(list(model.parameters()), lr=config.lr, kind=config.optimizer,
                               momentum=config.momentum, weight_decay=config.l2)
    device = model_device(model)

    def loss_fn(step: int, generator: torch.Generator) -> Tensor:
        masked, key_mask = data.batch(config.batch_size, generator)
        loss = batch_loss(model, masked.to(device), key_mask.to(device), lda.pad_id, config.loss)
        if config.value_l2:
            loss = loss + value_l2_penalty(model, config.value_l2)
        return loss

    return train(model, loss_fn, [optimizer], n_steps=config.n_steps,
                 generator=torch.Generator().manual_seed(config.seed), callbacks=callbacks,
                 checkpointer=checkpointer, progress=progress, desc="topic model")
