"""The head ablations settled in rounds (analyses.pretrained.settle_ablation): a round's units give the first pass's
statistic, the fresh rows are rows no pass used, and on a model with a planted induction head its ablation settles as
"holds" while a head that carries nothing settles as "absent"."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
import torch

from analyses.pretrained.causal import CausalConfig, causal_protocol, finding_slices, measure_ablation
from analyses.pretrained.settle import CAUSAL_PROTOCOL, settle_findings
from analyses.pretrained.settle_ablation import (
    AblationSpec,
    SharedText,
    ablation_statistic,
    ablation_units,
    fresh_causal_protocol,
    richest_rows,
)
from analyses.pretrained.settled import SettleConfig
from probes.core.batch import TokenBatch
from probes.core.model_info import ModelInfo
from probes.stats.findings import Finding
from tests.probes.causal.planted_models import INDUCTION_HEAD, PlantedInductionModel

CONFIG = CausalConfig(seq_len=8, sequences=4)
NAME = "induction_heads_causal"


def _spec(heads, labels=None):
    return AblationSpec.of(NAME, heads, CONFIG, torch.zeros(24, dtype=torch.long) if labels is None else labels)


def test_a_rounds_units_give_the_first_pass_statistic_on_the_same_rows():
    model = PlantedInductionModel()
    rows = causal_protocol(ModelInfo.of(model), CONFIG, seed=0)
    slices, signs = finding_slices(NAME, CONFIG, torch.zeros(24, dtype=torch.long))
    first = measure_ablation(model, NAME, [INDUCTION_HEAD], rows, slices, signs, CONFIG, chosen_by="planted",
                             selection_scores=(1.0,), n_boot=100, seed=0, data="planted")
    units = ablation_units(model, _spec([INDUCTION_HEAD]), rows, seed=0)
    assert {k: tuple(v.shape) for k, v in units.items()} == {"ablated": (4, 1), "clean": (4, 1), "count": (4, 1)}
    summed = {k: v.sum(0, keepdim=True) for k, v in units.items()}
    assert float(ablation_statistic(signs)(summed)[0]) == pytest.approx(first.value, abs=1e-9)
    assert first.value > 1.0  # the planted head alone predicts the repeated half


def test_the_fresh_rows_are_the_ones_after_the_first_pass():
    info = ModelInfo.of(PlantedInductionModel())
    more = causal_protocol(info, replace(CONFIG, sequences=CONFIG.sequences + 3), seed=5)
    fresh = list(itertools.islice(fresh_causal_protocol(info, CONFIG, seed=5), 3))
    assert [r.tokens.tolist() for r in fresh] == [r.tokens.tolist() for r in more[CONFIG.sequences:]]
    # the richest rows of each text batch, in the first pass's proportion (half here), cut to text_len
    labels = torch.full((10,), -1)
    labels[[1, 2]] = 0  # token 1 and 2: one topic
    tokens = torch.tensor([[3] * 10, [1, 2, 1, 2, 1, 2, 1, 2, 1, 3], [3] * 10, [1, 1, 2, 3, 3, 3, 3, 3, 3, 3]])
    batch = TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool))
    kept = list(richest_rows(iter([batch, batch]), labels, replace(CONFIG, text_len=8), keep=0.5))
    assert [r.tokens.tolist() for r in kept] == [[[1, 2, 1, 2, 1, 2, 1, 2]], [[1, 1, 2, 3, 3, 3, 3, 3]]] * 2


def _pilot(control=0.05):
    """A first pass that left the ablation inconclusive: a wide interval over 4 rows straddling the 0.6 threshold."""
    return {NAME: Finding("loss change", 0.6, (-0.4, 1.6), "random head sets", 0.5, 0.02, 0.1, control_value=control,
                          n_units=4)}


SETTLE = SettleConfig(enabled=True)


def _settle(model, heads, config=SETTLE, **kwargs):
    info = ModelInfo.of(model)
    return settle_findings(model, _pilot(**kwargs), {}, {CAUSAL_PROTOCOL: fresh_causal_protocol(info, CONFIG, 0)},
                           {CAUSAL_PROTOCOL: 17.0}, config, ablations={NAME: _spec(heads)}, n_boot=200)[NAME]


def test_a_planted_heads_ablation_settles_as_holding_and_a_head_that_carries_nothing_as_absent():
    model = PlantedInductionModel()
    planted = _settle(model, [INDUCTION_HEAD])
    assert planted.verdict == "holds" and planted.first_pass == "inconclusive", planted.cell()
    assert planted.unit == "[BOS] X X sequences" and planted.units >= 20 and planted.looks[-1].low > 0.6
    assert planted.tokens == 16 * planted.units  # the valid tokens: X X, not the BOS
    idle = _settle(model, [(1, 2)])  # a uniform head of weight 0.1: its ablation barely moves the loss
    assert idle.verdict == "absent" and idle.looks[-1].high < 0.6, idle.cell()
    # the control's value stays the first pass's: above the planted heads' effect, nothing holds
    assert _settle(model, [INDUCTION_HEAD], control=10.0).verdict != "holds"


def test_a_causal_finding_without_its_heads_is_not_monitored():
    model = PlantedInductionModel()
    info = ModelInfo.of(model)
    result = settle_findings(model, _pilot(), {}, {CAUSAL_PROTOCOL: fresh_causal_protocol(info, CONFIG, 0)},
                             {CAUSAL_PROTOCOL: 17.0}, SettleConfig(enabled=True), n_boot=200)[NAME]
    assert result.verdict == "inconclusive" and result.units == 0
    assert result.stop == "not monitored: no fresh units of its kind were given"


def test_shared_text_is_read_once_and_every_reader_sees_every_batch():
    read = []

    def corpus():
        for i in range(5):
            read.append(i)
            yield TokenBatch(torch.full((1, 2), i), torch.ones(1, 2, dtype=torch.bool))

    shared = SharedText(corpus())
    text, rows = shared.reader(), shared.reader()
    first = [int(b.tokens[0, 0]) for b in itertools.islice(text, 3)]  # the text findings read ahead ...
    assert first == [0, 1, 2] and read == [0, 1, 2]
    assert [int(b.tokens[0, 0]) for b in rows] == [0, 1, 2, 3, 4]  # ... the rows still see those batches
    assert [int(b.tokens[0, 0]) for b in text] == [3, 4] and read == [0, 1, 2, 3, 4]  # each batch read once
    assert shared._kept == []  # every reader passed them: none kept
