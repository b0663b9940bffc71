"""Bad input gets one clear, typed error that says how to fix it."""

from __future__ import annotations

import pytest
import torch

import probes
from probes import ConfigError, InputError, ModelError, ProbeStateError
from tests.hooked_models import NoHooksModel, OracleConfig, OracleModel


def test_unknown_model_name_offline():
    with pytest.raises(ModelError, match="nope-not-a-model"):
        probes.load_model("nope-not-a-model")


def test_missing_local_folder():
    with pytest.raises(ModelError, match="No model folder"):
        probes.load_model("./no/such/checkpoint")


def test_folder_without_config(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        probes.load_model(tmp_path)


def test_model_without_attention_pattern_hooks():
    with pytest.raises(ModelError, match="hook_pattern"):
        probes.head_scores(NoHooksModel())
    with pytest.raises(ModelError, match="hooked model"):
        probes.load_model(torch.nn.Linear(2, 2))


def test_tokens_longer_than_context():
    model = OracleModel(OracleConfig(n_ctx=16))
    with pytest.raises(InputError, match="longer than the model's context of 16"):
        probes.head_scores(model, torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(InputError, match="seq_len <= 8"):
        probes.head_scores(model, seq_len=9)


@pytest.mark.parametrize("seq_len", [1, 0, -3])
def test_seq_len_below_two(seq_len):
    with pytest.raises(ConfigError, match="seq_len must be an integer >= 2"):
        probes.head_scores(OracleModel(), seq_len=seq_len)


def test_wrong_dtype_rank_and_ids():
    model = OracleModel()
    with pytest.raises(InputError, match="integer ids"):
        probes.head_scores(model, torch.zeros(2, 5))
    with pytest.raises(InputError, match="rank 2"):
        probes.head_scores(model, torch.zeros(5, dtype=torch.long))
    with pytest.raises(InputError, match="rank 2"):
        probes.head_scores(model, torch.zeros(1, 2, 5, dtype=torch.long))
    with pytest.raises(InputError, match=r"\[0, 50\)"):
        probes.head_scores(model, torch.full((1, 5), 50))
    with pytest.raises(InputError, match="must be None"):
        probes.head_scores(model, "some text")


def test_unknown_kind_and_empty_batches():
    with pytest.raises(ConfigError, match="subset of"):
        probes.HeadScoreProbe(kinds=("inductoin",))
    with pytest.raises(InputError, match="empty"):
        probes.run_probes(OracleModel(), [probes.HeadScoreProbe()], [], progress=False)


def test_update_without_binding():
    with pytest.raises(ProbeStateError, match="not bound"):
        probes.HeadScoreProbe().update({}, probes.TokenBatch(torch.zeros(1, 2, dtype=torch.long),
                                                             torch.ones(1, 2, dtype=torch.bool)))


def test_merge_incompatible():
    with pytest.raises(ProbeStateError, match="one type and settings"):
        probes.HeadScoreProbe(("induction",)).merge(probes.HeadScoreProbe())


def test_load_of_a_folder_that_is_not_a_result(tmp_path):
    with pytest.raises(InputError, match="not a saved probe result"):
        probes.ProbeResult.load(tmp_path)
