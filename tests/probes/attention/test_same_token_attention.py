"""SameTokenAttentionProbe: the reference code's count (self included), nested loops, known answers, merge."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from transformer_lens import HookedRootModule

from probes import run_probes
from probes.attention.same_token_attention import SameTokenAttention, SameTokenAttentionProbe, same_token_attention
from probes.attention.topic_attention import TopicAttentionProbe
from probes.core.errors import InputError
from probes.core.result import ProbeResult, results_close
from tests.hooked_models import pattern_blocks

TOPICS = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, -1, -1])   # ids 8, 9: no topic (like [MASK], [PAD])


@dataclass
class _Cfg:
    n_layers: int = 2
    n_heads: int = 2
    n_ctx: int = 16
    d_vocab: int = 10
    model_name: str = "patterns"
    attention_dir: str = "bidirectional"


class PatternModel(HookedRootModule):
    """Attention = softmax(S[l, h, tok_q, tok_k] + P[l, h, q, k]) with fixed random S, P; or a fixed rule."""

    def __init__(self, rule: str = "random", causal: bool = False) -> None:
        super().__init__()
        self.cfg = _Cfg(attention_dir="causal" if causal else "bidirectional")
        g = torch.Generator().manual_seed(0)
        self.S = torch.randn(2, 2, 10, 10, generator=g) * 2
        self.P = torch.randn(2, 2, 16, 16, generator=g)
        self.rule = rule
        self.blocks = pattern_blocks(2)
        self.setup()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        for layer, block in enumerate(self.blocks):
            if self.rule == "self":
                pattern = torch.eye(n).expand(b, 2, n, n)
            elif self.rule == "uniform":
                pattern = torch.full((b, 2, n, n), 1.0 / n)
            else:
                scores = self.S[layer][:, tokens[:, :, None], tokens[:, None, :]].permute(1, 0, 2, 3)
                scores = scores + self.P[layer, :, :n, :n]
                if self.cfg.attention_dir == "causal":
                    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
                pattern = torch.softmax(scores, -1)
            block.attn.hook_pattern(pattern)
        return tokens.float()


def nested_loop_reference(model: PatternModel, tokens: torch.Tensor, causal: bool = False) -> dict[str, torch.Tensor]:
    """The reference code's loop: a pair of labelled positions is same-token when i == j or tok[i] == tok[j]."""
    _, cache = model.run_with_cache(tokens)
    sums = {kind: torch.zeros(2, 2, dtype=torch.float64) for kind in ("self", "other")}
    counts = {"self": 0, "other": 0}
    for b in range(tokens.shape[0]):
        for i in range(tokens.shape[1]):
            for j in range(tokens.shape[1]):
                if TOPICS[tokens[b, i]] < 0 or TOPICS[tokens[b, j]] < 0 or (causal and j > i):
                    continue
                if i == j or tokens[b, i] == tokens[b, j]:
                    kind = "self" if i == j else "other"
                    counts[kind] += 1
                    for layer in range(2):
                        sums[kind][layer] += cache[f"blocks.{layer}.attn.hook_pattern"][b, :, i, j].double()
    return {"self": sums["self"] / counts["self"], "other": sums["other"] / counts["other"],
            "all": (sums["self"] + sums["other"]) / (counts["self"] + counts["other"]),
            "pairs": torch.tensor([counts["self"], counts["other"]])}


TOKENS = torch.tensor([[0, 1, 0, 3, 8, 3, 3, 6, 9, 7, 0, 2], [5, 5, 4, 9, 9, 1, 2, 2, 7, 6, 6, 0]])


@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_reference_codes_nested_loop(causal):
    model = PatternModel(causal=causal)
    result = same_token_attention(model, [TOKENS[:1], TOKENS[1:]], TOPICS)
    expected = nested_loop_reference(model, TOKENS, causal)
    torch.testing.assert_close(result.mean.double(), expected["all"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(result.mean_self.double(), expected["self"], atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(result.mean_other.double(), expected["other"], atol=1e-6, rtol=1e-6)
    assert [result.pairs["self"], result.pairs["other"]] == expected["pairs"].tolist()
    assert result.pairs["all"] == result.pairs["self"] + result.pairs["other"]


def test_other_positions_part_equals_topic_attentions_same_token():
    model = PatternModel()
    ours, topic = run_probes(model, [SameTokenAttentionProbe(TOPICS), TopicAttentionProbe(TOPICS)], [TOKENS],
                             progress=False)
    torch.testing.assert_close(ours.mean_other, topic.mean["same_token"])
    assert ours.pairs["other"] == topic.pairs["same_token"]
    assert ours.chance["other"] == pytest.approx(topic.chance["same_token"])


def test_known_answers_self_attention_and_uniform_attention():
    tokens = torch.tensor([[0, 0, 3, 8]])   # labelled: positions 0, 1, 2; self pairs 3, other pairs 2 (0-1 both ways)
    self_only = same_token_attention(PatternModel("self"), [tokens], TOPICS)
    assert (self_only.pairs["self"], self_only.pairs["other"]) == (3, 2)
    assert torch.equal(self_only.mean_self, torch.ones(2, 2)) and torch.equal(self_only.mean_other, torch.zeros(2, 2))
    torch.testing.assert_close(self_only.mean, torch.full((2, 2), 3 / 5))
    uniform = same_token_attention(PatternModel("uniform"), [tokens], TOPICS)
    torch.testing.assert_close(uniform.mean, torch.full((2, 2), 0.25))
    assert uniform.chance == {"self": 0.25, "other": 0.25, "all": 0.25}


def test_merge_is_exact_and_the_result_round_trips(tmp_path):
    model = PatternModel()
    whole = same_token_attention(model, [TOKENS[:1], TOKENS[1:]], TOPICS)
    first, second = SameTokenAttentionProbe(TOPICS), SameTokenAttentionProbe(TOPICS)
    run_probes(model, [first], [TOKENS[:1]], progress=False)
    run_probes(model, [second], [TOKENS[1:]], progress=False)
    assert results_close(first.merge(second).compute(), whole, atol=1e-6, rtol=1e-6)
    loaded = ProbeResult.load(whole.save(tmp_path / "r"))
    assert isinstance(loaded, SameTokenAttention) and results_close(loaded, whole)
    assert list(loaded.to_dataframe().columns)[:5] == ["layer", "head", "same_token", "self", "other"]


def test_labels_must_cover_the_vocabulary():
    with pytest.raises(InputError, match="label"):
        same_token_attention(PatternModel(), [TOKENS], TOPICS[:8])
