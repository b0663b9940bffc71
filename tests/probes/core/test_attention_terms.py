"""The probes' per-layer work as one batched reduction (probes.core.attention_terms) equals each probe's own fold.

Tokens with many repeats (``[BOS] X X`` over a small vocabulary, so previous-token, induction, duplicate, n-gram
and same-token entries are plentiful), on three architectures (rotary causal, soft-capped Gemma2, a padded RoBERTa
encoder): the suite folded from term sums equals the suite folded from whole ``hook_pattern`` layers, and the plan is
what folded it (one call per layer, each probe's own per-layer fold never called). A plan is made on the CPU from
tokens alone, so it is the same whether the batch sits on the model's device or not.
"""

from __future__ import annotations

import pytest
import torch

import probes
from probes.core import attention_terms, runner
from probes.core.batch import TokenBatch
from probes.core.result import results_close
from tests.probes.tl_support import checkpoint_kinds, loadable_checkpoint_kinds
from tests.random_checkpoints import make_random_checkpoint

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("attention-terms")
    return {kind: probes.load_model(make_random_checkpoint(kind, root / kind, seed=2))
            for kind in loadable_checkpoint_kinds()}


@pytest.fixture(autouse=True)
def fresh_checks(monkeypatch):
    monkeypatch.setattr(runner, "_REDUCTIONS_CHECKED", type(runner._REDUCTIONS_CHECKED)())


def _repeated(n_rows: int = 2, half: int = 30, vocab: int = 25, seed: int = 0) -> torch.Tensor:
    """``[BOS-like] X X`` rows, ``X`` drawn from ids 3 .. 3 + vocab (many repeats inside each half too)."""
    x = torch.randint(3, 3 + vocab, (n_rows, half), generator=torch.Generator().manual_seed(seed))
    return torch.cat([torch.full((n_rows, 1), 3), x, x], 1)


def _suite(d_vocab: int) -> list[probes.Probe]:
    labels = torch.arange(d_vocab) % 4
    labels[:3] = -1
    labels[10:14] = -1  # some tokens without a topic
    return [probes.HeadScoreProbe(), probes.GeneralizedInductionProbe(3), probes.GeneralizedInductionProbe(4),
            probes.TopicAttentionProbe(labels)]


@pytest.mark.parametrize("kind", checkpoint_kinds())
def test_the_suite_from_term_sums_equals_the_suite_on_whole_patterns(checkpoints, kind, monkeypatch):
    model = checkpoints[kind]
    info = probes.ModelInfo.of(model)
    batches: list = [_repeated(seed=s) for s in range(2)]
    if kind == "roberta":  # a padded row
        mask = torch.ones(2, 61, dtype=torch.long)
        mask[1, 50:] = 0
        tokens = batches[0].clone()
        tokens[1, 50:] = 1
        batches[0] = TokenBatch(tokens, mask.bool(), mask)
    whole = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=None)

    folds = []
    original = attention_terms.TermsPlan.fold
    monkeypatch.setattr(attention_terms.TermsPlan, "fold", lambda plan, layer: (folds.append(layer.layer),
                                                                                 original(plan, layer)))

    def per_probe_fold(*args, **kwargs):
        raise AssertionError("a probe folded a layer itself where the plan should have")

    monkeypatch.setattr(probes.LayerwiseProbe, "_update_attention", per_probe_fold)
    planned = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=0)
    assert folds == list(range(info.n_layers)) * len(batches)
    for a, b in zip(planned, whole):
        assert results_close(a, b, rtol=1e-4, atol=1e-6), type(a).__name__
    topic = planned[-1]
    assert topic.pairs["same_token"] > 50 and topic.pairs["same_topic"] > 50  # the terms had entries to get wrong
    assert planned[0].rows_with_target["induction"] > 50


def test_key_mask_terms_list_each_masks_entries_under_its_own_sum():
    pairs = (torch.tensor([0, 0, 1]), torch.tensor([2, 3, 3]), torch.tensor([1, 2, 0]))
    first = probes.core.pattern_sums.KeyMask.from_pairs(pairs, 2, 200)
    second = probes.core.pattern_sums.KeyMask.from_pairs((pairs[0][:1], pairs[1][:1], pairs[2][:1]), 2, 200)
    terms = attention_terms.key_mask_terms([first, second])
    assert terms is not None and terms.n_sums == 2
    assert terms.entry_sums.tolist() == [0, 0, 0, 1]
    assert torch.stack(terms.entries).T.tolist() == [[0, 2, 1], [0, 3, 2], [1, 3, 0], [0, 2, 1]]
    dense = probes.core.pattern_sums.KeyMask.of(torch.ones(1, 4, 4, dtype=torch.bool))
    assert attention_terms.key_mask_terms([first, dense]) is None  # dense sequences are summed from rows


def test_entries_gathered_in_many_small_chunks_give_the_same_sums(checkpoints, monkeypatch):
    """A chunk budget of a few entries: every distinct entry gathered once across chunks, duplicates spread back."""
    model = checkpoints["llama"]
    info = probes.ModelInfo.of(model)
    batches = [_repeated(seed=3)]
    whole = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=None)
    chunks = []
    original = attention_terms.TermsPlan._chunked
    monkeypatch.setattr(runner, "_entry_chunk_bytes", lambda model, batch: 4096)
    monkeypatch.setattr(attention_terms.TermsPlan, "_chunked",
                        lambda plan, layer: chunks.append(original(plan, layer)) or chunks[-1])
    planned = probes.run_probes(model, _suite(info.d_vocab), batches, progress=False, max_pattern_bytes=0)
    assert len(chunks) == 1 and len(chunks[0]) > 10  # one plan, many chunks
    assert any(chunk.local is not None for chunk in chunks[0])  # entries shared by several sums
    for a, b in zip(planned, whole):
        assert results_close(a, b, rtol=1e-4, atol=1e-6), type(a).__name__
