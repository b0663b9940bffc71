"""The legacy TransformerLens hub repos by name (``attn-only-2l``, ``NeelNanda/...``), with training checkpoints.

The hub is never reachable in tests: offline, the name is one clear line on both generations. The whole by-name
path (4.x: TransformerLens's ``tl_legacy`` source, weights through ``convert_tl_checkpoint``; 3.x:
``HookedTransformer.from_pretrained_no_processing``; both: the config from the repo, checkpoint labels from its file
list) runs against a stand-in hub that serves a legacy-layout repo from a folder: the planted model as the final
weights and one checkpoint, a model without the planted heads as the other.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import probes
from probes import ModelError
from probes.core.legacy_hub import legacy_spec, split_checkpoint
from probes.core.model_kind import has_hooked_transformer, model_kind
from tests.probes.test_tl_checkpoint import (
    EXPECTED_KIND,
    assert_planted_heads_found,
    planted_config,
    planted_state_dict,
)

pytestmark = pytest.mark.usefixtures("one_thread")

ATTN_ONLY_2L = "NeelNanda/Attn_Only_2L512W_C4_Code"


@pytest.mark.parametrize(("spec", "official"), [
    ("attn-only-2l", ATTN_ONLY_2L), ("Attn-Only-2L", ATTN_ONLY_2L), (ATTN_ONLY_2L, ATTN_ONLY_2L),
    ("redwood_attn_2l", "ArthurConmy/redwood_attn_2l"), ("othello-gpt", "Baidicoot/Othello-GPT-Transformer-Lens"),
])
def test_legacy_names_and_aliases_resolve_offline(spec, official):
    found = legacy_spec(spec)
    assert found is not None and found.name == official and found.label == official


@pytest.mark.parametrize("spec", ["gpt2", "EleutherAI/pythia-70m", "bert-base-uncased", "someone/some-model"])
def test_other_names_are_not_legacy(spec):
    assert legacy_spec(spec) is None


def test_a_checkpoint_is_chosen_by_a_suffix_with_transformer_lens_argument_names():
    assert split_checkpoint("attn-only-2l") == ("attn-only-2l", {})
    assert split_checkpoint("attn-only-2l@checkpoint_index=-1") == ("attn-only-2l", {"checkpoint_index": -1})
    spec = legacy_spec("gelu-2l@checkpoint_value=1000")
    assert spec is not None and spec.checkpoint_value == 1000 and spec.checkpoint_index is None
    assert spec.label == "NeelNanda/GELU_2L512W_C4_Code@checkpoint_value=1000"


@pytest.mark.parametrize(("spec", "expected"), [
    ("attn-only-2l@step=3", "@checkpoint_index=N or @checkpoint_value=N"),
    ("attn-only-2l@checkpoint_index=x", "@checkpoint_index=N or @checkpoint_value=N"),
    ("attn-only-2l@checkpoint_value=1.5", "@checkpoint_index=N or @checkpoint_value=N"),  # not read as a path
    ("gpt2@checkpoint_index=3", "legacy TransformerLens repos.*'gpt2' is not one of them"),
])
def test_a_bad_checkpoint_suffix_is_one_line(spec, expected):
    with pytest.raises(ModelError, match=expected) as caught:
        probes.load_model(spec)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("spec", ["attn-only-2l", "NeelNanda/GELU_1L512W_C4_Code@checkpoint_index=3"])
def test_offline_a_legacy_name_is_one_line_saying_the_hub_is_needed(spec, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelError, match=r"legacy TransformerLens model .* no network") as caught:
        probes.load_model(spec)
    assert "\n" not in str(caught.value) and legacy_spec(spec).label in str(caught.value)


# --- the by-name path against a stand-in hub (4.x) ---------------------------------------------------------------


def without_planted_heads() -> dict[str, torch.Tensor]:
    """The planted model with every query and key redrawn at random: an early checkpoint with no circuit yet."""
    state = planted_state_dict()
    generator = torch.Generator().manual_seed(9)
    for key in [k for k in state if k.endswith(("W_Q", "W_K"))]:
        state[key] = torch.randn(state[key].shape, generator=generator) * 0.3
    return state


@pytest.fixture
def stand_in_hub(tmp_path, monkeypatch):
    """huggingface_hub's download and file listing, answered from a folder laid out as a legacy TL repo."""
    import huggingface_hub

    repo = tmp_path / "repo"
    (repo / "checkpoints").mkdir(parents=True)
    legacy_config = {k: v for k, v in planted_config().items() if k != "normalization_type"} | {
        "normalization": None, "tokenizer_name": None}
    (repo / "config.json").write_text(json.dumps(legacy_config), encoding="utf-8")
    torch.save(planted_state_dict(), repo / "attn_only_2L_final.pth")
    torch.save(without_planted_heads(), repo / "checkpoints" / "attn_only_2L_100.pth")
    torch.save(planted_state_dict(), repo / "checkpoints" / "attn_only_2L_2000.pth")
    asked: list[str] = []

    def download(repo_id: str, filename: str, subfolder: str | None = None, cache_dir: object = None,
                 **_: object) -> str:
        assert repo_id == ATTN_ONLY_2L, repo_id
        asked.append(filename)
        return str(repo / filename)

    class Api:
        def list_repo_files(self, repo_id: str, **_: object) -> list[str]:
            assert repo_id == ATTN_ONLY_2L, repo_id
            return sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if p.is_file())

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)  # 4.x's tl_legacy imports them when it runs
    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    if has_hooked_transformer():  # 3.x's from_pretrained imported them into its modules
        import transformer_lens.loading_from_pretrained as loading
        import transformer_lens.utilities.hf_utils as hf_utils

        monkeypatch.setattr(hf_utils, "hf_hub_download", download)
        monkeypatch.setattr(loading, "HfApi", Api)
    return asked


def test_a_legacy_name_loads_through_transformer_lens_own_legacy_loader(stand_in_hub):
    model = probes.load_model("attn-only-2l")
    assert model_kind(model) is EXPECTED_KIND and not model.training
    assert model.cfg.model_name == ATTN_ONLY_2L
    assert stand_in_hub == ["config.json", "attn_only_2L_final.pth"]
    assert_planted_heads_found(model)


def test_a_training_checkpoint_loads_its_own_weights(stand_in_hub):
    early = probes.load_model("attn-only-2l@checkpoint_index=0")
    late = probes.load_model(f"{ATTN_ONLY_2L}@checkpoint_value=2000")
    assert stand_in_hub[-3:] == ["checkpoints/attn_only_2L_100.pth", "config.json", "checkpoints/attn_only_2L_2000.pth"]
    assert (early.cfg.checkpoint_value, late.cfg.checkpoint_value) == (100, 2000)
    assert early.cfg.model_name == f"{ATTN_ONLY_2L}@checkpoint_index=0"
    assert_planted_heads_found(late)
    scores = probes.head_scores(early, seq_len=10, n_batches=2, batch_size=8, seed=0)
    assert scores.top_heads("previous_token", 1)[0][2] < 0.9  # no circuit in the early checkpoint


def test_a_checkpoint_the_repo_does_not_have_is_one_line(stand_in_hub):
    # 4.x: "checkpoint_value=5 not in available checkpoints"; 3.9: "Checkpoint value 5 is not in list of available"
    with pytest.raises(ModelError, match=r"could not load the legacy model .*(?i:checkpoint.value.5 (is )?not in)") \
            as caught:
        probes.load_model("attn-only-2l@checkpoint_value=5")
    assert "\n" not in str(caught.value)


def test_a_local_copy_of_a_legacy_repo_loads_as_a_folder(tmp_path):
    # what the offline message suggests: the repo's config.json and *final.pth, checkpoints/ beside them
    (tmp_path / "checkpoints").mkdir()
    legacy_config = {k: v for k, v in planted_config().items() if k != "normalization_type"} | {"normalization": None}
    (tmp_path / "config.json").write_text(json.dumps(legacy_config), encoding="utf-8")
    torch.save(planted_state_dict(), tmp_path / "attn_only_2L_final.pth")
    torch.save(without_planted_heads(), tmp_path / "attn_only_2L_100.pth")  # a second file: *final.pth is chosen
    assert_planted_heads_found(probes.load_model(Path(tmp_path)))
