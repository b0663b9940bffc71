"""Generalized induction score: nested-loop reference, n = 2 parity with head_scores, known answers, merge."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from transformer_lens import HookedRootModule

import probes
from probes.attention.generalized_induction import GeneralizedInductionProbe
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError
from probes.core.model_info import ModelInfo
from probes.core.result import results_close
from tests.hooked_models import OracleModel, pattern_blocks


def matches(tokens, valid, b, q, k, distances) -> bool:
    """``k`` is in ``T_D(q)``, from the definition: for every ``j`` in ``distances``, the keys' and the queries'
    parents ``tok[k - j]`` and ``tok[q + 1 - j]`` are valid, inside the row and equal."""
    for j in distances:
        if k - j < 0 or q + 1 - j < 0:
            return False
        if not (valid[b, k] and valid[b, k - j] and valid[b, q + 1 - j]):
            return False
        if tokens[b, k - j] != tokens[b, q + 1 - j]:
            return False
    return True


def hand_parent_mask(tokens: torch.Tensor, valid: torch.Tensor, distances) -> torch.Tensor:
    """``mask[b, q, k]`` by nested loops over :func:`matches` (causal: ``k <= q``, both valid), not by the probe's
    own ``parent_match_mask``."""
    n_batch, n_pos = tokens.shape
    mask = torch.zeros(n_batch, n_pos, n_pos, dtype=torch.bool)
    for b in range(n_batch):
        for q in range(n_pos):
            for k in range(q + 1):
                mask[b, q, k] = bool(valid[b, q]) and matches(tokens, valid, b, q, k, distances)
    return mask


@dataclass
class RuleConfig:
    n_layers: int = 2
    n_heads: int = 2
    n_ctx: int = 64
    d_vocab: int = 3
    model_name: str = "trigram-rules"
    attention_dir: str = "causal"


class TrigramRuleModel(HookedRootModule):
    """Layer 0: head 0 previous token, head 1 two back. Layer 1: head 0 uniform over keys whose two
    preceding tokens match the query's last two (else itself: a perfect trigram head); head 1 uniform
    over keys whose preceding token matches the query's token (a bigram induction head)."""

    def __init__(self) -> None:
        super().__init__()
        self.cfg = RuleConfig()
        self.blocks = pattern_blocks(2)
        self.setup()

    @staticmethod
    def rows(mask: torch.Tensor) -> torch.Tensor:
        n = mask.shape[-1]
        eye = torch.eye(n).expand_as(mask)
        has = mask.sum(-1, keepdim=True) > 0
        return torch.where(has, mask / mask.sum(-1, keepdim=True).clamp(min=1), eye)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        b, n = tokens.shape
        shift = [torch.diag(torch.ones(n - d), -d) for d in (1, 2)]
        for s in shift:
            s[: (1 if s is shift[0] else 2), :] = 0
            s[0, 0] = 1
        shift[1][1, 0] = 1
        layer0 = torch.stack([s.expand(b, n, n) for s in shift], 1)
        valid = torch.ones_like(tokens, dtype=torch.bool)
        trigram = hand_parent_mask(tokens, valid, (1, 2)).float()
        bigram = hand_parent_mask(tokens, valid, (1,)).float()
        layer1 = torch.stack([self.rows(trigram), self.rows(bigram)], 1)
        self.blocks[0].attn.hook_pattern(layer0)
        self.blocks[1].attn.hook_pattern(layer1)
        return torch.zeros(b, n, 3)


def reference(patterns: list[torch.Tensor], tokens: torch.Tensor, valid: torch.Tensor, distances):
    """Nested loops over the definitions in probes.attention.generalized_induction."""
    n_layers, (n_batch, n_heads, n_pos, _) = len(patterns), patterns[0].shape
    mass = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    last = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    rows, chance, last_chance = 0, 0.0, 0.0

    for b in range(n_batch):
        for q in range(n_pos):
            if not valid[b, q]:
                continue
            targets = [k for k in range(q + 1) if matches(tokens, valid, b, q, k, distances)]
            if not targets:
                continue
            only_last = [k for k in range(q + 1) if matches(tokens, valid, b, q, k, (1,)) and k not in targets]
            rows += 1
            chance += len(targets) / (q + 1)
            last_chance += len(only_last) / (q + 1)
            for layer in range(n_layers):
                for h in range(n_heads):
                    mass[layer, h] += sum(float(patterns[layer][b, h, q, k]) for k in targets)
                    last[layer, h] += sum(float(patterns[layer][b, h, q, k]) for k in only_last)
    return mass / rows, last / rows, chance / rows, last_chance / rows


def run(model, batches, n=3):
    (result,) = probes.run_probes(model, [GeneralizedInductionProbe(n)], batches, progress=False)
    return result


def test_perfect_trigram_head_scores_one_and_puts_nothing_on_last_token_only_keys():
    tokens = torch.randint(0, 3, (4, 40), generator=torch.Generator().manual_seed(0))
    result = run(TrigramRuleModel(), [tokens])
    assert float(result.scores[1, 0]) == pytest.approx(1.0, abs=1e-6)
    assert float(result.last_token_only[1, 0]) == pytest.approx(0.0, abs=1e-6)
    assert float(result.last_token_only[1, 1]) > result.last_token_only_chance  # the bigram head
    assert 0.08 < result.chance < 0.25  # about 1/9 for uniform iid tokens over 3 ids
    assert result.best_head() == (1, 0, pytest.approx(1.0, abs=1e-6))
    assert result.best_head(layer=0)[0] == 0


@pytest.mark.parametrize("n", [2, 3, 4])
def test_matches_the_nested_loop_reference_with_invalid_positions(n):
    model = TrigramRuleModel()
    gen = torch.Generator().manual_seed(n)
    tokens = torch.randint(0, 3, (3, 16), generator=gen)
    valid = torch.rand(3, 16, generator=gen) > 0.15
    result = run(model, [TokenBatch(tokens, valid)], n=n)
    _, cache = model.run_with_cache(tokens)
    patterns = [cache[f"blocks.{layer}.attn.hook_pattern"] for layer in range(2)]
    mass, last, chance, last_chance = reference(patterns, tokens, valid, tuple(range(1, n)))
    assert torch.allclose(result.scores.double(), mass, atol=1e-6)
    assert torch.allclose(result.last_token_only.double(), last, atol=1e-6)
    assert result.chance == pytest.approx(chance, abs=1e-12)
    assert result.last_token_only_chance == pytest.approx(last_chance, abs=1e-12)


def test_n2_is_exactly_the_ordinary_induction_score():
    model = OracleModel()
    gen = torch.Generator().manual_seed(1)
    batches = [TokenBatch(torch.randint(0, 6, (3, 25), generator=gen), torch.rand(3, 25, generator=gen) > 0.1)
               for _ in range(2)]
    ours = run(model, batches, n=2)
    (heads,) = probes.run_probes(model, [probes.HeadScoreProbe(["induction"])], batches, progress=False)
    assert torch.allclose(ours.scores, heads.scores["induction"], atol=1e-6)  # summation order only
    assert ours.chance == pytest.approx(heads.chance["induction"], abs=1e-12)
    assert ours.rows_with_target == heads.rows_with_target["induction"]
    assert torch.all(ours.last_token_only == 0)  # with n = 2 every last-token match is a full match


def test_merging_two_halves_equals_the_whole(tmp_path):
    model = TrigramRuleModel()
    tokens = torch.randint(0, 3, (6, 30), generator=torch.Generator().manual_seed(2))
    info = ModelInfo.of(model)
    whole = run(model, [tokens[:3], tokens[3:]])
    a, b = GeneralizedInductionProbe(3), GeneralizedInductionProbe(3)
    probes.feed_probes(model, [a], [tokens[:3]], progress=False)
    probes.feed_probes(model, [b], [tokens[3:]], progress=False)
    merged = a.merge(b).compute()
    assert results_close(merged, whole, atol=1e-6)  # float32 results
    merged.save(tmp_path / "r")
    assert results_close(probes.ProbeResult.load(tmp_path / "r"), merged)
    assert set(merged.to_dataframe().columns) >= {"layer", "head", "score", "chance", "last_token_only"}
    assert info.n_heads == 2


def test_bad_settings_raise():
    with pytest.raises(ConfigError, match="n"):
        GeneralizedInductionProbe(1)
    with pytest.raises(ConfigError, match="distances"):
        GeneralizedInductionProbe(distances=[0, 1])


@pytest.mark.slow
def test_runs_on_a_pretrained_lm_over_natural_text(smollm2):
    """SmolLM2-135M on WikiText-2: n = 2 equals the ordinary induction score; the best head is far above chance."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[4] / "shared" / "data" / "wikitext-2" / "wiki.test.tokens"
    if not path.is_file():
        pytest.skip(f"{path} is not available")
    ids = smollm2.tokenizer(path.read_text(encoding="utf-8")[:20000])["input_ids"]
    tokens = torch.tensor(ids[: 4 * 128]).view(4, 128)
    bigram, trigram, heads = probes.run_probes(
        smollm2, [GeneralizedInductionProbe(2), GeneralizedInductionProbe(3), probes.HeadScoreProbe(["induction"])],
        tokens.split(2), progress=False)
    assert torch.allclose(bigram.scores, heads.scores["induction"], atol=1e-5)
    assert bigram.chance == pytest.approx(heads.chance["induction"])
    layer, head, best = bigram.best_head()
    assert best > 10 * bigram.chance
    assert trigram.rows_with_target < bigram.rows_with_target
    assert float(trigram.scores[layer, head]) > 10 * trigram.chance
