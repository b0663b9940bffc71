"""The co-occurrence ordering settled in rounds (analyses.pretrained.settle, settle_ordering) on a hand-made model:
text from a topic mixture, one head attending to each key in proportion to its expected co-occurrence with the
query (a planted ordering: settles as "holds" on fresh query tokens), another attending by the same table with the
key tokens' labels shuffled (the control: never "holds"; it runs out of fresh query tokens and says what it would
still need)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from transformer_lens import HookedRootModule

from analyses.pretrained.settle import settle_findings
from analyses.pretrained.settle_ordering import OrderingSetup, round_tokens
from analyses.pretrained.settled import SettleConfig
from probes import TokenBatch
from probes.core.errors import InputError
from probes.stats.findings import Finding
from tests.hooked_models import OracleConfig, pattern_blocks

VOCAB, TOPICS, SEQ_LEN, ROWS = 60, 4, 48, 6
USED = tuple(range(0, VOCAB, 6))  # the first pass's query tokens: never units again


def _mixture() -> tuple[torch.Tensor, torch.Tensor]:
    """``(p(token | topic) [topic token], expected co-occurrence C[t, s] = sum_z p(z) p(t|z) p(s|z))``."""
    generator = torch.Generator().manual_seed(1)
    home = torch.arange(VOCAB) % TOPICS
    weight = torch.rand(TOPICS, VOCAB, generator=generator) * 0.2
    weight[home, torch.arange(VOCAB)] = 1.0 + 3.0 * torch.rand(VOCAB, generator=generator)
    p = weight / weight.sum(1, keepdim=True)
    return p, p.T @ p / TOPICS


class CooccurrenceOracle(HookedRootModule):
    """One layer, two heads over causal keys: head 0 attends to key s from query t in proportion to ``C[t, s]``,
    head 1 in proportion to ``C[t, perm(s)]`` (the key labels shuffled)."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = OracleConfig(n_layers=1, n_heads=2, n_ctx=SEQ_LEN, d_vocab=VOCAB, model_name="cooccurrence")
        self.blocks = pattern_blocks(1)
        self.unembed = nn.Linear(1, VOCAB)
        _, self.table = _mixture()
        self.shuffled = self.table[:, torch.randperm(VOCAB, generator=torch.Generator().manual_seed(2))]
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        causal = torch.ones(tokens.shape[1], tokens.shape[1]).tril()
        heads = []
        for table in (self.table, self.shuffled):
            weight = table[tokens[:, :, None], tokens[:, None, :]] * causal
            heads.append(weight / weight.sum(-1, keepdim=True))
        self.blocks[0].attn.hook_pattern(torch.stack(heads, 1))
        return self.unembed(tokens.float()[..., None])


def _text(seed: int = 0):
    """Endless batches: each row draws a topic, then its tokens from that topic."""
    p, _ = _mixture()
    generator = torch.Generator().manual_seed(seed)
    while True:
        topics = torch.randint(TOPICS, (ROWS,), generator=generator)
        tokens = torch.multinomial(p[topics], SEQ_LEN, replacement=True, generator=generator)
        yield TokenBatch(tokens, torch.ones_like(tokens, dtype=torch.bool))


def _pilot():
    """A first pass that left the ordering inconclusive: 12 query tokens, an interval straddling 0.1."""
    return {"cooccurrence_ordering": Finding("ordering", 0.15, (-0.05, 0.35), "shuffled co-occurrence", 0.0, 0.05,
                                             0.1, n_units=12)}


def _settle(head: int, supply, used=USED):
    labels = torch.arange(VOCAB) % TOPICS
    return settle_findings(CooccurrenceOracle(), _pilot(), {"cooccurrence_ordering": (0, head)}, {"text": supply},
                           {"text": ROWS * SEQ_LEN}, SettleConfig(enabled=True), labels=labels,
                           ordering=OrderingSetup(used, n_keys=20, batches_per_unit=1.0), n_boot=200
                           )["cooccurrence_ordering"]


def test_a_planted_ordering_settles_as_holding_on_fresh_query_tokens():
    supply = _text()
    planted = _settle(0, supply)
    assert planted.verdict == "holds" and planted.first_pass == "inconclusive", planted.cell()
    assert planted.unit == "ranked query tokens" and planted.units >= 20 and planted.rounds == 1
    assert planted.looks[-1].low > planted.threshold and planted.needs_units is None
    assert planted.stop == f"settled after {planted.units} ranked query tokens"
    # one round of 20 fresh batches (the first round's size), read once: the supply has moved on by exactly that
    assert planted.tokens == 20 * ROWS * SEQ_LEN
    fresh = _text()
    for _ in range(20):
        next(fresh)
    assert torch.equal(next(supply).tokens, next(fresh).tokens)


def test_the_shuffled_label_control_settles_as_absent_or_runs_out_saying_what_it_still_needs():
    control = _settle(1, _text())
    # every one of the 50 fresh query tokens (60 less the first pass's 10) is spent, and the mean is near 0
    assert control.verdict == "absent" and control.units == VOCAB - len(USED), control.cell()
    assert abs(control.looks[-1].value) < 0.05 and control.looks[-1].high < control.threshold
    # with only 25 fresh query tokens the sequence cannot settle it: the rounds stop when none is left
    short = _settle(1, _text(), used=tuple(range(35)))
    assert short.verdict == "inconclusive" and short.units == 25, short.cell()
    assert short.stop.startswith("the text ran out of query tokens") and short.needs_units is not None
    assert short.needs_tokens is not None and f"needs about {short.needs_units:,} more ranked query tokens" in \
        short.cell()


def test_a_round_never_takes_a_spent_query_token():
    batches = [b for _, b in zip(range(5), _text())]
    labels = torch.arange(VOCAB) % TOPICS
    labels[7] = -1  # an unlabelled token is never a query or a key
    queries, keys = round_tokens(batches, labels, set(USED), 100, 20)
    assert queries and not set(queries) & set(USED) and 7 not in queries and 7 not in keys
    assert set(queries) <= set(keys) and len(queries) == VOCAB - len(USED) - 1
    assert round_tokens(batches, labels, set(range(VOCAB)), 100, 20)[0] == []


@pytest.mark.parametrize("bad", [dict(n_keys=0), dict(batches_per_unit=0.0)])
def test_the_setup_is_checked(bad):
    with pytest.raises(InputError, match="OrderingSetup"):
        OrderingSetup(**bad)
