"""Head scores: known answers, a nested-loop reference, parity with TransformerLens's detect_head."""

from __future__ import annotations

import pytest
import torch
from transformer_lens.head_detector import (
    compute_head_attention_similarity_score,
    get_duplicate_token_head_detection_pattern,
    get_induction_head_detection_pattern,
    get_previous_token_head_detection_pattern,
)

import probes
from probes import HEAD_SCORE_KINDS, HeadScoreProbe, ModelInfo, TokenBatch
from probes.attention import target_mask
from probes.core import pattern_hook
from probes.core.result import results_close
from tests.hooked_models import OracleConfig, OracleModel

TL_DETECTION = {
    "induction": get_induction_head_detection_pattern,
    "duplicate_token": get_duplicate_token_head_detection_pattern,
    "previous_token": get_previous_token_head_detection_pattern,
}


def reference_scores(patterns: list[torch.Tensor], tokens: torch.Tensor, valid: torch.Tensor,
                     kind: str) -> torch.Tensor:
    """Nested loops straight from the definition in probes/attention/head_scores.py."""
    n_layers, (n_batch, n_heads, n_pos, _) = len(patterns), patterns[0].shape
    total = torch.zeros(n_layers, n_heads, dtype=torch.float64)
    rows = 0
    for b in range(n_batch):
        for q in range(n_pos):
            if not valid[b, q]:
                continue
            targets = []
            for k in range(n_pos):
                if not valid[b, k]:
                    continue
                if kind == "previous_token" and k == q - 1:
                    targets.append(k)
                if kind == "duplicate_token" and k < q and tokens[b, k] == tokens[b, q]:
                    targets.append(k)
                if kind == "induction" and 1 <= k <= q and valid[b, k - 1] and tokens[b, k - 1] == tokens[b, q]:
                    targets.append(k)
            if not targets:
                continue
            rows += 1
            for layer in range(n_layers):
                for head in range(n_heads):
                    total[layer, head] += sum(float(patterns[layer][b, head, q, k]) for k in targets)
    return total / rows


def random_case(seed: int, n_batch: int = 3, n_pos: int = 12, n_layers: int = 2, n_heads: int = 3, vocab: int = 4):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (n_batch, n_pos), generator=g)
    valid = torch.rand(n_batch, n_pos, generator=g) > 0.15
    scores = torch.randn(n_layers, n_batch, n_heads, n_pos, n_pos, generator=g)
    causal = torch.ones(n_pos, n_pos, dtype=torch.bool).tril()
    patterns = [s.masked_fill(~causal, float("-inf")).softmax(-1) for s in scores]
    info = ModelInfo("random", n_layers, n_heads, 64, vocab, True, None, ())
    return tokens, valid, patterns, info


def probe_on(patterns, tokens, valid, info, kinds=HEAD_SCORE_KINDS, split=None) -> probes.HeadScores:
    probe = HeadScoreProbe(kinds).bind(info)
    pieces = [slice(0, tokens.shape[0])] if split is None else [slice(0, split), slice(split, tokens.shape[0])]
    for piece in pieces:
        acts = {pattern_hook(layer): p[piece] for layer, p in enumerate(patterns)}
        probe.update(acts, TokenBatch(tokens[piece], valid[piece]))
    return probe.compute()


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("kind", HEAD_SCORE_KINDS)
def test_vectorised_scores_match_nested_loop_reference(seed, kind):
    tokens, valid, patterns, info = random_case(seed)
    result = probe_on(patterns, tokens, valid, info)
    expected = reference_scores(patterns, tokens, valid, kind)
    torch.testing.assert_close(result.scores[kind].double(), expected, rtol=0, atol=1e-6)


def test_merging_two_halves_equals_the_whole():
    tokens, valid, patterns, info = random_case(5, n_batch=6)
    whole = probe_on(patterns, tokens, valid, info)
    first, second = HeadScoreProbe().bind(info), HeadScoreProbe().bind(info)
    for probe, piece in ((first, slice(0, 2)), (second, slice(2, 6))):
        probe.update({pattern_hook(layer): p[piece] for layer, p in enumerate(patterns)},
                     TokenBatch(tokens[piece], valid[piece]))
    merged = first.merge(second).compute()
    for kind in HEAD_SCORE_KINDS:
        torch.testing.assert_close(merged.scores[kind], whole.scores[kind], rtol=0, atol=1e-7)
        assert merged.rows_with_target[kind] == whole.rows_with_target[kind]
    assert results_close(merged, whole, atol=1e-7, rtol=1e-6)


def test_probe_does_not_modify_its_inputs():
    tokens, valid, patterns, info = random_case(3)
    copies = [p.clone() for p in patterns], tokens.clone(), valid.clone()
    probe_on(patterns, tokens, valid, info)
    assert all(torch.equal(a, b) for a, b in zip(patterns, copies[0]))
    assert torch.equal(tokens, copies[1]) and torch.equal(valid, copies[2])


@pytest.mark.parametrize("kind", HEAD_SCORE_KINDS)
def test_target_sets_equal_transformer_lens_detection_patterns(kind):
    tokens = torch.randint(0, 5, (1, 20), generator=torch.Generator().manual_seed(7))
    ours = target_mask(kind, tokens, torch.ones_like(tokens, dtype=torch.bool))[0]
    theirs = TL_DETECTION[kind](tokens).bool()
    assert torch.equal(ours, theirs)


@pytest.mark.parametrize("kind", HEAD_SCORE_KINDS)
def test_parity_with_detect_head_mul_score(kind):
    """detect_head("mul") = our score * rows_with_target / n on one sequence with no special tokens."""
    tokens, _, patterns, info = random_case(11, n_batch=1, n_pos=16, n_layers=1, n_heads=1, vocab=5)
    valid = torch.ones_like(tokens, dtype=torch.bool)
    ours = probe_on(patterns, tokens, valid, info, kinds=(kind,))
    theirs = compute_head_attention_similarity_score(
        patterns[0][0, 0], TL_DETECTION[kind](tokens), exclude_bos=False, exclude_current_token=False,
        error_measure="mul",
    )
    rescaled = float(ours.scores[kind][0, 0]) * ours.rows_with_target[kind] / tokens.shape[1]
    assert rescaled == pytest.approx(theirs, abs=1e-6)


def test_perfect_heads_score_exactly_one_and_uniform_scores_chance():
    model = OracleModel()
    result = probes.head_scores(model, seq_len=10, n_batches=2, batch_size=3, seed=0)
    for layer in range(2):
        assert result.scores["previous_token"][layer, 0] == pytest.approx(1.0, abs=1e-6)
        assert result.scores["induction"][layer, 1] == pytest.approx(1.0, abs=1e-6)
        assert result.scores["duplicate_token"][layer, 2] == pytest.approx(1.0, abs=1e-6)
        for kind in HEAD_SCORE_KINDS:
            assert result.scores[kind][layer, 3] == pytest.approx(result.chance[kind], abs=1e-6)
    # the protocol's block has no internal repeats: only the second copy has induction targets
    assert result.rows_with_target["induction"] == 2 * 3 * 10


def test_natural_text_scores_on_given_tokens_match_reference():
    model = OracleModel(OracleConfig(n_layers=1, n_heads=4, d_vocab=6))
    tokens = torch.randint(0, 6, (5, 14), generator=torch.Generator().manual_seed(2))
    result = probes.head_scores(model, tokens, batch_size=2)
    patterns = [OracleModel.patterns(tokens, 4)]
    valid = torch.ones_like(tokens, dtype=torch.bool)
    for kind in HEAD_SCORE_KINDS:
        torch.testing.assert_close(result.scores[kind].double(), reference_scores(patterns, tokens, valid, kind),
                                   rtol=0, atol=1e-6)


def test_runner_stops_after_the_last_needed_layer():
    model = OracleModel(OracleConfig(n_layers=3))

    class FirstLayerOnly(HeadScoreProbe):
        def hook_names(self, info):
            return (pattern_hook(0),)

        def _update(self, activations, batch):
            self._add("rows", batch.valid.sum())

        def _compute(self, state, info, provenance):
            return int(state["rows"])

    probes.feed_probes(model, [FirstLayerOnly()], [torch.zeros(2, 5, dtype=torch.long)], progress=False)
    assert model.calls == [1, 0, 0]


def test_result_saves_and_loads(tmp_path):
    result = probes.head_scores(OracleModel(), seq_len=6, n_batches=1, batch_size=2)
    result.save(tmp_path / "heads")
    loaded = probes.ProbeResult.load(tmp_path / "heads")
    assert isinstance(loaded, probes.HeadScores)
    assert results_close(loaded, result)
    assert loaded.provenance == result.provenance
    frame = result.to_dataframe()
    assert len(frame) == 3 * 2 * 4
    assert frame.query("kind == 'induction' and head == 1")["score"].min() == pytest.approx(1.0)


def test_result_saves_to_one_json_file_with_the_same_document(tmp_path):
    result = probes.head_scores(OracleModel(), seq_len=6, n_batches=1, batch_size=2)
    folder, single = result.save(tmp_path / "heads"), result.save(tmp_path / "heads.json")
    loaded = probes.ProbeResult.load(single)
    assert isinstance(loaded, probes.HeadScores) and loaded.provenance == result.provenance
    for kind in result.scores:  # exact: every value, dtype and shape
        assert torch.equal(loaded.scores[kind], result.scores[kind]) and loaded.scores[kind].dtype == torch.float32
    import json

    inline, stored = json.loads(single.read_text()), json.loads((folder / "result.json").read_text())
    assert inline["type"] == stored["type"] == "HeadScores"
    tensors = {"scores", "target_mass"}  # inline in one file, in the safetensors sidecar beside the other
    assert stored["result"]["scores"]["induction"] == {"__tensor__": "scores/induction", "dtype": "float32",
                                                          "shape": list(result.scores["induction"].shape)}
    assert {k: v for k, v in inline["result"].items() if k not in tensors} == {
        k: v for k, v in stored["result"].items() if k not in tensors}


def test_compute_before_any_data_raises():
    with pytest.raises(probes.ProbeStateError, match="before any data"):
        HeadScoreProbe().bind(ModelInfo.of(OracleModel())).compute()


def test_seeded_protocol_is_reproducible_and_seed_recorded():
    a = probes.head_scores(OracleModel(), seq_len=5, n_batches=1, batch_size=2, seed=3)
    b = probes.head_scores(OracleModel(), seq_len=5, n_batches=1, batch_size=2, seed=3)
    assert results_close(a, b) and a.provenance.seed == 3
