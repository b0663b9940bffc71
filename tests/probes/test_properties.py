"""Property tests (hypothesis) of every streaming probe and of ``probes.count_cooccurrence``.

For each probe, on random corpora, random probe settings and random split points:

- split: feeding the corpus as one batch or cut into 2-3 batches along the batch axis (each
  padded only to its own longest row) gives the same result;
- merge: probe A fed the first batches and probe B the rest, ``A.merge(B)``, equals one probe fed
  all of them, merging is commutative, summing the two state dicts (a sharded run's all-reduce)
  gives the same probe, and a fresh probe is the identity of merge;
- permutation: permuting the documents (rows) of the corpus, then cutting it anew, leaves the
  result unchanged;
- inputs: every ``update`` leaves the tokens, masks and captured activations bit-identical
  (checked inside :func:`tests.probes.property_strategies.fold` on every call), and probes leave
  their label / token-list tensors and the corpus handed to ``run_probes`` unchanged.

Tolerances. A probe's state is a float64 running sum, but some probes form each batch's partial
sums in the activations' dtype (float32) before adding them, so a different cut changes float32
summation order: those agree to ``F32`` (rtol 1e-5, atol 1e-6). Probes that form their partial sums
in float64 agree to ``F64`` (rtol 1e-10, atol 1e-12) on :class:`RandomAttentionModel`, whose rows
have bit-identical activations in any batch. On TransformerLens bridges the activations themselves
move by float32 rounding when the batch shape changes (about 1e-7), so every probe gets ``F32`` there.
Merging adds the same float64 partial sums in another association (``p1 + (p2 + p3)``), so it
matches sequential feeding to ``F64``, and ``A.merge(B)`` equals ``B.merge(A)`` exactly.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import probes
from probes import (
    HEAD_SCORE_KINDS,
    CopierProbe,
    GeneralizedInductionProbe,
    HeadScoreProbe,
    KeyTokenAttentionProbe,
    LinearProbe,
    ModelInfo,
    ParentCriterionProbe,
    ParentSubsetAttentionProbe,
    Probe,
    SameTokenAttentionProbe,
    SelectorWeightProbe,
    TopicAttentionProbe,
    count_cooccurrence,
)
from tests.probes.property_strategies import (
    SUBSET_HOOK,
    Corpus,
    RandomAttentionModel,
    assert_unchanged,
    concrete_probes,
    corpora,
    fold,
    fold_all,
    result_differences,
    split_points,
    topic_labels,
)
from toymodels.standard import StandardModelConfig, build_standard_model

F32 = {"rtol": 1e-5, "atol": 1e-6}
F64 = {"rtol": 1e-10, "atol": 1e-12}
FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- models (built once per module) -----------------------------------------------------------------


@functools.cache
def custom_model(attention_dir: str | None) -> tuple[RandomAttentionModel, ModelInfo]:
    model = RandomAttentionModel(attention_dir).eval()
    return model, ModelInfo.of(model)


@functools.cache
def bridge_model(attention_dir: str):
    config = StandardModelConfig(n_layers=2, d_model=16, n_heads=2, d_vocab=20, n_ctx=12, attention_dir=attention_dir)
    model = build_standard_model(config).eval()
    return model, ModelInfo.of(model)


CUSTOM_KINDS = ("causal", "bidirectional", None)  # None: the cfg does not say; probes detect it

# -- probes with drawn settings ---------------------------------------------------------------------


@dataclass(frozen=True)
class ProbeCase:
    """A streaming probe: how to draw its settings, what corpora it accepts, how exactly it adds up."""

    name: str
    probe: type[Probe]
    draw: Callable[[st.DataObject, ModelInfo], tuple[Callable[[], Probe], list[torch.Tensor]]]
    tolerance: dict[str, float]
    all_valid: bool = False  # needs unpadded rows without special tokens
    min_len: int = 1
    needs_subset_hook: bool = False


def _head_scores(data, info):
    kinds = data.draw(st.lists(st.sampled_from(HEAD_SCORE_KINDS), min_size=1, unique=True), label="kinds")
    return (lambda: HeadScoreProbe(kinds)), []


def _topic_attention(data, info):
    token_topics, has_topic = data.draw(topic_labels(info.d_vocab), label="topics")
    labels = [t for t in (token_topics, has_topic) if t is not None]
    return (lambda: TopicAttentionProbe(token_topics, has_topic)), labels


def _token_subset(data, info, label):
    as_tensor = data.draw(st.booleans(), label=f"{label} as tensor")
    ids = data.draw(st.none() | st.lists(st.integers(0, info.d_vocab - 1), min_size=1, unique=True), label=label)
    return torch.tensor(ids) if ids is not None and as_tensor else ids


def _same_token_attention(data, info):
    token_topics, has_topic = data.draw(topic_labels(info.d_vocab), label="topics")
    labels = [t for t in (token_topics, has_topic) if t is not None]
    return (lambda: SameTokenAttentionProbe(token_topics, has_topic)), labels


def _key_token_attention(data, info):
    queries, keys = _token_subset(data, info, "query_tokens"), _token_subset(data, info, "key_tokens")
    options = data.draw(st.fixed_dictionaries({
        "query_position": st.sampled_from(["all", "last"]), "exclude_self": st.booleans(),
        "window": st.none() | st.integers(1, 4), "causal": st.sampled_from([None, True, False]),
        "layers": st.none() | st.lists(st.integers(0, info.n_layers - 1), min_size=1, unique=True),
    }), label="options")
    tensors = [t for t in (queries, keys) if isinstance(t, torch.Tensor)]
    return (lambda: KeyTokenAttentionProbe(queries, keys, **options)), tensors


def _generalized_induction(data, info):
    distances = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3, unique=True), label="distances")
    return (lambda: GeneralizedInductionProbe(distances=distances)), []


def _copier(data, info):
    max_distance = data.draw(st.integers(1, 4), label="max_distance")
    min_query = data.draw(st.none() | st.integers(0, 3), label="min_query")
    return (lambda: CopierProbe(max_distance, min_query=min_query)), []


def _parent_subsets(data, info):
    layer = data.draw(st.integers(0, info.n_layers - 1), label="layer")
    max_distance = data.draw(st.integers(1, 3), label="max_distance")
    max_subset = data.draw(st.integers(1, max_distance), label="max_subset")
    return (lambda: ParentSubsetAttentionProbe(layer, max_distance=max_distance, max_subset=max_subset)), []


def _selector_weights(data, info):
    labels = data.draw(st.none() | st.just([f"s{i}" for i in range(4)]), label="labels")
    return (lambda: SelectorWeightProbe(SUBSET_HOOK, labels)), []


def _parent_criterion(data, info):
    max_distance = data.draw(st.integers(1, 3), label="max_distance")
    max_subset = data.draw(st.integers(1, max_distance), label="max_subset")
    return (lambda: ParentCriterionProbe(max_distance, max_subset)), []


PROBE_CASES = [
    ProbeCase("head_scores", HeadScoreProbe, _head_scores, F32),
    ProbeCase("topic_attention", TopicAttentionProbe, _topic_attention, F64),
    ProbeCase("same_token_attention", SameTokenAttentionProbe, _same_token_attention, F64),
    ProbeCase("key_token_attention", KeyTokenAttentionProbe, _key_token_attention, F64),
    ProbeCase("generalized_induction", GeneralizedInductionProbe, _generalized_induction, F32),
    ProbeCase("copier", CopierProbe, _copier, F32),
    ProbeCase("parent_subset_attention", ParentSubsetAttentionProbe, _parent_subsets, F32),
    ProbeCase("selector_weights", SelectorWeightProbe, _selector_weights, F32, needs_subset_hook=True),
    ProbeCase("parent_criterion", ParentCriterionProbe, _parent_criterion, F64, all_valid=True, min_len=4),
]
# Probes whose state is not a sum, with where their contract is tested instead.
NOT_ADDITIVE = {LinearProbe: "a seeded reservoir; merging is tested in tests/probes/linear/test_linear_probe.py"}
CASE_PARAMS = [pytest.param(case, id=case.name) for case in PROBE_CASES]


def test_the_contract_suite_covers_every_probe():
    """A new probe class fails here until it has a ProbeCase (or a reason it is not additive)."""
    covered = {case.probe for case in PROBE_CASES} | set(NOT_ADDITIVE)
    assert concrete_probes() - covered == set()
    assert concrete_probes() >= covered


def _draw_setup(data, case: ProbeCase):
    kind = data.draw(st.sampled_from(CUSTOM_KINDS), label="attention_dir")
    model, info = custom_model(kind)
    corpus = data.draw(corpora(info.d_vocab, min_len=case.min_len, max_len=info.n_ctx, all_valid=case.all_valid),
                       label="corpus")
    make_probe, label_tensors = case.draw(data, info)
    return model, info, corpus, make_probe, label_tensors


def _outcome(probe: Probe):
    """The probe's result, or the user-facing error ``compute()`` raises (e.g. CopierProbe with no query)."""
    try:
        return probe.compute()
    except probes.MechprobeError as error:
        return error


def _assert_same(a: Probe, b: Probe, tolerance: dict[str, float], what: str) -> None:
    """Same result within ``tolerance``, or the same error (type and message) from ``compute()``."""
    x, y = _outcome(a), _outcome(b)
    if isinstance(x, Exception) or isinstance(y, Exception):
        assert (type(x), str(x)) == (type(y), str(y)), f"{what}: {x!r} vs {y!r}"
        return
    gaps = result_differences(x, y, **tolerance)
    assert not gaps, f"{what}: " + "; ".join(gaps)


# -- the properties on hooked models with known per-row activations --------------------------------


@pytest.mark.parametrize("case", CASE_PARAMS)
@FAST
@given(data=st.data())
def test_splitting_the_batch_does_not_change_the_result(case, data):
    model, info, corpus, make_probe, _labels = _draw_setup(data, case)
    cuts = data.draw(split_points(corpus.n_rows), label="cuts")
    order = list(range(corpus.n_rows))
    whole = fold(make_probe, model, [corpus.whole()], info)
    split = fold(make_probe, model, corpus.batches(order, cuts), info)
    _assert_same(split, whole, case.tolerance, f"split at {cuts} vs whole")
    assert split.state_dict()["_n_tokens"] == whole.state_dict()["_n_tokens"]


@pytest.mark.parametrize("case", CASE_PARAMS)
@FAST
@given(data=st.data())
def test_merging_halves_equals_the_whole_and_commutes(case, data):
    model, info, corpus, make_probe, _labels = _draw_setup(data, case)
    cuts = data.draw(split_points(corpus.n_rows, max_cuts=3), label="cuts")
    batches = corpus.batches(list(range(corpus.n_rows)), cuts)
    first = data.draw(st.integers(1, len(batches) - 1), label="batches of probe A")
    sequential = fold(make_probe, model, batches, info)
    a_then_b = fold(make_probe, model, batches[:first], info).merge(fold(make_probe, model, batches[first:], info))
    b_then_a = fold(make_probe, model, batches[first:], info).merge(fold(make_probe, model, batches[:first], info))
    # (p1 + p2) + p3 vs p1 + (p2 + p3): float64 association only; a + b == b + a exactly.
    _assert_same(a_then_b, sequential, F64, "A.merge(B) vs one probe fed both")
    _assert_same(b_then_a, a_then_b, {"rtol": 0.0, "atol": 0.0}, "B.merge(A) vs A.merge(B)")
    _assert_same(a_then_b, fold(make_probe, model, [corpus.whole()], info), case.tolerance, "A.merge(B) vs whole")
    # a sharded run all-reduces the state dicts with a sum (probes.core.distributed): the same as merge
    a, b = fold(make_probe, model, batches[:first], info), fold(make_probe, model, batches[first:], info)
    reduced = make_probe().bind(info)
    reduced.load_state_dict({key: value + b.state_dict()[key] for key, value in a.state_dict().items()})
    _assert_same(reduced, a_then_b, {"rtol": 0.0, "atol": 0.0}, "summed state dicts vs A.merge(B)")
    # a fresh, unbound probe is the identity of merge, on either side
    _assert_same(make_probe().merge(a), a.merge(make_probe()), {"rtol": 0.0, "atol": 0.0}, "empty.merge(A) vs A")


@pytest.mark.parametrize("case", CASE_PARAMS)
@FAST
@given(data=st.data())
def test_permuting_documents_does_not_change_the_result(case, data):
    model, info, corpus, make_probe, _labels = _draw_setup(data, case)
    order = data.draw(st.permutations(range(corpus.n_rows)), label="order")
    cuts = data.draw(st.none() | split_points(corpus.n_rows), label="cuts")
    whole = fold(make_probe, model, [corpus.whole()], info)
    permuted = fold(make_probe, model, corpus.batches(order, cuts or []), info)
    _assert_same(permuted, whole, case.tolerance, f"rows in order {order}, cut at {cuts}")


@pytest.mark.parametrize("case", CASE_PARAMS)
@FAST
@given(data=st.data())
def test_probes_never_modify_their_inputs(case, data):
    """Through probes.feed_probes: the corpus, the probe's label tensors and every activation the runner
    captured are unchanged (``fold`` checks the same on every update of the other tests)."""
    model, info, corpus, make_probe, labels = _draw_setup(data, case)
    batches = corpus.batches(list(range(corpus.n_rows)), data.draw(split_points(corpus.n_rows), label="cuts"))
    raw = [b if data.draw(st.booleans(), label="as TokenBatch") else b.tokens for b in batches]
    corpus_before = [(b.tokens.clone(), b.valid.clone()) if isinstance(b, probes.TokenBatch) else (b.clone(),)
                     for b in raw]
    labels_before = [t.clone() for t in labels]
    probe = make_probe()
    seen: list[tuple[dict, dict]] = []
    fold = probe.fold

    def checked_fold(activations, batch):
        before = {name: t.clone() for name, t in activations.items()}
        fold(activations, batch)
        seen.append((before, dict(activations)))

    probe.fold = checked_fold  # type: ignore[method-assign]
    probes.feed_probes(model, [probe], raw, progress=False)
    assert len(seen) == len(raw) * len(probe.hook_groups(info))  # the runner folds hook groups as they fire
    for before, after in seen:
        assert_unchanged(before, after, f"{type(probe).__name__} (activations)")
    for b, saved in zip(raw, corpus_before):
        now = (b.tokens, b.valid) if isinstance(b, probes.TokenBatch) else (b,)
        assert all(torch.equal(x, y) for x, y in zip(now, saved)), "run_probes modified the corpus"
    assert all(torch.equal(t, s) for t, s in zip(labels, labels_before)), "the probe modified its label tensors"


# -- the same properties on TransformerLens bridges with padded batches -----------------------------

BRIDGE_CASES = [case for case in PROBE_CASES if not case.all_valid and not case.needs_subset_hook]


@pytest.mark.slow
@pytest.mark.parametrize("attention_dir", ["causal", "bidirectional"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_padded_bridge_batches_split_merge_and_permute(attention_dir, data):
    """Every bridge-compatible probe at once: right-padded rows of different lengths, each batch padded
    only to its own longest row (as text_token_batches does), attention_mask passed to the model."""
    model, info = bridge_model(attention_dir)
    corpus = data.draw(corpora(info.d_vocab, max_len=info.n_ctx, padded=True), label="corpus")
    makers = [case.draw(data, info)[0] for case in BRIDGE_CASES]
    cuts = data.draw(split_points(corpus.n_rows), label="cuts")
    order = data.draw(st.permutations(range(corpus.n_rows)), label="order")
    batches = corpus.batches(list(range(corpus.n_rows)), cuts)
    whole = fold_all(makers, model, [corpus.whole()], info)
    split = fold_all(makers, model, batches, info)
    first = fold_all(makers, model, batches[:1], info)
    rest = fold_all(makers, model, batches[1:], info)
    permuted = fold_all(makers, model, corpus.batches(order, cuts), info)
    for i, case in enumerate(BRIDGE_CASES):
        _assert_same(split[i], whole[i], F32, f"{case.name}: split at {cuts} vs whole")
        _assert_same(first[i].merge(rest[i]), split[i], F64, f"{case.name}: merged vs sequential")
        _assert_same(permuted[i], whole[i], F32, f"{case.name}: rows in order {order}, cut at {cuts}")


# -- count_cooccurrence: its public contract --------------------------------------------------------


def reference_cooccurrence(batches, queries, keys, *, query_position, causal, exclude_self, window):
    """Nested loops over the docstring's definition (every position of every row counts)."""
    counts = torch.zeros(len(queries), len(keys), dtype=torch.float64)
    for tokens in batches:
        for row in tokens.tolist():
            n = len(row)
            query_positions = range(n) if query_position == "all" else [n - 1] if n else []
            for q in query_positions:
                if row[q] not in queries:
                    continue
                for k in range(n):
                    if row[k] not in keys or (exclude_self and k == q) or (causal and k > q):
                        continue
                    if window is not None and abs(q - k) > window:
                        continue
                    counts[queries.index(row[q]), keys.index(row[k])] += 1
    return counts


@st.composite
def cooccurrence_problem(draw):
    d_vocab = draw(st.integers(1, 9))
    n_batches = draw(st.integers(1, 3))
    batches = []
    for _ in range(n_batches):
        shape = (draw(st.integers(0, 5)), draw(st.integers(1, 9)))
        ids = draw(st.lists(st.integers(0, d_vocab - 1), min_size=shape[0] * shape[1], max_size=shape[0] * shape[1]))
        batches.append(torch.tensor(ids, dtype=torch.long).reshape(shape))
    vocab = st.integers(0, d_vocab + 1)  # ids the corpus may lack are allowed
    queries = draw(st.lists(vocab, min_size=1, max_size=d_vocab + 2, unique=True))
    keys = draw(st.lists(vocab, min_size=1, max_size=d_vocab + 2, unique=True))
    options = draw(st.fixed_dictionaries({
        "query_position": st.sampled_from(["all", "last"]), "causal": st.booleans(), "exclude_self": st.booleans(),
        "window": st.none() | st.integers(1, 6),
    }))
    return batches, queries, keys, options


@settings(max_examples=150, deadline=None)
@given(problem=cooccurrence_problem(), as_list=st.booleans(), query_as_tensor=st.booleans())
def test_count_cooccurrence_matches_the_nested_loop_reference(problem, as_list, query_as_tensor):
    batches, queries, keys, options = problem
    corpus = batches if as_list or len(batches) > 1 else batches[0]
    before = [b.clone() for b in batches]
    query_arg = torch.tensor(queries) if query_as_tensor else queries
    counts = count_cooccurrence(corpus, query_arg, keys, **options)
    assert counts.dtype == torch.float64 and counts.shape == (len(queries), len(keys))
    assert torch.equal(counts, reference_cooccurrence(batches, queries, keys, **options))
    assert all(torch.equal(b, s) for b, s in zip(batches, before)), "count_cooccurrence modified the corpus"
    if query_as_tensor:
        assert query_arg.tolist() == queries


@settings(max_examples=100, deadline=None)
@given(problem=cooccurrence_problem(), data=st.data())
def test_count_cooccurrence_is_invariant_to_splitting_and_permuting_rows(problem, data):
    batches, queries, keys, options = problem
    expected = count_cooccurrence(batches, queries, keys, **options)
    pieces = []
    for tokens in batches:
        if tokens.shape[0] >= 2:
            cuts = data.draw(split_points(tokens.shape[0]), label="cuts")
            tokens = tokens[data.draw(st.permutations(range(tokens.shape[0])), label="order")]
            pieces += list(torch.tensor_split(tokens, cuts))
        else:
            pieces.append(tokens)
    pieces = data.draw(st.permutations(pieces), label="batch order")
    assert torch.equal(count_cooccurrence(pieces, queries, keys, **options), expected)


@pytest.mark.parametrize("kind", ["causal", "bidirectional"])
@FAST
@given(data=st.data())
def test_count_cooccurrence_equals_the_attention_probes_occurrences(kind, data):
    """``KeyTokenAttention.occurrences`` counts the same pairs as count_cooccurrence on all-valid rows."""
    model, info = custom_model(kind)
    corpus = data.draw(corpora(info.d_vocab, max_len=info.n_ctx, all_valid=True), label="corpus")
    make_probe, _ = _key_token_attention(data, info)
    probe = fold(make_probe, model, [corpus.whole()], info)
    chosen = probe.settings()
    every_id = list(range(info.d_vocab))
    causal = chosen["causal"] if chosen["causal"] is not None else info.causal  # the model's direction by default
    counts = count_cooccurrence(corpus.tokens, chosen["query_tokens"] or every_id, chosen["key_tokens"] or every_id,
                                query_position=chosen["query_position"], causal=causal,
                                exclude_self=chosen["exclude_self"], window=chosen["window"])
    assert torch.equal(probe.compute().occurrences.double(), counts)


def test_corpus_rows_trims_padding_columns():
    corpus = Corpus(torch.arange(8).reshape(2, 4), torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0]]).bool(),
                    torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]))
    assert corpus.rows([1]).tokens.tolist() == [[4, 5]]
    assert corpus.rows([1, 0]).tokens.shape == (2, 3)


def test_provenance_token_count_does_not_depend_on_padding():
    """The same 5 tokens, padded to width 4 in one batch or trimmed in two batches, are 5 tokens."""
    _, info = custom_model("causal")
    tokens = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    mask = (tokens > 0).long()
    corpus = Corpus(tokens, mask.bool(), mask)
    weights = {SUBSET_HOOK: torch.ones(1, 4)}

    def token_count(batches):
        probe = SelectorWeightProbe(SUBSET_HOOK).bind(info)
        for batch in batches:
            probe.update({SUBSET_HOOK: weights[SUBSET_HOOK].expand(batch.tokens.shape[0], 4)},
                         probes.as_token_batch(batch, info))
        return probe.compute().provenance.n_tokens

    assert token_count(corpus.batches([0, 1], [1])) == 5
    assert token_count([corpus.whole()]) == 5


# -- pure functions over a vocabulary: relabelling the vocabulary (or the topics) changes nothing ----


@st.composite
def labelled_matrix(draw):
    """A square matrix [n n] with block labels [n] (-1 = none) that give within- and between-block entries."""
    n = draw(st.integers(3, 9))
    values = draw(st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=n * n, max_size=n * n))
    labels = draw(st.lists(st.integers(-1, 2), min_size=n, max_size=n).filter(
        lambda ls: len({label for label in ls if label >= 0}) >= 2
        and any(ls.count(label) >= 2 for label in ls if label >= 0)))
    return torch.tensor(values, dtype=torch.float64).reshape(n, n), torch.tensor(labels)


@settings(max_examples=100, deadline=None)
@given(problem=labelled_matrix(), data=st.data())
def test_block_structure_and_embedding_similarity_ignore_the_order_of_indices_and_topic_ids(problem, data):
    matrix, labels = problem
    n = len(labels)
    order = torch.tensor(data.draw(st.permutations(range(n)), label="order"))
    topic_ids = torch.tensor([*data.draw(st.permutations(range(3)), label="topic ids"), -1])  # -1 stays -1
    relabelled = topic_ids[labels][order]
    before = (matrix.clone(), labels.clone())
    expected = dataclasses.asdict(probes.block_structure(matrix, labels))
    got = dataclasses.asdict(probes.block_structure(matrix[order][:, order], relabelled))
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12, nan_ok=True)
    expected = dataclasses.asdict(probes.embedding_topic_similarity(matrix, labels))
    got = dataclasses.asdict(probes.embedding_topic_similarity(matrix[order], relabelled))
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12, nan_ok=True)
    assert torch.equal(matrix, before[0]) and torch.equal(labels, before[1]), "inputs were modified"
