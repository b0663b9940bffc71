"""The random-weight control model: same architecture and hooks, fresh weights, original untouched.

The pretrained tests show the control can make a finding fail: SmolLM2 has an induction head
(best score > 0.5 on repeated random tokens) and its control does not (< 0.2, chance ~0.03).
"""

from __future__ import annotations

import dataclasses
import hashlib

import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule
from transformer_lens.hook_points import HookPoint

import probes
from probes import ConfigError, MechprobeError, ModelError, ModelInfo, random_weight_control
from probes.stats.control_model import control_name
from tests.hooked_models import OracleModel
from tests.probes.tl_support import checkpoint_kinds, needs_bridge_adapter
from tests.random_checkpoints import RANDOM_CHECKPOINTS, make_random_checkpoint

# --- helpers ---------------------------------------------------------------------------------------


def hf_weights(model) -> dict[str, torch.Tensor]:
    """The parameters of the Hugging Face model a bridge wraps, by name."""
    return {name: p.detach() for name, p in model.original_model.named_parameters()}


def fingerprint(module: nn.Module) -> dict[str, str]:
    """An exact hash of every parameter and buffer (cheaper than keeping a copy of a 135M model)."""
    def digest(t: torch.Tensor) -> str:
        return hashlib.sha256(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()).hexdigest()

    return {name: digest(t) for name, t in [*module.named_parameters(), *module.named_buffers()]}


def same_except_name(control, original) -> bool:
    return dataclasses.replace(ModelInfo.of(control), name=ModelInfo.of(original).name) == ModelInfo.of(original)


def random_init_matrices(params: dict[str, torch.Tensor]) -> list[str]:
    """Names of the parameters an architecture draws at random (matrices; norms and biases start constant)."""
    return [name for name, p in params.items() if p.ndim == 2]


class TinyHooked(HookedRootModule):
    """One bidirectional attention layer from nn.Linear Q/K, an LN, and a frozen one-hot embedding."""

    @dataclasses.dataclass
    class Cfg:
        n_layers: int = 1
        n_heads: int = 1
        n_ctx: int = 16
        d_vocab: int = 8
        model_name: str = "tiny-hooked"
        attention_dir: str = "bidirectional"

    def __init__(self, bare: bool = False) -> None:
        super().__init__()
        self.cfg = self.Cfg()
        d = self.cfg.d_vocab
        self.W_E = nn.Parameter(torch.eye(d), requires_grad=False)  # frozen: architecture, not weights
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.ln = nn.LayerNorm(d)
        if bare:
            self.gain = nn.Parameter(torch.randn(d, d, generator=torch.Generator().manual_seed(5)) * 2 + 0.5)
            self.scale = nn.Parameter(torch.tensor(3.0))
        self.blocks = nn.ModuleList([nn.Module()])
        self.blocks[0].attn = nn.Module()
        self.blocks[0].attn.hook_pattern = HookPoint()
        with torch.no_grad():  # "trained" weights: far from nn.Linear's init
            for linear in (self.q, self.k):
                linear.weight.copy_(torch.linspace(-3, 3, d * d).reshape(d, d))
            self.ln.weight.fill_(2.0)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.ln(self.W_E[tokens])
        scores = self.q(x) @ self.k(x).transpose(-1, -2)
        return self.blocks[0].attn.hook_pattern(scores.softmax(-1)[:, None])


# --- hooked modules (fast) -------------------------------------------------------------------------


def test_hooked_module_control_reinitialises_every_resettable_module():
    model = TinyHooked()
    before = fingerprint(model)
    control = random_weight_control(model, seed=0)
    assert fingerprint(model) == before  # the original is untouched
    assert control is not model and control.q is not model.q
    assert not torch.equal(control.q.weight, model.q.weight)
    assert not torch.equal(control.k.weight, model.k.weight)
    bound = 1 / model.cfg.d_vocab**0.5  # nn.Linear's own init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert control.q.weight.abs().max() <= bound
    assert torch.equal(control.ln.weight, torch.ones(8))  # LayerNorm's reset_parameters
    assert torch.equal(control.W_E, torch.eye(8))  # frozen parameters are kept
    assert same_except_name(control, model)
    assert ModelInfo.of(control).name == control_name("tiny-hooked", 0) == "tiny-hooked (random weights, seed 0)"
    assert model.cfg.model_name == "tiny-hooked"
    assert set(control.hook_dict) == set(model.hook_dict)
    _, cache = control.run_with_cache(torch.tensor([[1, 2, 3]]))
    assert torch.allclose(cache["blocks.0.attn.hook_pattern"].sum(-1), torch.ones(1, 1, 3))


def test_hooked_module_control_is_deterministic_in_the_seed_and_keeps_the_global_rng():
    model = TinyHooked()
    torch.manual_seed(123)
    expected_next = torch.rand(1)
    torch.manual_seed(123)
    first = random_weight_control(model, seed=7)
    assert torch.equal(torch.rand(1), expected_next)  # the caller's RNG stream is not disturbed
    again = random_weight_control(model, seed=7)
    other = random_weight_control(model, seed=8)
    assert torch.equal(first.q.weight, again.q.weight) and torch.equal(first.k.bias, again.k.bias)
    assert not torch.equal(first.q.weight, other.q.weight)


def test_oracle_model_control_redraws_its_linear_layer():
    model = OracleModel()
    control = random_weight_control(model, seed=1)
    assert not torch.equal(control.unembed.weight, model.unembed.weight)
    assert same_except_name(control, model)
    assert set(control.hook_dict) == set(model.hook_dict)


def test_bare_parameters_are_an_error_that_says_how_to_fix_it():
    with pytest.raises(ModelError, match=r"gain, scale.*redraw_unresettable=True"):
        random_weight_control(TinyHooked(bare=True))


def test_redraw_unresettable_matches_each_bare_parameters_mean_and_std():
    model = TinyHooked(bare=True)
    control = random_weight_control(model, seed=0, redraw_unresettable=True)
    assert not torch.equal(control.gain, model.gain)
    # 20 seeds x 64 entries of normal(mean, std) of the model's own values (about 0.5 and 2): the pooled mean is within
    # 0.2 (3.5 standard errors; a redraw ignoring the mean is 0.5 off) and the pooled std within 10% (about 5 SE)
    pooled = torch.stack([random_weight_control(model, seed=seed, redraw_unresettable=True).gain
                          for seed in range(20)]).detach()
    assert abs(float(pooled.mean() - model.gain.mean())) < 0.2
    assert abs(float(pooled.std() / model.gain.std()) - 1) < 0.1
    assert control.scale.item() == 3.0  # a scalar has no spread to draw from: kept
    assert torch.equal(control.W_E, model.W_E)
    again = random_weight_control(model, seed=0, redraw_unresettable=True)
    assert torch.equal(again.gain, control.gain)


def test_a_model_with_nothing_trainable_is_an_error():
    model = TinyHooked()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    with pytest.raises(ModelError, match="no trainable parameters"):
        random_weight_control(model)


@pytest.mark.parametrize(
    ("model", "seed", "error"),
    [
        ("smollm2-135m", 0, ModelError),  # a spec, not a model: load it first
        (nn.Linear(2, 2), 0, ModelError),  # no hooks
        (None, 0, ModelError),
        ("tiny", "0", ConfigError),
        ("tiny", 1.0, ConfigError),
        ("tiny", True, ConfigError),
        ("tiny", -1, ConfigError),
        ("tiny", 2**63, ConfigError),
    ],
)
def test_bad_input_raises_a_typed_error(model, seed, error):
    model = TinyHooked() if model == "tiny" else model
    with pytest.raises(error) as raised:
        random_weight_control(model, seed=seed)
    assert isinstance(raised.value, MechprobeError)


def test_redraw_flag_must_be_a_bool():
    with pytest.raises(ConfigError, match="redraw_unresettable"):
        random_weight_control(TinyHooked(), redraw_unresettable="yes")


def test_native_bridge_control_keeps_frozen_zero_positions():
    from toymodels.standard import StandardModelConfig, build_standard_model

    model = build_standard_model(StandardModelConfig(n_layers=2, d_vocab=11, positional="none"))
    before = fingerprint(model)
    control = random_weight_control(model, seed=3)
    assert fingerprint(model) == before
    params, original = dict(control.named_parameters()), dict(model.named_parameters())
    frozen = [name for name, p in original.items() if not p.requires_grad]
    assert frozen and all(torch.equal(params[name], torch.zeros_like(params[name])) for name in frozen)
    drawn = [name for name in random_init_matrices(original) if name not in frozen]
    assert drawn and all(not torch.equal(params[name], original[name]) for name in drawn)
    again = dict(random_weight_control(model, seed=3).named_parameters())
    assert all(torch.equal(params[name], again[name]) for name in params)
    assert same_except_name(control, model) and set(control.hook_dict) == set(model.hook_dict)
    assert control.cfg.seed == 3 and model.cfg.seed == 0


# --- tiny random Hugging Face checkpoints ------------------------------------------------------------


@pytest.fixture(scope="module")
def checkpoint_folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("random-checkpoints")
    return {kind: make_random_checkpoint(kind, root / kind, seed=0) for kind in RANDOM_CHECKPOINTS}


@pytest.mark.parametrize("kind", checkpoint_kinds())
def test_random_checkpoint_loads_and_its_control_is_the_same_architecture(kind, checkpoint_folders):
    model = probes.load_model(checkpoint_folders[kind])
    spec = RANDOM_CHECKPOINTS[kind]
    assert type(model.original_model).__name__ == spec.architecture
    info = ModelInfo.of(model)
    assert info.causal is spec.causal
    assert info.d_vocab == model.original_model.config.vocab_size == len(model.tokenizer)
    assert (info.n_layers, info.n_heads, info.n_ctx) == (2, 4, 512)
    before = fingerprint(model.original_model)
    control = random_weight_control(model, seed=1)
    assert fingerprint(model.original_model) == before
    assert same_except_name(control, model) and set(control.hook_dict) == set(model.hook_dict)
    assert type(control.original_model) is type(model.original_model)
    assert control.tokenizer is model.tokenizer
    assert not control.training
    original, params = hf_weights(model), hf_weights(control)
    assert params.keys() == original.keys()
    assert all(not torch.equal(params[name], original[name]) for name in random_init_matrices(original))
    tokens = torch.tensor([[info.bos_token_id, 500, 501, 502, 500, 501]])
    logits = control(tokens)
    assert logits.shape == (1, 6, info.d_vocab) and torch.isfinite(logits).all()


def test_random_checkpoints_are_deterministic_in_the_seed(tmp_path):
    first = make_random_checkpoint("gemma2", tmp_path / "a", seed=4)
    again = make_random_checkpoint("gemma2", tmp_path / "b", seed=4)
    assert (first / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


@needs_bridge_adapter("RobertaForMaskedLM")
def test_encoder_checkpoint_uses_robertas_special_token_layout(checkpoint_folders):
    model = probes.load_model(checkpoint_folders["roberta"])
    tokenizer, config = model.tokenizer, model.original_model.config
    assert (tokenizer.cls_token_id, tokenizer.pad_token_id, tokenizer.sep_token_id) == (0, 1, 2)
    assert (config.bos_token_id, config.pad_token_id, config.eos_token_id) == (0, 1, 2)
    assert tokenizer.mask_token_id == len(tokenizer) - 1
    assert tokenizer.convert_ids_to_tokens(tokenizer.mask_token_id) == "<mask>"
    assert ModelInfo.of(model).special_token_ids == (0, 1, 2, tokenizer.mask_token_id)
    # RoBERTa numbers positions from pad_token_id + 1: the table has n_ctx + 2 rows.
    assert config.max_position_embeddings == ModelInfo.of(model).n_ctx + 2


def test_control_of_a_bfloat16_model_is_the_float32_control_rounded(checkpoint_folders):
    folder = checkpoint_folders["gpt_neox"]
    full = random_weight_control(probes.load_model(folder), seed=2)
    half_model = probes.load_model(folder, dtype=torch.bfloat16)
    half = random_weight_control(half_model, seed=2)
    full_params, half_params = hf_weights(full), hf_weights(half)
    assert all(p.dtype == torch.bfloat16 for p in half_params.values())
    assert all(torch.equal(half_params[name], full_params[name].to(torch.bfloat16)) for name in full_params)
    assert half.cfg.dtype == half_model.cfg.dtype == torch.bfloat16


# --- pretrained models (slow) ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_controls(smollm2):
    before = fingerprint(smollm2.original_model)
    controls = {"seed0": random_weight_control(smollm2, seed=0), "seed0 again": random_weight_control(smollm2, seed=0),
                "seed1": random_weight_control(smollm2, seed=1)}
    return before, controls


def check_control_of_pretrained(model, before, control, again, other):
    assert fingerprint(model.original_model) == before  # the original is untouched
    assert same_except_name(control, model)
    assert ModelInfo.of(control).name == control_name(ModelInfo.of(model).name, 0)
    assert set(control.hook_dict) == set(model.hook_dict)
    assert control.tokenizer is model.tokenizer
    original, params = hf_weights(model), hf_weights(control)
    assert params.keys() == original.keys()
    assert all(params[name].dtype == original[name].dtype and params[name].device == original[name].device
               for name in params)
    assert all(not torch.equal(params[name], original[name]) for name in random_init_matrices(original))
    same = hf_weights(again)
    assert all(torch.equal(params[name], same[name]) for name in params)
    different = hf_weights(other)
    assert all(not torch.equal(params[name], different[name]) for name in random_init_matrices(params))


@pytest.mark.slow
def test_smollm2_control_is_the_same_architecture_with_other_weights(smollm2, smollm2_controls):
    before, controls = smollm2_controls
    check_control_of_pretrained(smollm2, before, controls["seed0"], controls["seed0 again"], controls["seed1"])
    config, control_config = smollm2.original_model.config, controls["seed0"].original_model.config
    assert control_config.to_dict() == config.to_dict()  # GGUF-derived config passed through as is
    assert control_config.tie_word_embeddings and (
        controls["seed0"].original_model.lm_head.weight is controls["seed0"].original_model.model.embed_tokens.weight
    )


@pytest.mark.slow
def test_smollm2_induction_head_is_absent_from_its_control(smollm2, smollm2_controls):
    _, controls = smollm2_controls
    real = probes.head_scores(smollm2, seq_len=20, n_batches=1)
    control = probes.head_scores(controls["seed0"], seq_len=20, n_batches=1)
    assert real.top_heads("induction", 1)[0][2] > 0.5
    assert control.top_heads("induction", 1)[0][2] < 0.2
    assert control.chance == real.chance


@pytest.mark.slow
def test_minilm_control_is_the_same_architecture_with_other_weights(minilm):
    before = fingerprint(minilm.original_model)
    control = random_weight_control(minilm, seed=0)
    check_control_of_pretrained(minilm, before, control, random_weight_control(minilm, seed=0),
                                random_weight_control(minilm, seed=1))
    assert ModelInfo.of(control).causal is False and ModelInfo.of(control).bos_token_id == minilm.tokenizer.cls_token_id
    scores = probes.head_scores(control, seq_len=20, n_batches=1)
    assert scores.top_heads("previous_token", 1)[0][2] < 0.2  # MiniLM itself has a ~1.0 previous-token head
