"""TransformerLens 3.9's ``HookedTransformer`` beside the 4.x bridges: planted heads found, padded batches, the
random-weight control from the model's own initialisation, and one clear line for what is not a hooked model.

The planted model (as ``examples/probe_your_own_model.py`` does for a hand-made module, but through real attention
weights): one-hot token and position embeddings, layer 0 head 0 attends to the previous token (its query is the
position, its key the position + 1) and writes the token it read into a third block of the residual, layer 1 head 0
is an induction head (its query is the token, its key the previous token layer 0 wrote). The other heads keep random
queries and keys and write nothing. The same weights go into a ``HookedTransformer`` (TransformerLens 3.9; skipped on
4.x, which removed it) and into a native bridge (both versions).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import probes
from probes import InputError, ModelError
from probes.core.batch import TokenBatch
from probes.core.model_kind import ModelKind, accepted_models, has_hooked_transformer, model_kind
from probes.core.result import results_close
from tests.hooked_models import OracleModel
from tests.probes.tl_support import needs_hooked_transformer
from tests.random_checkpoints import smollm2_tokenizer
from toymodels.standard import StandardModelConfig, build_standard_model

pytestmark = pytest.mark.usefixtures("one_thread")

V, N, HEADS, D_HEAD = 16, 24, 3, 24  # vocabulary, context, heads per layer, head width
D_MODEL = HEADS * D_HEAD  # 72 >= 2V + N: token, position and previous-token blocks of the residual
TOKEN, POSITION, PREVIOUS = 0, V, V + N  # where each block starts
SHARP = 10.0  # query and key entries: a logit of 100 / sqrt(24) ~ 20 between a matched and an unmatched key

def silent_head() -> dict[str, torch.Tensor]:
    """TransformerLens-layout matrices of a head that attends uniformly and writes nothing: W_Q/W_K/W_V
    [d_model d_head], W_O [d_head d_model]."""
    reads = {name: torch.zeros(D_MODEL, D_HEAD) for name in ("W_Q", "W_K", "W_V")}
    return reads | {"W_O": torch.zeros(D_HEAD, D_MODEL)}


def planted_heads() -> dict[tuple[int, int], dict[str, torch.Tensor]]:
    """The matrices of the planted heads (layer 0 head 0: previous token; layer 1 head 0: induction)."""
    prev = silent_head()
    for p in range(N):
        prev["W_Q"][POSITION + p, p] = SHARP
    for k in range(N - 1):
        prev["W_K"][POSITION + k, k + 1] = SHARP
    for t in range(V):
        prev["W_V"][TOKEN + t, t] = 1.0
        prev["W_O"][t, PREVIOUS + t] = 1.0
    induction = silent_head()
    for t in range(V):
        induction["W_Q"][TOKEN + t, t] = SHARP
        induction["W_K"][PREVIOUS + t, t] = SHARP
    induction["W_K"][POSITION, :V] = -SHARP  # position 0 read itself in layer 0, not a previous token: no key
    return {(0, 0): prev, (1, 0): induction}


def embeddings() -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot token embedding [d_vocab d_model] and positional embedding [n_ctx d_model]."""
    w_e, w_pos = torch.zeros(V, D_MODEL), torch.zeros(N, D_MODEL)
    w_e[:, TOKEN:TOKEN + V] = torch.eye(V)
    w_pos[:, POSITION:POSITION + N] = torch.eye(N)
    return w_e, w_pos


def hooked_transformer_config(seed: int = 0):
    from transformer_lens import HookedTransformerConfig

    return HookedTransformerConfig(n_layers=2, d_model=D_MODEL, n_ctx=N, d_head=D_HEAD, n_heads=HEADS, d_vocab=V,
                                   attn_only=True, normalization_type=None, act_fn="relu", seed=seed)


def new_hooked_transformer(seed: int = 0) -> nn.Module:
    from transformer_lens import HookedTransformer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.9: "HookedTransformer ... will be removed in 4.0"
        return HookedTransformer(hooked_transformer_config(seed))


def planted_hooked_transformer() -> nn.Module:
    model = new_hooked_transformer()
    w_e, w_pos = embeddings()
    with torch.no_grad():
        model.embed.W_E.copy_(w_e)
        model.pos_embed.W_pos.copy_(w_pos)
        for layer in range(2):
            model.blocks[layer].attn.W_O.zero_()  # heads other than the planted ones write nothing
        for (layer, head), weights in planted_heads().items():
            for name, value in weights.items():
                getattr(model.blocks[layer].attn, name)[head].copy_(value)
    return model.eval()


def planted_native_bridge() -> nn.Module:
    model = build_standard_model(StandardModelConfig(n_layers=2, d_model=D_MODEL, n_heads=HEADS, d_vocab=V, n_ctx=N,
                                                     normalization="none", seed=0))
    # the wrapped native model's parameters without the bridge's "_original_component." hops: layers.0.attn.q.weight
    params = {name.replace("_original_component.", ""): p for name, p in model.original_model.named_parameters()}
    w_e, w_pos = embeddings()
    with torch.no_grad():
        params["tok_embed.weight"].copy_(w_e)
        params["pos.weight"].copy_(w_pos)
        for name, parameter in params.items():
            if name.endswith(".bias") or name.endswith("attn.o.weight"):
                parameter.zero_()
        for (layer, head), weights in planted_heads().items():
            block = slice(head * D_HEAD, (head + 1) * D_HEAD)  # nn.Linear rows (q, k, v) / columns (o) of the head
            for name, value in weights.items():
                if name == "W_O":
                    params[f"layers.{layer}.attn.o.weight"][:, block] = value.T
                else:
                    params[f"layers.{layer}.attn.{name[-1].lower()}.weight"][block] = value.T
    return model.eval()


PLANTED = {"hooked_transformer": pytest.param(planted_hooked_transformer, marks=needs_hooked_transformer),
           "native_bridge": pytest.param(planted_native_bridge)}


def repeated_tokens(n_rows: int = 8, seq_len: int = 10, seed: int = 0) -> torch.Tensor:
    """``X X`` rows of ``seq_len`` random tokens (the head-score protocol without BOS: the model has no tokenizer)."""
    half = torch.randint(0, V, (n_rows, seq_len), generator=torch.Generator().manual_seed(seed))
    return torch.cat([half, half], dim=1)


# --- what kind of model ------------------------------------------------------------------------------------------


@needs_hooked_transformer
def test_a_hooked_transformer_is_told_apart_from_bridges_and_hand_made_modules():
    assert model_kind(new_hooked_transformer()) is ModelKind.HOOKED_TRANSFORMER
    assert model_kind(planted_native_bridge()) is ModelKind.NATIVE_BRIDGE
    assert model_kind(OracleModel()) is ModelKind.HOOKED_MODULE
    assert ModelKind.HOOKED_TRANSFORMER.mask_keyword == "attention_mask"
    assert ModelKind.HOOKED_ENCODER.mask_keyword == "one_zero_attention_mask"
    assert ModelKind.HOOKED_MODULE.mask_keyword is None


def test_a_bert_bridge_is_bidirectional_on_every_transformer_lens(minilm):
    # TransformerLens 3.9's BERT bridge says attention_dir="causal"; the Hugging Face attention says is_causal=False
    assert model_kind(minilm) is ModelKind.HF_BRIDGE
    assert probes.ModelInfo.of(minilm).causal is False


# --- the planted heads -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("build", PLANTED.values(), ids=PLANTED.keys())
def test_the_probes_rank_exactly_the_planted_heads_first(build):
    model = build()
    protocol = probes.head_scores(model, seq_len=10, n_batches=2, batch_size=8, seed=0)
    streamed = probes.run_probes(model, [probes.HeadScoreProbe()], [repeated_tokens(seed=s) for s in range(2)],
                                 progress=False)[0]
    for scores in (protocol, streamed):
        for kind, planted in (("previous_token", (0, 0)), ("induction", (1, 0))):
            (first, second) = scores.top_heads(kind, 2)
            assert first[:2] == planted, (kind, scores.top_heads(kind, 3))
            # hard attention (logit gap ~20) puts all of a row's weight on its targets; no random head comes close
            assert first[2] > 0.999 and second[2] < 0.6, (kind, first, second)


@needs_hooked_transformer
def test_left_padded_batches_with_an_attention_mask_score_like_the_unpadded_rows():
    model = planted_hooked_transformer()
    full, short = repeated_tokens(1, 10, seed=1)[0], repeated_tokens(1, 7, seed=2)[0]
    tokens = torch.stack([full, torch.cat([torch.zeros(6, dtype=torch.long), short])])
    mask = torch.ones(2, 20, dtype=torch.long)
    mask[1, :6] = 0
    padded = probes.run_probes(model, [probes.HeadScoreProbe()], [TokenBatch(tokens, mask.bool(), mask)],
                               progress=False)[0]
    apart = probes.run_probes(model, [probes.HeadScoreProbe()], [full[None], short[None]], progress=False)[0]
    # positions restart at the first unmasked token and masked keys get no weight, so the rows are the same rows
    assert results_close(padded, apart, atol=1e-6, rtol=1e-6)
    assert padded.top_heads("previous_token", 1)[0][:2] == (0, 0)


@needs_hooked_transformer
def test_padded_text_batches_of_a_corpus_score_like_their_rows_one_by_one():
    from transformer_lens import HookedTransformer, HookedTransformerConfig

    tokenizer = smollm2_tokenizer()
    cfg = HookedTransformerConfig(n_layers=2, d_model=32, n_ctx=64, d_head=8, n_heads=4, d_vocab=len(tokenizer),
                                  attn_only=True, act_fn="relu", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        model = HookedTransformer(cfg, tokenizer=tokenizer).eval()
    info = probes.ModelInfo.of(model)
    documents = ["the cat sat on the mat " * 6, "a short one with enough tokens in it to keep going on",
                 "tiny words here and there for the probe"]
    batches = list(probes.text_token_batches(documents, model.tokenizer, info, seq_len=16, batch_size=3,
                                             min_tokens=4))
    assert any(bool((batch.attention_mask == 0).any()) for batch in batches)  # padded rows, with their mask
    rows = []
    for batch in batches:
        for i, length in enumerate(batch.attention_mask.sum(1).tolist()):
            rows.append(TokenBatch(batch.tokens[i:i + 1, :length], batch.valid[i:i + 1, :length]))
    padded = probes.run_probes(model, [probes.HeadScoreProbe()], batches, progress=False)[0]
    one_by_one = probes.run_probes(model, [probes.HeadScoreProbe()], rows, progress=False)[0]
    assert results_close(padded, one_by_one, atol=1e-6, rtol=1e-6)


@needs_hooked_transformer
def test_a_hooked_encoder_gets_the_mask_as_one_zero_attention_mask():
    encoder = new_hooked_encoder()
    tokens = torch.randint(0, 20, (2, 12), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8:] = 0
    padded = probes.run_probes(encoder, [probes.HeadScoreProbe()], [TokenBatch(tokens, mask.bool(), mask)],
                               progress=False)[0]
    apart = probes.run_probes(encoder, [probes.HeadScoreProbe()], [tokens[:1], tokens[1:, :8]], progress=False)[0]
    assert probes.ModelInfo.of(encoder).causal is False
    assert results_close(padded, apart, atol=1e-6, rtol=1e-6)  # bidirectional: unmasked padding would change rows


def new_hooked_encoder(seed: int = 0) -> nn.Module:
    """A one-layer HookedEncoder whose weight matrices (left empty by its constructor) are drawn with ``seed``."""
    from transformer_lens import HookedEncoder, HookedTransformerConfig

    cfg = HookedTransformerConfig(n_layers=1, d_model=16, n_ctx=16, d_head=8, n_heads=2, d_vocab=20, d_mlp=32,
                                  act_fn="gelu", attention_dir="bidirectional", initializer_range=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        encoder = HookedEncoder(cfg, move_to_device=False)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in encoder.named_parameters():
            if name.split(".")[-1].startswith("W"):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.5)
    return encoder.eval()


# --- the random-weight control -----------------------------------------------------------------------------------


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: t.detach().clone() for name, t in module.state_dict().items()}


@needs_hooked_transformer
def test_the_control_of_a_hooked_transformer_is_its_own_init_weights_under_the_seed():
    model = planted_hooked_transformer()
    before = state(model)
    control = probes.random_weight_control(model, seed=5)
    again = probes.random_weight_control(model, seed=5)
    fresh = new_hooked_transformer(seed=5)  # HookedTransformer(cfg) runs init_weights() under cfg.seed
    assert all(torch.equal(before[name], t) for name, t in model.state_dict().items())  # original untouched
    assert all(torch.equal(t, again.state_dict()[name]) for name, t in control.state_dict().items())
    assert all(torch.equal(t, fresh.state_dict()[name]) for name, t in control.state_dict().items())
    assert not torch.equal(control.embed.W_E, model.embed.W_E)
    assert control.cfg.seed == 5 and control.cfg.model_name == f"{model.cfg.model_name} (random weights, seed 5)"
    control.init_weights()  # the seed it carries reproduces its weights
    assert all(torch.equal(t, fresh.state_dict()[name]) for name, t in control.state_dict().items())
    # random weights hold no planted head: the previous-token head is gone (chance-level scores)
    scores = probes.head_scores(control, seq_len=10, n_batches=1, batch_size=8)
    assert scores.top_heads("previous_token", 1)[0][2] < 0.6


@needs_hooked_transformer
def test_the_control_of_a_hooked_encoder_draws_its_matrices_as_bert_does():
    encoder = new_hooked_encoder()
    control = probes.random_weight_control(encoder, seed=1)
    again = probes.random_weight_control(encoder, seed=1)
    assert all(torch.equal(t, again.state_dict()[name]) for name, t in control.state_dict().items())
    matrices = torch.cat([p.detach().flatten() for n, p in control.named_parameters()
                          if n.split(".")[-1].startswith("W")])  # W_E ... W_U and the MLM, NSP and pooler heads' W
    assert abs(float(matrices.std()) - 0.02) < 0.002 and abs(float(matrices.mean())) < 0.002  # normal(0, 0.02)
    assert all(float(p.detach().abs().max()) == 0 for n, p in control.named_parameters()
               if n.split(".")[-1].startswith("b"))  # biases and LayerNorm biases start at 0
    assert not torch.equal(control.blocks[0].attn.W_Q, encoder.blocks[0].attn.W_Q)


# --- what is not a hooked model ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [nn.Linear(2, 2), "gpt2"], ids=["linear", "string"])
@pytest.mark.parametrize("call", [
    lambda bad: probes.head_scores(bad),
    lambda bad: probes.run_probes(bad, [probes.HeadScoreProbe()], [torch.zeros(1, 4, dtype=torch.long)]),
    lambda bad: probes.random_weight_control(bad),
    probes.ModelInfo.of,
], ids=["head_scores", "run_probes", "random_weight_control", "ModelInfo"])
def test_a_bad_model_is_one_line_naming_what_is_accepted(bad, call):
    with pytest.raises(ModelError) as caught:
        call(bad)
    message = str(caught.value)
    assert "\n" not in message and accepted_models() in message and type(bad).__name__ in message
    assert ("HookedTransformer" in message) is has_hooked_transformer()  # named only where it exists
    if isinstance(bad, str):
        assert "probes.load_model" in message


def test_load_model_refuses_a_module_without_hooks_in_the_same_line():
    with pytest.raises(ModelError, match=f"Expected a hooked model: {accepted_models()}"):
        probes.load_model(nn.Linear(2, 2))


def test_a_mask_for_a_hand_made_module_names_the_models_that_take_one():
    mask = torch.ones(1, 4, dtype=torch.long)
    batch = TokenBatch(torch.zeros(1, 4, dtype=torch.long), mask.bool(), mask)
    with pytest.raises(InputError, match=r"takes no mask.*a TransformerBridge"):
        probes.run_probes(OracleModel(), [probes.HeadScoreProbe()], [batch], progress=False)
