"""Random weights, causally: on random-weight checkpoints of GPT-NeoX, Gemma2 and RoBERTa (built from configs),
knocking out the top heads of each head score costs no more than random head sets in the same layers: no
ablation beats its null, whether the loss is next-token (decoders) or masked-token (RoBERTa)."""

from __future__ import annotations

import pytest

from analyses.ablate import SLICE, AblateSettings, ablate_model
from probes import load_model
from tests.random_checkpoints import RANDOM_CHECKPOINT_KINDS, RANDOM_CHECKPOINTS, make_random_checkpoint


@pytest.mark.slow
@pytest.mark.parametrize("kind", RANDOM_CHECKPOINT_KINDS)
def test_no_ablation_beats_its_null_on_a_random_weight_checkpoint(kind, tmp_path):
    model = load_model(make_random_checkpoint(kind, tmp_path / kind, seed=3))
    for score in ("induction", "previous_token"):
        settings = AblateSettings(top=(score, 3), seq_len=12, batches=3, batch_size=2, n_draws=100)
        result, chosen = ablate_model(model, settings)
        assert len(chosen["heads"]) == 3
        expected_loss = "next" if RANDOM_CHECKPOINTS[kind].causal else "masked"
        assert result.provenance.settings["loss"] == expected_loss, result.provenance.settings
        assert not result.beats_null(SLICE), (kind, score, result.to_dataframe().to_dict("records"))
