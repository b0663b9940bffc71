"""The paper-faithful one-layer masked-LM model of Li, Li & Risteski (2023) as a hooked model.

One layer, one head, no residual connection, no LayerNorm, no MLP. With the embedded document
``Z = E[tokens]`` (rows = positions)::

    scores = (Z W_Q^T + b_Q) (Z W_K^T + b_K)^T * s   # [q_pos k_pos]
    A      = softmax over the keys that are visible (not [PAD], not excluded)
    out    = A (Z W_V^T + b_V)               # = (W_V Z A^T) in the paper's column notation
    logits = out W_dec^T + b_dec             # over the topic words only

The paper's model has no attention biases and no score scaling (``qkv_bias=False``, ``s = 1``,
the defaults); its reference code is a Hugging Face BERT layer, which has both: ``qkv_bias=True``
adds the trained biases ``b_Q, b_K, b_V`` (initialised to zero) and ``scale_scores=True`` sets
``s = 1/sqrt(d_head)``. With both off the parameters, the random draws and every output are those
of the model without the options.

Hook points (TransformerLens names): ``hook_embed`` [batch pos d_model],
``blocks.0.attn.hook_q/hook_k/hook_v/hook_z`` [batch pos head d_head] (one head, d_head =
d_model), ``blocks.0.attn.hook_attn_scores`` and ``blocks.0.attn.hook_pattern``
[batch head q_pos k_pos], ``blocks.0.hook_attn_out`` [batch pos d_model], ``hook_logits``.

``query_logits(tokens, queries, key_mask)`` computes the logits at given positions only (the
masked-LM training path; it bypasses the hook points).

Options (the paper's variants): embeddings one-hot and frozen (``d_model = d_vocab``) or
trained; attention trained or frozen uniform (W_K = W_Q = 0); W_V trained or frozen to the
identity or to the topic block matrix; decoder trained or frozen to the identity on the words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, cast

import torch
from jaxtyping import Bool, Float, Int
from torch import Tensor, nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

from mechprobe import type_hints
from mechprobe.validation import integers
from toymodels.errors import ToyConfigError

Embedding = Literal["one_hot_frozen", "trained"]
Attention = Literal["trained", "uniform_frozen"]
Value = Literal["trained", "identity_frozen", "block_frozen"]
Decoder = Literal["trained", "identity_frozen"]


@dataclass(frozen=True)
class TopicModelConfig:
    """Shape and variant of a :class:`TopicModel`; also serves as its TransformerLens ``cfg``.

    ``n_words`` words (the decoder's outputs) come first in the vocabulary of ``d_vocab`` ids;
    ``pad_id`` keys are never attended. ``d_model`` is ignored (= ``d_vocab``) for one-hot
    embeddings. ``words_per_topic`` defines the blocks of ``value="block_frozen"``.
    """

    d_vocab: int = 102
    n_words: int = 100
    pad_id: int | None = 101
    d_model: int = 64
    n_ctx: int = 150
    words_per_topic: int = 10
    embedding: Embedding = "trained"
    attention: Attention = "trained"
    value: Value = "trained"
    decoder: Decoder = "trained"
    init_std: float = 0.01
    qkv_bias: bool = False
    scale_scores: bool = False
    seed: int = 0
    model_name: str = "li-topic-1L"
    attention_dir: str = "bidirectional"

    def __post_init__(self) -> None:
        integers(self, ("d_vocab", "n_words", "d_model", "n_ctx", "words_per_topic"), error=ToyConfigError)
        if self.n_words > self.d_vocab:
            raise ToyConfigError(f"n_words ({self.n_words}) must be <= d_vocab ({self.d_vocab}).")
        if self.pad_id is not None and not 0 <= self.pad_id < self.d_vocab:
            raise ToyConfigError(f"pad_id must be None or an id in [0, {self.d_vocab}); got {self.pad_id}.")
        choices = {"embedding": Embedding, "attention": Attention, "value": Value, "decoder": Decoder}
        for name, kind in choices.items():
            allowed = type_hints.shape(kind).args
            if getattr(self, name) not in allowed:
                raise ToyConfigError(f"{name} must be one of {allowed}; got {getattr(self, name)!r}.")
        one_hot = self.embedding == "one_hot_frozen"
        if self.value == "block_frozen" and not one_hot:
            raise ToyConfigError("value='block_frozen' needs embedding='one_hot_frozen' (blocks are over word ids).")
        if self.decoder == "identity_frozen" and not one_hot:
            raise ToyConfigError("decoder='identity_frozen' needs embedding='one_hot_frozen'.")
        if self.value == "block_frozen" and self.n_words % self.words_per_topic:
            raise ToyConfigError(
                f"n_words ({self.n_words}) must be a multiple of words_per_topic ({self.words_per_topic})."
            )
        for name in ("qkv_bias", "scale_scores"):
            if not isinstance(getattr(self, name), bool):
                raise ToyConfigError(f"{name} must be true or false; got {getattr(self, name)!r}.")
        if not self.init_std >= 0:
            raise ToyConfigError(f"init_std must be >= 0; got {self.init_std}.")
        if self.attention_dir != "bidirectional":
            raise ToyConfigError("The topic model is a masked LM: attention_dir must be 'bidirectional'.")

    @property
    def width(self) -> int:
        """The embedding width actually used (``d_vocab`` for one-hot embeddings)."""
        return self.d_vocab if self.embedding == "one_hot_frozen" else self.d_model

    @property
    def score_scale(self) -> float:
        """The factor ``s`` on the attention scores: ``1/sqrt(d_head)`` with ``scale_scores``, else 1."""
        return self.d_head ** -0.5 if self.scale_scores else 1.0

    @property
    def n_layers(self) -> int:
        return 1

    @property
    def n_heads(self) -> int:
        return 1

    @property
    def d_head(self) -> int:
        return self.width


class _Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hook_q = HookPoint()
        self.hook_k = HookPoint()
        self.hook_v = HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()
        self.hook_z = HookPoint()


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = _Attention()
        self.hook_attn_out = HookPoint()


class TopicModel(HookedRootModule):
    """One attention head without residual, LayerNorm or MLP, on (masked) LDA documents.

    ``forward(tokens, key_mask=None)`` returns logits [batch pos n_words]; ``key_mask[b, k]``
    (True = may be attended) additionally hides keys, e.g. the masked positions during training.

    The weights are initialised on the CPU (``cfg.seed``), then moved to ``device``.

    Example::

        model = TopicModel(TopicModelConfig(embedding="one_hot_frozen", attention="uniform_frozen"), device="cpu")
        logits, cache = model.run_with_cache(tokens)
    """

    def __init__(self, cfg: TopicModelConfig, *, device: str | torch.device = "cpu") -> None:
        super().__init__()
        self.cfg = cfg
        generator = torch.Generator().manual_seed(cfg.seed)
        d = cfg.width

        def init(*shape: int) -> nn.Parameter:
            return nn.Parameter(torch.randn(*shape, generator=generator) * cfg.init_std)

        if cfg.embedding == "one_hot_frozen":
            self.W_E = nn.Parameter(torch.eye(cfg.d_vocab), requires_grad=False)
        else:
            self.W_E = init(cfg.d_vocab, d)
        self.W_Q, self.W_K = init(d, d), init(d, d)
        if cfg.attention == "uniform_frozen":
            for weight in (self.W_Q, self.W_K):
                with torch.no_grad():
                    weight.zero_()
                weight.requires_grad_(False)
        if cfg.value == "trained":
            self.W_V = init(d, d)
        else:
            self.W_V = nn.Parameter(self._fixed_value(), requires_grad=False)
        if cfg.decoder == "identity_frozen":
            self.W_dec = nn.Parameter(torch.eye(cfg.n_words, d), requires_grad=False)
            self.b_dec = nn.Parameter(torch.zeros(cfg.n_words), requires_grad=False)
        else:
            self.W_dec = init(cfg.n_words, d)
            self.b_dec = nn.Parameter(torch.zeros(cfg.n_words))
        if cfg.qkv_bias:   # zeros: no random draws, so the weights equal those of the model without biases
            self.b_Q = nn.Parameter(torch.zeros(d), requires_grad=cfg.attention == "trained")
            self.b_K = nn.Parameter(torch.zeros(d), requires_grad=cfg.attention == "trained")
            self.b_V = nn.Parameter(torch.zeros(d), requires_grad=cfg.value == "trained")
        self.hook_embed = HookPoint()
        self.blocks = nn.ModuleList([_Block()])
        self.hook_logits = HookPoint()
        self.setup()
        self.to(device)

    def _fixed_value(self) -> Tensor:
        cfg = self.cfg
        if cfg.value == "identity_frozen":
            return torch.eye(cfg.width)
        topic = torch.full((cfg.width,), -1, dtype=torch.long)
        topic[: cfg.n_words] = torch.arange(cfg.n_words) // cfg.words_per_topic
        same = (topic[:, None] == topic[None, :]) & (topic[:, None] >= 0)
        return same.float() / cfg.words_per_topic

    def key_visibility(self, tokens: Int[Tensor, "batch pos"],
                       key_mask: Bool[Tensor, "batch pos"] | None = None) -> Bool[Tensor, "batch pos"]:
        """Keys that may be attended: not ``[PAD]`` and allowed by ``key_mask``."""
        visible = torch.ones_like(tokens, dtype=torch.bool)
        if self.cfg.pad_id is not None:
            visible = tokens != self.cfg.pad_id
        if key_mask is not None:
            visible = visible & key_mask.to(torch.bool)
        return visible

    def has_active_hooks(self) -> bool:
        """Whether any hook point has a forward or backward hook attached."""
        return any(point.has_hooks() for point in self.hook_dict.values())

    def forward(self, tokens: Int[Tensor, "batch pos"],
                key_mask: Bool[Tensor, "batch pos"] | None = None) -> Float[Tensor, "batch pos n_words"]:
        block = cast(_Block, self.blocks[0])  # nn.ModuleList does not keep its items' class
        attn = block.attn
        z_in = self.hook_embed(torch.nn.functional.embedding(tokens, self.W_E))
        q = attn.hook_q(self._project(z_in, "Q").unsqueeze(2))
        k = attn.hook_k(self._project(z_in, "K").unsqueeze(2))
        v = attn.hook_v(self._project(z_in, "V").unsqueeze(2))
        raw = q[:, :, 0] @ k[:, :, 0].transpose(1, 2)
        if self.cfg.scale_scores:
            raw = raw * self.cfg.score_scale
        scores = attn.hook_attn_scores(raw.unsqueeze(1))
        visible = self._visible_keys(tokens, key_mask)
        scores = scores.masked_fill(~visible[:, None, None, :], float("-inf"))
        pattern = attn.hook_pattern(torch.softmax(scores, dim=-1))
        z = attn.hook_z((pattern[:, 0] @ v[:, :, 0]).unsqueeze(2))
        out = block.hook_attn_out(z[:, :, 0, :])
        return self.hook_logits(out @ self.W_dec.T + self.b_dec)

    def query_logits(self, tokens: Int[Tensor, "batch pos"], queries: Int[Tensor, "batch query"],
                     key_mask: Bool[Tensor, "batch pos"] | None = None) -> Float[Tensor, "batch query n_words"]:
        """``forward(tokens, key_mask)[b, queries[b]]`` computed for those query positions only, without hooks.

        One layer without residual: the logits at a position depend only on its own attention row,
        so a masked-LM loss, which reads a few positions, needs only those rows. With
        ``Z = E[tokens]`` and ``z = E[tokens[queries]]`` this computes
        ``softmax((z W_Q^T W_K) Z^T) Z (W_dec W_V)^T + b_dec`` -- the forward formula with the
        matrix products regrouped (equal up to float rounding; with biases and scaling the same
        regrouping, using that each attention row sums to 1). Hook points are bypassed.
        """
        cfg = self.cfg
        context = torch.nn.functional.embedding(tokens, self.W_E)
        query = torch.nn.functional.embedding(tokens.gather(1, queries), self.W_E)
        key_bias = torch.zeros(tokens.shape, dtype=context.dtype, device=context.device).masked_fill(
            ~self._visible_keys(tokens, key_mask), float("-inf"))    # 0 = visible, -inf = hidden
        if cfg.qkv_bias:
            query_key = self._project(query, "Q") * cfg.score_scale            # [batch query d_head]
            keys = self._project(context, "K")                                  # [batch pos d_head]
        else:
            weight = self.W_Q.T @ self.W_K
            query_key, keys = query @ (weight * cfg.score_scale if cfg.scale_scores else weight), context
        scores = torch.baddbmm(key_bias[:, None, :].expand(-1, queries.shape[1], -1), query_key,
                               keys.transpose(1, 2))
        pattern = torch.softmax(scores, dim=-1)
        logits = (pattern @ context) @ (self.W_dec @ self.W_V).T + self.b_dec
        if cfg.qkv_bias:
            logits = logits + self.W_dec @ self.b_V
        return logits

    def _project(self, x: Float[Tensor, "... d_model"], which: Literal["Q", "K", "V"]) -> Float[Tensor, "... d_head"]:
        """``x W^T + b`` for the query, key or value matrix (the bias only with ``qkv_bias``)."""
        out = x @ getattr(self, f"W_{which}").T
        return out + getattr(self, f"b_{which}") if self.cfg.qkv_bias else out

    def _visible_keys(self, tokens: Int[Tensor, "batch pos"],
                      key_mask: Bool[Tensor, "batch pos"] | None) -> Bool[Tensor, "batch pos"]:
        """:meth:`key_visibility`, except that a row whose keys are all hidden shows all keys (uniform, never NaN)."""
        visible = self.key_visibility(tokens, key_mask)
        return visible | ~visible.any(-1, keepdim=True)
