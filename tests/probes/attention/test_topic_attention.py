"""TopicAttentionProbe: nested-loop reference, known answers, merge, causal/bidirectional, errors."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest
import torch
from transformer_lens import HookedRootModule

from probes import InputError, ModelInfo, TokenBatch, run_probes
from probes.attention.topic_attention import TopicAttention, TopicAttentionProbe, topic_attention
from probes.core.errors import ConfigError, ProbeStateError
from probes.core.result import ProbeResult, results_close
from tests.hooked_models import pattern_blocks


@dataclass
class _Cfg:
    n_layers: int = 2
    n_heads: int = 3
    n_ctx: int = 32
    d_vocab: int = 12
    model_name: str = "random-attention"
    attention_dir: str = "bidirectional"


class RandomAttentionModel(HookedRootModule):
    """Attention = softmax(S[l, h, tok_q, tok_k] + P[l, h, q, k]) with fixed random S, P (optionally causal)."""

    def __init__(self, cfg: _Cfg, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        g = torch.Generator().manual_seed(seed)
        self.S = torch.randn(cfg.n_layers, cfg.n_heads, cfg.d_vocab, cfg.d_vocab, generator=g) * 2
        self.P = torch.randn(cfg.n_layers, cfg.n_heads, cfg.n_ctx, cfg.n_ctx, generator=g)
        self.blocks = pattern_blocks(cfg.n_layers)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        for layer, block in enumerate(self.blocks):
            scores = self.S[layer][:, tokens[:, :, None], tokens[:, None, :]].permute(1, 0, 2, 3)
            scores = scores + self.P[layer, :, :n, :n]
            if self.cfg.attention_dir == "causal":
                scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
            block.attn.hook_pattern(torch.softmax(scores, -1))
        return tokens.float()


class RuleModel(HookedRootModule):
    """One layer; head 0 uniform over same-topic keys other than itself (else itself); head 1 uniform."""

    def __init__(self, topics: torch.Tensor, n_ctx: int = 16) -> None:
        super().__init__()
        self.cfg = _Cfg(n_layers=1, n_heads=2, n_ctx=n_ctx, d_vocab=len(topics), model_name="rule")
        self.topics = topics
        self.blocks = pattern_blocks(1)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        t = self.topics[tokens]
        same = (t[:, :, None] == t[:, None, :]) & ~torch.eye(n, dtype=torch.bool)
        eye = torch.eye(n).expand(b, n, n)
        head0 = torch.where(same.any(-1, keepdim=True), same / same.sum(-1, keepdim=True).clamp(min=1), eye)
        head1 = torch.full((b, n, n), 1.0 / n)
        self.blocks[0].attn.hook_pattern(torch.stack([head0, head1], 1))
        return tokens.float()


def reference(model, batches, token_topics, causal: bool, valids=None):
    """Nested loops over (layer, head, batch, query, key): sums per category and chance per pair."""
    info = ModelInfo.of(model)
    sums = {k: torch.zeros(info.n_layers, info.n_heads, dtype=torch.float64)
            for k in ("same_topic", "different_topic", "same_token")}
    counts = dict.fromkeys(sums, 0)
    chance = dict.fromkeys(sums, 0.0)
    for index, tokens in enumerate(batches):
        valid = valids[index] if valids else torch.ones_like(tokens, dtype=torch.bool)
        _, cache = model.run_with_cache(tokens)
        for b in range(tokens.shape[0]):
            n = tokens.shape[1]
            for q in range(n):
                tq = int(token_topics[tokens[b, q]])
                if tq < 0 or not valid[b, q]:
                    continue
                keys = range(q + 1) if causal else range(n)
                for k in keys:
                    tk = int(token_topics[tokens[b, k]])
                    if k == q or tk < 0 or not valid[b, k]:
                        continue
                    if tokens[b, k] == tokens[b, q]:
                        kind = "same_token"
                    elif tk == tq:
                        kind = "same_topic"
                    else:
                        kind = "different_topic"
                    counts[kind] += 1
                    chance[kind] += 1.0 / len(keys)
                    for layer in range(info.n_layers):
                        pattern = cache[f"blocks.{layer}.attn.hook_pattern"]
                        for head in range(info.n_heads):
                            sums[kind][layer, head] += float(pattern[b, head, q, k])
    return {k: sums[k] / counts[k] for k in sums}, {k: chance[k] / counts[k] for k in sums}, counts


TOPICS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, -1, -1, 0])  # ids 9, 10 have no topic


def _batches(seed: int = 0, n: int = 3):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 12, (4, 10), generator=g) for _ in range(n)]


@pytest.mark.parametrize("direction", ["bidirectional", "causal"])
def test_matches_nested_loop_reference(direction):
    model = RandomAttentionModel(_Cfg(attention_dir=direction))
    batches = _batches()
    result = topic_attention(model, batches, TOPICS)
    means, chance, counts = reference(model, batches, TOPICS, causal=direction == "causal")
    for kind in means:
        assert result.pairs[kind] == counts[kind]
        torch.testing.assert_close(result.mean[kind].double(), means[kind], atol=1e-6, rtol=1e-6)
        assert result.chance[kind] == pytest.approx(chance[kind], rel=1e-12)
    torch.testing.assert_close(result.ratio.double(), means["same_topic"] / means["different_topic"],
                               atol=1e-6, rtol=1e-5)


def test_known_answer_same_topic_head_and_uniform_head():
    tokens = torch.tensor([[0, 1, 3, 4, 6, 0, 9, 2, 7, 5]])
    result = topic_attention(RuleModel(TOPICS), [tokens], TOPICS)
    # head 0 puts no mass on other topics: different-topic attention is exactly 0.
    assert float(result.mean["different_topic"][0, 0]) == 0.0
    assert float(result.mean["same_topic"][0, 0]) > 0.0
    # head 1 is uniform over the 10 positions: every mean equals chance = 1/10 and the ratio is 1.
    for kind in ("same_topic", "different_topic", "same_token"):
        assert float(result.mean[kind][0, 1]) == pytest.approx(0.1)
        assert result.chance[kind] == pytest.approx(0.1)
    assert float(result.ratio[0, 1]) == pytest.approx(1.0)
    assert result.chance_ratio == pytest.approx(1.0)
    # by_topic of the uniform head is 0.1 wherever a pair exists.
    seen = result.by_topic_pairs > 0
    torch.testing.assert_close(result.by_topic[0, 1][seen], torch.full((int(seen.sum()),), 0.1))
    assert torch.isnan(result.by_topic[0, 0][~seen]).all()
    # hand count: words 0,1,2(topic0, 0 twice) 3,4,5(topic1) 6,7(topic2); 9 unlabelled.
    assert result.pairs["same_token"] == 2  # (0 at pos 0, 0 at pos 5) both ways


def test_merge_of_halves_equals_whole_and_save_load(tmp_path):
    model = RandomAttentionModel(_Cfg())
    batches = _batches(1, 4)
    whole = topic_attention(model, batches, TOPICS)
    first, second = TopicAttentionProbe(TOPICS), TopicAttentionProbe(TOPICS)
    run_probes(model, [first], batches[:2], progress=False)
    run_probes(model, [second], batches[2:], progress=False)
    merged = first.merge(second).compute()
    assert results_close(merged, whole, atol=1e-6, rtol=1e-6)
    loaded = ProbeResult.load(whole.save(tmp_path / "topic"))
    assert isinstance(loaded, TopicAttention) and results_close(loaded, whole)
    frame = whole.to_dataframe()
    assert len(frame) == 6 and {"ratio", "same_topic", "chance_ratio"} <= set(frame.columns)


def test_has_topic_mask_and_invalid_positions_are_excluded():
    model = RandomAttentionModel(_Cfg())
    tokens = _batches(2, 1)[0]
    has_topic = torch.ones(12, dtype=torch.bool)
    has_topic[[0, 11]] = False
    masked = topic_attention(model, [tokens], TOPICS, has_topic=has_topic)
    relabelled = TOPICS.clone()
    relabelled[[0, 11]] = -1
    assert results_close(masked, topic_attention(model, [tokens], relabelled))
    # positions marked invalid in a TokenBatch are neither queries nor keys
    valid = torch.ones_like(tokens, dtype=torch.bool)
    valid[:, 5:] = False
    truncated = topic_attention(model, [TokenBatch(tokens, valid)], TOPICS)
    means, _, counts = reference(model, [tokens], TOPICS, causal=False, valids=[valid])
    assert truncated.pairs == counts
    for kind in means:
        torch.testing.assert_close(truncated.mean[kind].double(), means[kind], atol=1e-6, rtol=1e-6)


def test_bad_labels_raise_clear_errors():
    with pytest.raises(ConfigError, match="1-d integer tensor"):
        TopicAttentionProbe(torch.tensor([0.5, 1.0]))
    with pytest.raises(ConfigError, match="no token a topic"):
        TopicAttentionProbe(torch.full((12,), -1))
    with pytest.raises(ConfigError, match=">= 0, or -1"):
        TopicAttentionProbe(torch.tensor([0, -3]))
    with pytest.raises(ConfigError, match="same shape"):
        TopicAttentionProbe(TOPICS, has_topic=torch.ones(3, dtype=torch.bool))
    with pytest.raises(InputError, match="label"):
        topic_attention(RandomAttentionModel(_Cfg()), _batches(), TOPICS[:5])


def test_probes_with_different_labels_do_not_merge():

    other = TOPICS.clone()
    other[0] = 2
    with pytest.raises(ProbeStateError):
        TopicAttentionProbe(TOPICS).merge(TopicAttentionProbe(other))


@pytest.mark.parametrize("direction", ["bidirectional", "causal"])
def test_permutation_null_equals_rerunning_with_each_shuffled_labelling(direction):
    from probes.stats.nulls import label_permutations

    model = RandomAttentionModel(_Cfg(attention_dir=direction))
    batches = _batches(2, 3)
    result = topic_attention(model, batches, TOPICS, n_permutations=7, permutation_seed=3)
    assert torch.equal(result.mean["same_topic"], topic_attention(model, batches, TOPICS).mean["same_topic"])
    for p, labels in enumerate(label_permutations(TOPICS, 7, seed=3)):
        # topic sizes kept, unlabelled ids untouched
        assert torch.equal(torch.bincount(labels[labels >= 0]), torch.bincount(TOPICS[TOPICS >= 0]))
        assert torch.equal(labels < 0, TOPICS < 0)
        again = topic_attention(model, batches, labels)
        for kind in ("same_topic", "different_topic"):
            torch.testing.assert_close(result.null_mean[kind][p], again.mean[kind], atol=1e-6, rtol=1e-6)
    assert result.null_ratio.shape == (7, 2, 3)


@pytest.mark.parametrize("direction", ["bidirectional", "causal"])
def test_the_null_summed_per_vocabulary_cell_equals_the_null_scored_pair_by_pair(direction, monkeypatch):
    """A small labelled vocabulary sums the pairs per (query entry, key entry) cell before permuting; with the
    budget too small for that, every pair is scored per permutation: the same null either way (float64 sums in
    another order), and the cells are what the small vocabulary used."""
    module = importlib.import_module("probes.attention.topic_attention")  # the package's name is the function's
    model = RandomAttentionModel(_Cfg(attention_dir=direction))
    batches = _batches(2, 3)
    by_cell = TopicAttentionProbe(TOPICS, n_permutations=9, permutation_seed=1)
    run_probes(model, [by_cell], batches, progress=False)
    assert by_cell._permuted_topics is not None
    monkeypatch.setattr(module, "NULL_CHUNK_ENTRIES", 64)
    by_pair = TopicAttentionProbe(TOPICS, n_permutations=9, permutation_seed=1)
    run_probes(model, [by_pair], batches, progress=False)
    assert by_pair._permuted_topics is None
    cell, pair = by_cell.compute(), by_pair.compute()
    for kind in ("same_topic", "different_topic"):
        torch.testing.assert_close(cell.null_mean[kind], pair.null_mean[kind], atol=1e-12, rtol=1e-12)
    assert torch.equal(cell.mean["same_topic"], pair.mean["same_topic"])


def test_permutation_null_survives_merge_and_save(tmp_path):
    model = RandomAttentionModel(_Cfg())
    batches = _batches(1, 4)
    whole = topic_attention(model, batches, TOPICS, n_permutations=5)
    first, second = TopicAttentionProbe(TOPICS, n_permutations=5), TopicAttentionProbe(TOPICS, n_permutations=5)
    run_probes(model, [first], batches[:2], progress=False)
    run_probes(model, [second], batches[2:], progress=False)
    assert results_close(first.merge(second).compute(), whole, atol=1e-6, rtol=1e-6)
    assert results_close(ProbeResult.load(whole.save(tmp_path / "null")), whole)
    with pytest.raises(ConfigError, match="n_permutations"):
        TopicAttentionProbe(TOPICS, n_permutations=-1)
    with pytest.raises(InputError, match="no permutation null"):
        _ = topic_attention(model, batches, TOPICS).null_ratio


def test_a_null_drawn_in_groups_uses_the_permutations_of_one_pass():
    model = RandomAttentionModel(_Cfg())
    batches = _batches(2, 3)
    whole = topic_attention(model, batches, TOPICS, n_permutations=12, permutation_seed=4)
    parts = []
    for start, stop in ((0, 2), (2, 7), (7, 12)):
        probe = TopicAttentionProbe(TOPICS, n_permutations=stop - start, permutation_seed=4, permutation_start=start)
        run_probes(model, [probe], batches, progress=False)
        parts.append(probe.compute().null_ratio)
    torch.testing.assert_close(torch.cat(parts), whole.null_ratio, atol=1e-6, rtol=1e-6)
    later = TopicAttentionProbe(TOPICS, n_permutations=5, permutation_seed=4, permutation_start=7)
    with pytest.raises(ProbeStateError):  # other permutations: their sums must not be added
        TopicAttentionProbe(TOPICS, n_permutations=5, permutation_seed=4).merge(later)
    with pytest.raises(ConfigError, match="permutation_start=0"):
        TopicAttentionProbe(TOPICS, n_permutations=5, null="distance", permutation_start=5)


class RecencyModel(HookedRootModule):
    """One causal layer; head 0 attends by distance only (weight ~ exp(-distance)), head 1 uniformly over the
    same-topic keys other than itself when there are any (a topic head), else over every visible key."""

    def __init__(self, topics: torch.Tensor, n_ctx: int = 48) -> None:
        super().__init__()
        self.cfg = _Cfg(n_layers=1, n_heads=2, n_ctx=n_ctx, d_vocab=len(topics), model_name="recency",
                        attention_dir="causal")
        self.topics = topics
        self.blocks = pattern_blocks(1)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        n = tokens.shape[1]
        position = torch.arange(n)
        visible = position[:, None] >= position[None, :]
        recency = torch.softmax((-(position[:, None] - position[None, :]).float()).masked_fill(~visible, -1e9), -1)
        topic = self.topics[tokens]
        same = (topic[:, :, None] == topic[:, None, :]) & (topic[:, :, None] >= 0) & visible & ~torch.eye(n).bool()
        uniform = visible.float().expand(len(tokens), n, n)
        chosen = torch.where(same.any(-1, keepdim=True), same.float(), uniform)
        pattern = torch.stack([recency.expand(len(tokens), n, n), chosen / chosen.sum(-1, keepdim=True)], 1)
        self.blocks[0].attn.hook_pattern(pattern)
        return tokens.float()


def _clustered_batches(n_batches: int = 4, seed: int = 0) -> list[torch.Tensor]:
    """Rows of runs of one topic's words (3 to 6 tokens each), as topic-coherent text has."""
    g = torch.Generator().manual_seed(seed)
    by_topic = [torch.tensor([0, 1, 2, 11]), torch.tensor([3, 4, 5]), torch.tensor([6, 7, 8])]
    batches = []
    for _ in range(n_batches):
        rows = []
        for _ in range(4):
            row: list[int] = []
            while len(row) < 48:
                words = by_topic[int(torch.randint(0, 3, (1,), generator=g))]
                row += words[torch.randint(0, len(words), (int(torch.randint(3, 7, (1,), generator=g)),),
                                           generator=g)].tolist()
            rows.append(row[:48])
        batches.append(torch.tensor(rows))
    return batches


def test_the_distance_null_keeps_each_strata_same_topic_pairs():
    probe = TopicAttentionProbe(TOPICS, n_permutations=50, null="distance")
    tokens = _clustered_batches(1)[0]
    topic = TOPICS[tokens]
    n = tokens.shape[1]
    visible = torch.ones(n, n).tril().bool() & ~torch.eye(n).bool()
    labelled = (topic[:, :, None] >= 0) & (topic[:, None, :] >= 0) & visible
    distinct = labelled & (tokens[:, :, None] != tokens[:, None, :])
    same = distinct & (topic[:, :, None] == topic[:, None, :])
    (b, q, k), chunks = probe._distance_null_pairs(same, distinct)
    flags = torch.cat(chunks, 1)  # [permutation pair]
    assert flags.shape == (50, int(distinct.sum())) and bool((q - k >= 1).all())
    observed = same[b, q, k]
    bucket = torch.floor(torch.log2(q.double() + 1)).long()
    for row in b.unique():
        for d in (q - k).unique():
            for u in bucket.unique():
                at = (b == row) & ((q - k) == d) & (bucket == u)
                assert bool((flags[:, at].sum(1) == observed[at].sum()).all())  # each stratum keeps its count
    assert float((flags != observed).double().mean()) > 0  # and the flags really move within distances


def test_a_head_that_reads_distance_only_lands_inside_the_distance_null_and_a_topic_head_does_not():
    model = RecencyModel(TOPICS)
    batches = _clustered_batches()
    by_vocabulary = topic_attention(model, batches, TOPICS, n_permutations=200, permutation_seed=1)
    by_distance = topic_attention(model, batches, TOPICS, n_permutations=200, permutation_seed=1, null="distance")
    assert torch.equal(by_distance.ratio, by_vocabulary.ratio)  # the statistic is the same, only its null differs
    recency, topic = by_distance.ratio[0, 0], by_distance.ratio[0, 1]
    assert float(recency) > 1.5  # topic words sit close together, and head 0 reads close keys
    vocabulary_high = torch.quantile(by_vocabulary.null_ratio[:, 0, 0], 0.975)
    low, high = torch.quantile(by_distance.null_ratio[:, 0, 0], torch.tensor([0.025, 0.975], dtype=torch.float32))
    assert float(recency) > float(vocabulary_high)  # the vocabulary null calls the recency head topical
    assert float(low) <= float(recency) <= float(high)  # the distance null does not
    assert float(topic) > float(torch.quantile(by_distance.null_ratio[:, 0, 1], 0.975)) * 2  # a real topic head


def test_an_unknown_null_is_refused():
    with pytest.raises(ConfigError, match="null must be one of vocabulary, distance"):
        TopicAttentionProbe(TOPICS, n_permutations=5, null="tokens")
