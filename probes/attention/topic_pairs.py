"""Topic labels and the token pairs they make, checked and listed for the topic attention probes: each vocabulary
id's topic (-1 for none), which ``(b, q, k)`` pairs are same-topic, different-topic or same-token, and which a query
may see."""

from __future__ import annotations

from typing import Any

import torch
from jaxtyping import Bool, Int
from torch import Tensor

from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.core.pattern_sums import check_pattern_block


def check_token_topics(token_topics: Any, has_topic: Any = None) -> Int[Tensor, " d_vocab"]:
    """Validated copy of the labels with ids outside ``has_topic`` set to -1."""
    if not isinstance(token_topics, Tensor) or token_topics.ndim != 1 or token_topics.dtype.is_floating_point \
            or token_topics.dtype == torch.bool:
        raise ConfigError(
            f"token_topics must be a 1-d integer tensor [d_vocab] (topic id per token, -1 = none); got "
            f"{type(token_topics).__name__}{tuple(token_topics.shape) if isinstance(token_topics, Tensor) else ''}."
        )
    labels = token_topics.detach().to("cpu", torch.long).clone()
    if has_topic is not None:
        if not isinstance(has_topic, Tensor) or has_topic.shape != labels.shape:
            raise ConfigError(
                f"has_topic must be a bool tensor of the same shape as token_topics {tuple(labels.shape)}; got "
                f"{tuple(has_topic.shape) if isinstance(has_topic, Tensor) else type(has_topic).__name__}."
            )
        labels[~has_topic.detach().cpu().bool()] = -1
    if bool((labels < -1).any()):
        raise ConfigError(f"Topic ids must be >= 0, or -1 for no topic; got {int(labels.min())}.")
    if not bool((labels >= 0).any()):
        raise ConfigError("token_topics gives no token a topic (all -1); nothing can be measured.")
    return labels


def topic_pair_masks(
    tokens: Int[Tensor, "batch pos"], topics: Int[Tensor, "batch pos"], visible: Bool[Tensor, "batch q_pos k_pos"]
) -> dict[str, Bool[Tensor, "batch q_pos k_pos"]]:
    """The three disjoint pair categories (``topics`` is -1 at unlabelled positions)."""
    labelled = topics >= 0
    n_pos = tokens.shape[1]
    off_diagonal = ~torch.eye(n_pos, dtype=torch.bool, device=tokens.device)
    pairs = labelled[:, :, None] & labelled[:, None, :] & off_diagonal & visible
    same_token = tokens[:, :, None] == tokens[:, None, :]
    same_topic = topics[:, :, None] == topics[:, None, :]
    return {
        "same_topic": pairs & same_topic & ~same_token,
        "different_topic": pairs & ~same_topic,
        "same_token": pairs & same_token,
    }


def check_pattern_batch(info: ModelInfo, token_topics: Tensor, first: Tensor, batch: TokenBatch) -> bool:
    """Check that ``token_topics`` labels every vocabulary id and the pattern ``first`` (the first layer
    folded) is [batch head q k]; return whether the model is causal (from ``info``, else read off
    ``first``)."""
    if info.d_vocab > token_topics.shape[0]:
        raise InputError(
            f"token_topics labels {token_topics.shape[0]} ids but the model's vocabulary has "
            f"{info.d_vocab}; give a label (-1 = none) for every id."
        )
    n_batch, n_pos = batch.tokens.shape
    check_pattern_block(first, n_batch, info.n_heads, n_pos)
    return info.is_causal(first)


def visible_pairs(batch: TokenBatch, causal: bool) -> Bool[Tensor, "batch q_pos k_pos"]:
    """``visible[b, q, k]``: query ``q`` can attend to key ``k`` (causality and attention_mask)."""
    n_batch, n_pos = batch.tokens.shape
    device = batch.tokens.device
    visible = torch.ones(n_batch, n_pos, n_pos, dtype=torch.bool, device=device)
    if causal:
        visible = visible & torch.ones(n_pos, n_pos, dtype=torch.bool, device=device).tril()
    if batch.attention_mask is not None:
        visible = visible & batch.attention_mask.bool()[:, None, :]
    return visible
