"""Hypothesis strategies and helpers shared by the probe property tests (tests/probes/test_properties.py).

- :class:`Corpus`: token rows with a ``valid`` mask and (for padded corpora) an ``attention_mask``;
  ``corpus.rows(index)`` is the batch of those rows, trimmed of trailing all-padding columns the
  way a real batcher pads each batch only to its own longest row.
- :func:`corpora`, :func:`split_points`, :func:`topic_labels`: the drawn data.
- :class:`RandomAttentionModel`: a hooked model whose attention is a fixed random function of each
  row's tokens (``softmax(S[tok_q, tok_k] + P[q, k])``), so every row's activations are the same
  whatever batch it is in; it also has a selector hook [batch subset].
- :func:`fold` / :func:`fold_all`: feed batches to fresh probes the way ``probes.feed_probes`` does,
  checking after every ``update`` that the tokens, masks and captured activations are unchanged.
- :func:`result_differences`: the fields in which two probe results differ beyond a tolerance.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from hypothesis import strategies as st
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from probes import ModelInfo, Probe, ProbeResult, TokenBatch, as_token_batch, capture

SUBSET_HOOK = "blocks.0.mlp.hook_subset_weights"


@dataclass
class RandomAttentionConfig:
    n_layers: int = 2
    n_heads: int = 3
    n_ctx: int = 12
    d_vocab: int = 8
    n_subsets: int = 4
    model_name: str = "random-attention"


class RandomAttentionModel(HookedRootModule):
    """Attention ``softmax(S[l, h, tok_q, tok_k] + P[l, h, q, k])`` with fixed random ``S``, ``P``.

    ``attention_dir`` "causal" masks later keys; "bidirectional" does not; ``None`` leaves the
    attribute off the cfg (bidirectional attention the probes must detect themselves). The selector
    hook holds ``softmax(sum_pos W[tok])`` [batch subset].
    """

    def __init__(self, attention_dir: str | None, seed: int = 0, cfg: RandomAttentionConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or RandomAttentionConfig()
        if attention_dir is not None:
            self.cfg.attention_dir = attention_dir
        self.causal = attention_dir == "causal"
        g = torch.Generator().manual_seed(seed)
        c = self.cfg
        self.S = torch.randn(c.n_layers, c.n_heads, c.d_vocab, c.d_vocab, generator=g) * 2
        self.P = torch.randn(c.n_layers, c.n_heads, c.n_ctx, c.n_ctx, generator=g)
        self.W = torch.randn(c.d_vocab, c.n_subsets, generator=g)
        self.blocks = nn.ModuleList()
        for layer in range(c.n_layers):
            block = nn.Module()
            block.attn = nn.Module()
            block.attn.hook_pattern = HookPoint()
            if layer == 0:
                block.mlp = nn.Module()
                block.mlp.hook_subset_weights = HookPoint()
            self.blocks.append(block)
        self.setup()

    def forward(self, tokens: Tensor) -> Tensor:
        n = tokens.shape[1]
        for layer, block in enumerate(self.blocks):
            scores = self.S[layer][:, tokens[:, :, None], tokens[:, None, :]].permute(1, 0, 2, 3)
            scores = scores + self.P[layer, :, :n, :n]
            if self.causal:
                scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
            block.attn.hook_pattern(torch.softmax(scores, -1))
            if layer == 0:
                block.mlp.hook_subset_weights(torch.softmax(self.W[tokens].sum(1), -1))
        return tokens.float()


@dataclass(frozen=True)
class Corpus:
    """Rows of tokens [batch pos] with ``valid`` [batch pos] and an optional ``attention_mask``."""

    tokens: Tensor
    valid: Tensor
    attention_mask: Tensor | None

    @property
    def n_rows(self) -> int:
        return int(self.tokens.shape[0])

    def rows(self, index: Sequence[int] | Tensor) -> TokenBatch:
        """The batch of rows ``index`` (in that order), trimmed of columns that are padding in all of them."""
        index = torch.as_tensor(index, dtype=torch.long)
        tokens, valid = self.tokens[index], self.valid[index]
        mask = None if self.attention_mask is None else self.attention_mask[index]
        if mask is not None:
            width = max(1, int(mask.any(0).nonzero().max()) + 1) if bool(mask.any()) else 1
            tokens, valid, mask = tokens[:, :width], valid[:, :width], mask[:, :width]
        return TokenBatch(tokens.clone(), valid.clone(), None if mask is None else mask.clone())

    def batches(self, order: Sequence[int], cuts: Sequence[int]) -> list[TokenBatch]:
        """The rows in ``order`` cut into consecutive batches at the positions ``cuts``."""
        bounds = [0, *cuts, len(order)]
        return [self.rows(list(order[a:b])) for a, b in itertools.pairwise(bounds)]

    def whole(self) -> TokenBatch:
        """All rows as one batch, untrimmed."""
        mask = None if self.attention_mask is None else self.attention_mask.clone()
        return TokenBatch(self.tokens.clone(), self.valid.clone(), mask)


@st.composite
def corpora(draw, d_vocab: int, *, min_rows: int = 2, max_rows: int = 6, min_len: int = 1, max_len: int = 10,
            padded: bool = False, all_valid: bool = False) -> Corpus:
    """Random token rows from a drawn sub-alphabet (so repeats, induction targets etc. occur).

    ``padded``: each row has its own length (>= ``min_len``) and is right-padded with one drawn pad
    id, masked out by ``attention_mask``. Unless ``all_valid``, about one position in five is also
    marked invalid (a special token, to the probes).
    """
    n_rows = draw(st.integers(min_rows, max_rows))
    n_pos = draw(st.integers(min_len, max_len))
    alphabet = draw(st.lists(st.integers(0, d_vocab - 1), min_size=1, max_size=d_vocab, unique=True))
    ids = draw(st.lists(st.sampled_from(alphabet), min_size=n_rows * n_pos, max_size=n_rows * n_pos))
    tokens = torch.tensor(ids, dtype=torch.long).reshape(n_rows, n_pos)
    if all_valid:
        valid = torch.ones(n_rows, n_pos, dtype=torch.bool)
    else:
        flags = draw(st.lists(st.integers(0, 4), min_size=n_rows * n_pos, max_size=n_rows * n_pos))
        valid = torch.tensor(flags).reshape(n_rows, n_pos) > 0
    mask = None
    if padded:
        lengths = draw(st.lists(st.integers(min_len, n_pos), min_size=n_rows, max_size=n_rows))
        mask = (torch.arange(n_pos)[None, :] < torch.tensor(lengths)[:, None]).long()
        pad = draw(st.integers(0, d_vocab - 1))
        tokens = torch.where(mask.bool(), tokens, torch.full_like(tokens, pad))
        valid = valid & mask.bool()
    return Corpus(tokens, valid, mask)


def split_points(n_rows: int, max_cuts: int = 2) -> st.SearchStrategy[list[int]]:
    """1 to ``max_cuts`` distinct sorted cut positions in ``1 .. n_rows - 1`` (2 to ``max_cuts + 1`` batches)."""
    return st.lists(st.integers(1, n_rows - 1), min_size=1, max_size=max_cuts, unique=True).map(sorted)


@st.composite
def topic_labels(draw, d_vocab: int, max_topics: int = 3) -> tuple[Tensor, Tensor | None]:
    """``(token_topics [d_vocab] with -1 = no topic, has_topic [d_vocab] or None)``; some token has a topic."""
    n_topics = draw(st.integers(1, max_topics))
    labels = draw(st.lists(st.integers(-1, n_topics - 1), min_size=d_vocab, max_size=d_vocab)
                  .filter(lambda values: any(v >= 0 for v in values)))
    token_topics = torch.tensor(labels, dtype=torch.long)
    if draw(st.booleans()):
        return token_topics, None
    keep = draw(st.lists(st.booleans(), min_size=d_vocab, max_size=d_vocab)
                .filter(lambda k: any(k[i] and labels[i] >= 0 for i in range(d_vocab))))
    return token_topics, torch.tensor(keep)


def _snapshot(batch: TokenBatch, activations: dict[str, Tensor]) -> dict[str, Tensor]:
    tensors = {"tokens": batch.tokens, "valid": batch.valid, **{f"activation {k}": v for k, v in activations.items()}}
    if batch.attention_mask is not None:
        tensors["attention_mask"] = batch.attention_mask
    return {name: tensor.clone() for name, tensor in tensors.items()}


def assert_unchanged(before: dict[str, Tensor], after: dict[str, Tensor], what: str) -> None:
    """Every tensor of ``after`` is identical (dtype, shape, values, NaNs) to its clone in ``before``."""
    changed = [
        name for name, tensor in after.items()
        if tensor.dtype != before[name].dtype or tensor.shape != before[name].shape
        or not torch.equal(torch.nan_to_num(tensor), torch.nan_to_num(before[name]))
    ]
    assert not changed, f"{what} modified its inputs: {changed}"


def fold(make_probe: Callable[[], Probe], model: Any, batches: Sequence[TokenBatch], info: ModelInfo) -> Probe:
    """A fresh probe fed ``batches`` as ``probes.feed_probes`` would, checking that no input changes."""
    return fold_all([make_probe], model, batches, info)[0]


def fold_all(makers: Sequence[Callable[[], Probe]], model: Any, batches: Sequence[TokenBatch],
             info: ModelInfo) -> list[Probe]:
    """Fresh probes fed ``batches`` together (one forward pass per batch for the union of their hooks)."""
    fresh = [make_probe().bind(info) for make_probe in makers]
    names = sorted({name for probe in fresh for name in probe.hook_names(info)})
    with torch.inference_mode():
        for raw in batches:
            batch = as_token_batch(raw, info)
            captured = capture(model, batch, names) if names else {}
            for probe in fresh:
                activations = {name: captured[name] for name in probe.hook_names(info)}
                before = _snapshot(batch, activations)
                probe.update(activations, batch)
                assert_unchanged(before, _snapshot(batch, activations), f"{type(probe).__name__}.update")
    return fresh


def _value_difference(x: Any, y: Any, rtol: float, atol: float) -> str | None:
    if isinstance(x, Tensor) and isinstance(y, Tensor):
        if x.shape != y.shape:
            return f"shapes {tuple(x.shape)} vs {tuple(y.shape)}"
        a, b = x.double(), y.double()
        if torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            return None
        gap = torch.where(a.isnan() & b.isnan(), 0.0, (a - b).abs().nan_to_num(math.inf))
        return f"max |diff| {float(gap.max()):.3g} (rtol {rtol}, atol {atol})"
    if isinstance(x, dict) and isinstance(y, dict):
        if x.keys() != y.keys():
            return f"keys {sorted(x)} vs {sorted(y)}"
        gaps = {k: _value_difference(x[k], y[k], rtol, atol) for k in x}
        return "; ".join(f"[{k}] {g}" for k, g in gaps.items() if g) or None
    if isinstance(x, float) or isinstance(y, float):
        if (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=rtol, abs_tol=atol):
            return None
        return f"{x!r} vs {y!r}"
    return None if x == y else f"{x!r} vs {y!r}"


def result_differences(a: ProbeResult, b: ProbeResult, *, rtol: float, atol: float) -> list[str]:
    """The result fields (and the data counts of the provenance) that differ beyond ``rtol``/``atol``."""
    assert type(a) is type(b), f"{type(a).__name__} vs {type(b).__name__}"
    gaps = [
        f"{f.name}: {gap}"
        for f in dataclasses.fields(a) if f.name != "provenance"
        if (gap := _value_difference(getattr(a, f.name), getattr(b, f.name), rtol, atol))
    ]
    for name in ("n_sequences", "settings", "model"):
        if getattr(a.provenance, name) != getattr(b.provenance, name):
            gaps.append(f"provenance.{name}: {getattr(a.provenance, name)!r} vs {getattr(b.provenance, name)!r}")
    return gaps


def concrete_probes() -> set[type[Probe]]:
    """Every probe class mechprobe defines: the subclasses of Probe, found by walking the class tree."""
    found, todo = set(), [Probe]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return {c for c in found if c.__module__.startswith("probes.") and not inspect.isabstract(c)}
