"""A saved ``HookedTransformer`` (state dict + config) loads by path on both TransformerLens generations: as a
``HookedTransformer`` on 3.9, through TransformerLens's ``convert_tl_checkpoint`` into a native bridge on 4.x.

The planted previous-token/induction weights of ``test_hooked_transformer`` are written here by hand in
HookedTransformer's layout (so 4.x, which cannot build one, has a checkpoint too); the cross-generation parity test
has TransformerLens 3.9 itself build and save models in a subprocess over the ``.venv-tl3`` overlay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import probes
from probes import ModelError
from probes.core.model_kind import ModelKind, has_hooked_transformer, model_kind
from tests.probes.test_hooked_transformer import D_HEAD, D_MODEL, HEADS, N, V, embeddings, planted_heads
from tests.probes.tl_support import needs_hooked_transformer

pytestmark = pytest.mark.usefixtures("one_thread")

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / ".venv-tl3"
EXPECTED_KIND = ModelKind.HOOKED_TRANSFORMER if has_hooked_transformer() else ModelKind.NATIVE_BRIDGE
SCORE_ARGS = {"seq_len": 10, "n_batches": 2, "batch_size": 8, "seed": 0}


def planted_config() -> dict:
    """The fields of ``HookedTransformerConfig(...).to_dict()`` that describe the planted model (the rest default)."""
    return {"n_layers": 2, "d_model": D_MODEL, "n_ctx": N, "d_head": D_HEAD, "n_heads": HEADS, "d_vocab": V,
            "d_mlp": 4 * D_MODEL, "attn_only": True, "normalization_type": None, "act_fn": "relu",
            "positional_embedding_type": "standard", "attn_scale": D_HEAD ** 0.5, "model_name": "custom"}


def planted_state_dict() -> dict[str, torch.Tensor]:
    """The planted model in HookedTransformer's state-dict layout: W_Q/W_K/W_V [head d_model d_head],
    W_O [head d_head d_model], biases per head; the unplanted heads read with random queries and keys, write
    nothing."""
    generator = torch.Generator().manual_seed(0)
    w_e, w_pos = embeddings()
    state = {"embed.W_E": w_e, "pos_embed.W_pos": w_pos,
             "unembed.W_U": torch.randn(D_MODEL, V, generator=generator), "unembed.b_U": torch.zeros(V)}
    for layer in range(2):
        for name in ("W_Q", "W_K", "W_V"):
            state[f"blocks.{layer}.attn.{name}"] = torch.randn(HEADS, D_MODEL, D_HEAD, generator=generator) * 0.3
        state[f"blocks.{layer}.attn.W_O"] = torch.zeros(HEADS, D_HEAD, D_MODEL)
        for name in ("b_Q", "b_K", "b_V"):
            state[f"blocks.{layer}.attn.{name}"] = torch.zeros(HEADS, D_HEAD)
        state[f"blocks.{layer}.attn.b_O"] = torch.zeros(D_MODEL)
    for (layer, head), weights in planted_heads().items():
        for name, value in weights.items():
            state[f"blocks.{layer}.attn.{name}"][head] = value
    return state


def assert_planted_heads_found(model) -> None:
    scores = probes.head_scores(model, **SCORE_ARGS)
    for kind, planted in (("previous_token", (0, 0)), ("induction", (1, 0))):
        (first, second) = scores.top_heads(kind, 2)
        assert first[:2] == planted and first[2] > 0.999 and second[2] < 0.6, (kind, scores.top_heads(kind, 3))


# --- the forms a checkpoint comes in -----------------------------------------------------------------------------


def save_form(form: str, folder: Path) -> Path:
    """Write the planted checkpoint in one of the accepted forms; return what load_model is given."""
    config, state = planted_config(), planted_state_dict()
    if form == "config_and_state_in_one_file":
        torch.save({"config": config, "state_dict": state}, folder / "planted.pt")
        return folder / "planted.pt"
    if form == "cfg_and_model_state_dict_keys":
        torch.save({"cfg": config, "model_state_dict": state}, folder / "planted.pth")
        return folder / "planted.pth"
    if form == "state_dict_with_json_of_its_name":
        torch.save(state, folder / "planted.pt")
        (folder / "planted.json").write_text(json.dumps(config), encoding="utf-8")
        return folder / "planted.pt"
    if form == "state_dict_with_config_json":
        from safetensors.torch import save_file

        save_file(state, str(folder / "weights.safetensors"))
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
        return folder / "weights.safetensors"
    assert form == "legacy_repo_folder"  # config.json (normalization spelled the old way) + *final.pth + checkpoints/
    legacy = {key: value for key, value in config.items() if key != "normalization_type"} | {"normalization": None}
    (folder / "config.json").write_text(json.dumps(legacy), encoding="utf-8")
    torch.save(state, folder / "Attn_Only_2L_final.pth")
    (folder / "checkpoints").mkdir()
    return folder


FORMS = ["config_and_state_in_one_file", "cfg_and_model_state_dict_keys", "state_dict_with_json_of_its_name",
         "state_dict_with_config_json", "legacy_repo_folder"]


@pytest.mark.parametrize("form", FORMS)
def test_every_checkpoint_form_loads_with_the_planted_heads_found(form, tmp_path):
    model = probes.load_model(save_form(form, tmp_path))
    assert model_kind(model) is EXPECTED_KIND
    assert not model.training
    assert_planted_heads_found(model)


def test_numpy_scalars_of_cfg_to_dict_and_a_string_dtype_are_read(tmp_path):
    import numpy as np

    config = planted_config() | {"attn_scale": np.float64(D_HEAD ** 0.5), "initializer_range": np.float64(0.05),
                                 "dtype": "torch.float32", "device": "cpu"}
    torch.save({"config": config, "state_dict": planted_state_dict()}, tmp_path / "model.pt")
    model = probes.load_model(str(tmp_path / "model.pt"))
    assert model.cfg.model_name == "model"
    assert_planted_heads_found(model)


def test_the_loaded_weights_are_the_saved_ones(tmp_path):
    model = probes.load_model(save_form("config_and_state_in_one_file", tmp_path))
    state = planted_state_dict()
    if has_hooked_transformer():
        assert all(torch.equal(model.state_dict()[key], value) for key, value in state.items())
    else:  # the bridge's q weight of layer 1 is W_Q [head d_model d_head] as nn.Linear rows (head d_head) x d_model
        q = model.state_dict()["blocks.1.attn.q.weight"]
        assert torch.equal(q, state["blocks.1.attn.W_Q"].permute(0, 2, 1).reshape(HEADS * D_HEAD, D_MODEL))
        assert torch.equal(model.state_dict()["unembed.weight"], state["unembed.W_U"].T)


@needs_hooked_transformer
@pytest.mark.parametrize("form", ["config_dict_inside", "json_beside"])
def test_on_3_9_a_saved_hooked_transformer_comes_back_as_the_same_hooked_transformer(form, tmp_path):
    from tests.probes.tl3_save_checkpoints import full_model

    model = full_model()  # LayerNorm, GELU MLP, biases: cfg.to_dict() with every field it has on 3.9
    if form == "config_dict_inside":
        torch.save({"config": model.cfg.to_dict(), "state_dict": model.state_dict()}, tmp_path / "full.pt")
    else:
        torch.save(model.state_dict(), tmp_path / "full.pt")
        (tmp_path / "full.json").write_text(json.dumps(model.cfg.to_dict(), default=str), encoding="utf-8")
    loaded = probes.load_model(tmp_path / "full.pt")
    assert model_kind(loaded) is ModelKind.HOOKED_TRANSFORMER and loaded.cfg.model_name == "full"
    assert loaded.state_dict().keys() == model.state_dict().keys()
    assert all(torch.equal(loaded.state_dict()[key], value) for key, value in model.state_dict().items())
    original, again = (probes.head_scores(m, **SCORE_ARGS) for m in (model, loaded))
    assert all(torch.equal(original.scores[kind], again.scores[kind]) for kind in original.scores)


# --- what is not such a checkpoint -------------------------------------------------------------------------------


class NotAConfig:
    pass


def bad_input(case: str, folder: Path) -> tuple[Path, str]:
    state = planted_state_dict()
    if case == "state_dict_without_config":
        torch.save(state, folder / "model.pt")
        return folder / "model.pt", "holds a state dict but no config.*model.json or config.json"
    if case == "pickled_config_object":
        torch.save({"config": NotAConfig(), "state_dict": state}, folder / "model.pt")
        return folder / "model.pt", "pickled Python objects.*cfg.to_dict"
    if case == "not_a_torch_file":
        (folder / "model.pt").write_text("hello", encoding="utf-8")
        return folder / "model.pt", "not a checkpoint torch.load can read"
    if case == "a_text_file":
        (folder / "notes.txt").write_text("hello", encoding="utf-8")
        return folder / "notes.txt", "must be a HookedTransformer checkpoint"
    if case == "config_without_tl_fields":
        torch.save({"config": {"hidden_size": 8}, "state_dict": state}, folder / "model.pt")
        return folder / "model.pt", "not a HookedTransformerConfig dict.*d_model"
    if case == "weights_of_another_model":
        torch.save({"config": planted_config(), "state_dict": {"linear.weight": torch.zeros(2, 2)}}, folder / "m.pt")
        return folder / "m.pt", "no HookedTransformer weights"
    if case == "weights_not_fitting_the_config":
        torch.save({"config": planted_config() | {"n_heads": 4, "d_head": 18}, "state_dict": state}, folder / "m.pt")
        return folder / "m.pt", "shape|does not fit"
    if case == "tl_folder_without_weights":
        (folder / "config.json").write_text(json.dumps(planted_config()), encoding="utf-8")
        return folder, "no state-dict file"
    assert case == "folder_with_nothing"
    return folder, "no config.json in it.*HookedTransformer checkpoint"


BAD = ["state_dict_without_config", "pickled_config_object", "not_a_torch_file", "a_text_file",
       "config_without_tl_fields", "weights_of_another_model", "weights_not_fitting_the_config",
       "tl_folder_without_weights", "folder_with_nothing"]


@pytest.mark.parametrize("case", BAD)
def test_what_is_not_a_checkpoint_is_one_line_saying_what_was_expected(case, tmp_path):
    path, expected = bad_input(case, tmp_path)
    with pytest.raises(ModelError, match=expected) as caught:
        probes.load_model(path)
    assert "\n" not in str(caught.value)


@pytest.mark.skipif(has_hooked_transformer(), reason="TransformerLens 3.x loads every HookedTransformer option")
@pytest.mark.parametrize("option", [{"positional_embedding_type": "rotary"}, {"shortformer_pos": True},
                                    {"parallel_attn_mlp": True}, {"use_attn_scale": False}])
def test_an_option_the_native_bridge_cannot_compute_is_refused_by_name(option, tmp_path):
    torch.save({"config": planted_config() | option, "state_dict": planted_state_dict()}, tmp_path / "m.pt")
    key, value = next(iter(option.items()))
    named = {"positional_embedding_type": value, "shortformer_pos": "shortformer"}.get(key, key)
    with pytest.raises(ModelError, match=f"{named}.*3.9") as caught:
        probes.load_model(tmp_path / "m.pt")
    assert "\n" not in str(caught.value)


# --- parity across the generations -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(has_hooked_transformer(), reason="compares TransformerLens 3.9 (subprocess) with 4.x in-process")
@pytest.mark.skipif(not (OVERLAY / "transformer_lens").is_dir(),
                    reason=f"no TransformerLens 3.9 overlay at {OVERLAY} (make test builds it: $(TL3)/.installed)")
def test_a_hooked_transformer_saved_on_3_9_scores_the_same_heads_on_4x(tmp_path):
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(OVERLAY), str(ROOT)])}
    done = subprocess.run([sys.executable, "-m", "tests.probes.tl3_save_checkpoints", str(tmp_path)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    from tests.probes.tl3_save_checkpoints import SCORE_ARGS as SAVED_WITH
    from tests.probes.tl3_save_checkpoints import fixed_tokens

    reference = torch.load(tmp_path / "reference.pt", weights_only=True)
    for name in ("planted", "full", "gqa"):  # planted: config inside; full: full.json beside; gqa: a folder
        model = probes.load_model(tmp_path / (name if name == "gqa" else f"{name}.pt"))
        assert model_kind(model) is ModelKind.NATIVE_BRIDGE
        scores = probes.head_scores(model, **SAVED_WITH)
        assert scores.scores.keys() == reference[name]["scores"].keys()
        for kind, table in reference[name]["scores"].items():
            assert torch.allclose(scores.scores[kind].double(), table.double(), atol=1e-4, rtol=0), (name, kind)
        with torch.no_grad():
            logits = model(fixed_tokens(model.cfg.d_vocab))
        assert torch.allclose(logits, reference[name]["logits"], atol=1e-4, rtol=1e-4), name
    assert_planted_heads_found(probes.load_model(tmp_path / "planted.pt"))
    # the native gated MLP has no biases: HookedTransformer's zero ones are dropped, a trained (non-zero) one refused
    state = torch.load(tmp_path / "gqa" / "model.pth", weights_only=True)
    state["blocks.1.mlp.b_in"] += 0.1
    torch.save(state, tmp_path / "gqa" / "model.pth")
    with pytest.raises(ModelError, match=r"non-zero biases \(blocks.1.mlp.in.bias\).*3.9"):
        probes.load_model(tmp_path / "gqa")
