"""Planted truth: a hooked model with a planted same-topic head and a planted induction head gets
``holds: true`` for those findings; the same model without them holds nothing."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule

from analyses.pretrained.findings import PRETRAINED_FINDINGS, model_findings, pretrained_findings
from analyses.pretrained.measure import PretrainedConfig, measure_model
from mechprobe import records
from tests.hooked_models import OracleConfig, pattern_blocks

pytestmark = pytest.mark.slow  # three full measurements of a small model (about 30 s)

N_TOPICS, WORDS_PER_TOPIC, N_FILLER = 4, 12, 12
D_VOCAB = N_TOPICS * WORDS_PER_TOPIC + N_FILLER
LABELS = torch.cat([torch.arange(N_TOPICS).repeat_interleave(WORDS_PER_TOPIC), torch.full((N_FILLER,), -1)])


class PlantedModel(HookedRootModule):
    """Two causal layers of two heads, all uniform over the prefix unless planted:
    layer 0 head 0 puts e^3 times more weight on same-topic keys (``topic=True``); layer 1 head 0 attends
    to the token after an earlier copy of the current token (``induction=True``). W_E is random."""

    def __init__(self, *, topic: bool, induction: bool, seed: int = 0) -> None:
        super().__init__()
        self.cfg = OracleConfig(n_layers=2, n_heads=2, n_ctx=128, d_vocab=D_VOCAB, model_name="planted")
        self.topic, self.induction = topic, induction
        self.W_E = nn.Parameter(torch.randn(D_VOCAB, 16, generator=torch.Generator().manual_seed(seed)))
        self.blocks = pattern_blocks(2)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        uniform = causal.float() / causal.sum(-1, keepdim=True)
        topics = LABELS[tokens]
        same = (topics[:, :, None] == topics[:, None, :]) & (topics[:, :, None] >= 0)
        scores = torch.where(same & causal, 3.0, 0.0).masked_fill(~causal, float("-inf"))
        topic_head = torch.softmax(scores, -1) if self.topic else uniform.expand(b, n, n)
        earlier_copy = (tokens[:, :, None] == tokens[:, None, :]) & torch.ones(n, n, dtype=torch.bool).tril(-1)
        targets = torch.zeros(b, n, n)
        targets[:, :, 1:] = earlier_copy[:, :, :-1].float()
        has = targets.sum(-1, keepdim=True) > 0
        induction_head = torch.where(has, targets / targets.sum(-1, keepdim=True).clamp(min=1), uniform)
        if not self.induction:
            induction_head = uniform.expand(b, n, n)
        self.blocks[0].attn.hook_pattern(torch.stack([topic_head, uniform.expand(b, n, n)], 1))
        self.blocks[1].attn.hook_pattern(torch.stack([induction_head, uniform.expand(b, n, n)], 1))
        return tokens.float()


def topical_text(n_batches: int = 16, rows: int = 8, n: int = 64, seed: int = 0) -> list[torch.Tensor]:
    """Each row: words of one topic (70%) and of the others, fillers between, and a repeated span."""
    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        topic = torch.randint(0, N_TOPICS, (rows, 1), generator=g)
        own = topic * WORDS_PER_TOPIC + torch.randint(0, WORDS_PER_TOPIC, (rows, n), generator=g)
        other = torch.randint(0, N_TOPICS * WORDS_PER_TOPIC, (rows, n), generator=g)
        filler = N_TOPICS * WORDS_PER_TOPIC + torch.randint(0, N_FILLER, (rows, n), generator=g)
        pick = torch.rand(rows, n, generator=g)
        tokens = torch.where(pick < 0.35, own, torch.where(pick < 0.5, other, filler))
        tokens[:, n // 2 : n // 2 + 16] = tokens[:, 4:20]  # a repeated span: induction targets on text
        batches.append(tokens)
    return batches


CONFIG = PretrainedConfig(max_batches=16, n_boot=1000, n_permutations=1000, n_pair_tokens=48, protocol_seq_len=20,
                          protocol_batches=8, protocol_batch_size=4)
PAIR_TOKENS = list(range(N_TOPICS * WORDS_PER_TOPIC))


def _measure(model):
    return measure_model(model, model.cfg.model_name, topical_text(), LABELS, PAIR_TOKENS, CONFIG,
                         data="planted text", progress=False)


@pytest.fixture(scope="module")
def measured():
    return {"planted": _measure(PlantedModel(topic=True, induction=True)),
            "plain": _measure(PlantedModel(topic=False, induction=False))}


def test_planted_heads_hold_against_the_model_without_them(measured):
    findings, _ = pretrained_findings(measured["planted"], measured["plain"])
    for name in ("induction_protocol", "induction_text", "topic_attention_best_head", "topic_attention_mean"):
        assert findings[name].holds, (name, records.dump(findings[name]))
    assert measured["planted"].held_out["topic_attention_best_head"].head == (0, 0)
    assert measured["planted"].held_out["induction_protocol"].head == (1, 0)
    # W_E is random: no embedding finding, whatever the attention does
    assert not findings["embedding_topic_similarity"].holds


def test_the_model_without_planted_heads_holds_nothing(measured):
    findings = model_findings(measured["plain"])
    assert set(findings) == set(PRETRAINED_FINDINGS)
    assert not [name for name, f in findings.items() if f.holds]
    # uniform attention sits exactly at its nulls
    assert measured["plain"].held_out["induction_text"].value == pytest.approx(
        measured["plain"].held_out["induction_text"].null_value)
    assert measured["plain"].held_out["topic_attention_mean"].value == pytest.approx(1.0, abs=0.05)


def test_a_planted_head_does_not_hold_against_a_control_that_has_it_too(measured):
    findings, _ = pretrained_findings(measured["planted"], measured["planted"])
    assert not findings["topic_attention_best_head"].holds and not findings["induction_protocol"].holds
