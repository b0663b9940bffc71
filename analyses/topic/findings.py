"""The topic toy's findings in the schema of the pretrained ones (:mod:`analyses.pretrained.findings`), per seed.

Three of the experiment's models carry them, each judged beside itself at initialisation (same seed, so
the same weights at step 0, and the same held-out documents):

- *joint* (trained embeddings, everything trained; Li et al.'s claims 1 and 3):

  - ``topic_attention_mean``: the same/different-topic attention ratio on unmasked held-out documents,
    averaged over heads by the pretrained models' own code path
    (:func:`~analyses.pretrained.held_out.topic_mean_over_heads`): a 95% bootstrap over batches of
    ``FINDING_BATCH`` documents and the null with the topic labels permuted among the words (up to
    ``N_PERMUTATIONS``, drawn in groups and stopped once p cannot fall below the level,
    :mod:`probes.stats.sequential`; so is the null of ``value_block_structure``);
  - ``topic_attention_best_head``: the ratio of the best head. The toy has one head (L0H0), so there is
    no search and no held-out split: it is the same number as ``topic_attention_mean``;
  - ``embedding_topic_similarity``: the mean-centred cosine of the word embeddings, same minus different
    topic (bootstrap over words, label-permutation null;
    :func:`~probes.dynamics.embedding_topics.embedding_topic_test`).

- *uniform* (one-hot frozen embeddings, attention frozen uniform, decoder frozen to the identity, W_V
  trained; claim 2): ``value_block_structure``, the block score of W_V over the words
  (:func:`~probes.dynamics.block_structure.block_structure`, columns centred under cross-entropy as
  ``run`` scores it). Interval: a 95% percentile bootstrap over the input words, i.e. the columns of
  W_V; centring is per column, so each column carries its own within-topic and total squared mass.
  Null: the score with the topic labels permuted among the words. It holds at least
  ``VALUE_MIN_EFFECT`` = 0.25 above the larger of the null and the initialised W_V: a quarter of the
  score's range from an unstructured matrix (0) to a block-diagonal one (1); the column-centred ideal
  block matrix scores 0.879 for 10 topics of 10 words.

- *joint* again, causally: ``topic_heads_causal`` (the pretrained head ablation's row), the masked-LM loss
  change (nats per masked token, cross-entropy) when the head's attention is made uniform over the visible keys
  (a hook on ``blocks.0.attn.hook_attn_scores`` sets every score to 0; the model then hides the masked keys and
  padding itself) minus the loss with the trained attention, on ``CAUSAL_DOCUMENTS`` = 1024 held-out documents
  of their own (``seed + 20_000``; the 64 evaluation documents of the fast preset give an interval of about
  +-0.035 nats, wider than the 0.02 threshold), masked as in training. The pretrained statistic is a contrast,
  change on tokens whose topic already appeared minus on tokens whose did not; on this data about 1% of masked
  tokens (120 of 9387 at seed 0) have no other visible token of their topic (a document of 40-60 words draws
  its topics from a sparse Dirichlet), too few for the contrast, so the value is the plain change and the
  statistic says so. Interval: 95% bootstrap over 64 batches of 16 documents; null: no change, p from 10,000
  random sign flips of the batches' changes (:func:`analyses.toy_causal.paired_loss_change`); it holds at
  least 0.02 nats above the larger of the null and the toy at initialisation (whose near-uniform attention
  changes nothing: 1e-11 nats). Measured 0.04-0.06 nats on seeds 0-4 of the fast preset.

- *two_stage* (one-hot frozen embeddings, the rest trained with plain SGD; claim 4): ``value_before_key_query``,
  the step at which W_K/W_Q's displacement from initialisation crosses half-way to its peak minus the step at
  which W_V's does (:mod:`analyses.topic.order`; the rules of every toy order: :mod:`analyses.toy_orders`). Its
  control is the same model with learning rate 0, which has no event (0: no order).

:func:`seed_findings` trains the three models at one seed exactly as ``run`` does (same data, same
minibatches) and returns the seed's :class:`~analyses.toy_findings.SeedFindings`.

Example::

    seed_findings(PRESETS["fast"], 1).findings["value_block_structure"].holds
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from analyses.pretrained.findings import EMBEDDING_MEASURE, finding_from_spec
from analyses.pretrained.held_out import TOPIC_UNIT_KEYS, mean_null_ratio, topic_mean_over_heads
from analyses.topic.config import TopicExperimentConfig
from analyses.topic.order import ORDER, STAGED_VARIANT, frozen_history, train_staged, value_before_key_query
from analyses.torch_threads import torch_threads
from analyses.toy_causal import paired_loss_change
from analyses.toy_findings import SeedFindings, judge_against_init
from mechprobe import forward
from mechprobe.forward import on_model
from probes import feed_probes
from probes.attention.topic_attention import TopicAttention, TopicAttentionProbe
from probes.core.errors import ConfigError
from probes.dynamics.block_structure import block_scores, block_structure, centre_columns
from probes.dynamics.embedding_topics import embedding_topic_test
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_interval
from probes.stats.findings import ALPHA, Finding
from probes.stats.nulls import label_permutations
from probes.stats.sequential import SequentialRule, sequential_null
from toymodels.topic.data import MaskedDocuments, mask_documents, sample_documents
from toymodels.topic.model import TopicModel
from toymodels.topic.training import MaskedLMData, train_topic_model
from toymodels.training import History

FINDINGS = ("topic_attention_mean", "topic_attention_best_head", "embedding_topic_similarity",
            "value_block_structure", "topic_heads_causal", ORDER)
N_PERMUTATIONS = 1000  # the smallest p, 1/1001, Holm-adjusted over the 6 findings (0.006) clears ALPHA = 0.01
# The label permutations are drawn in groups of 10, 100, 890 (probes.stats.sequential): each group is a pass over the
# held-out documents, about as costly as 75 permutations, so a trained toy (whose null is drawn to the end) pays two
# passes more and a toy at initialisation (settled within about 30 draws) one pass of 110 instead of 1,000.
NULL_RULE = SequentialRule.growing(N_PERMUTATIONS, ALPHA)
N_BOOT = 1000
FINDING_BATCH = 8  # held-out documents per bootstrap unit of the attention ratio
VALUE_MIN_EFFECT = 0.25

JOINT_VARIANT: Mapping[str, str] = MappingProxyType({"embedding": "trained"})
"""The jointly trained model (claims 1 and 3): every weight trained."""
UNIFORM_VARIANT: Mapping[str, str] = MappingProxyType(
    {"embedding": "one_hot_frozen", "attention": "uniform_frozen", "decoder": "identity_frozen"})
"""The W_V model (claim 2): only W_V trained."""

EVAL_OFFSET = 10_000  # the held-out documents are drawn from seed + this
CAUSAL_OFFSET = 20_000  # the causal finding's own held-out documents: seed + this
CAUSAL_DOCUMENTS = 1024
"""Held-out documents of the causal finding: 64 (the fast preset's ``eval_documents``) give an interval of about
+-0.035 nats, wider than the 0.02 effect threshold; 1024 narrow it to about +-0.01."""
CAUSAL_CHUNK = 128  # documents per forward pass
CAUSAL_UNIT = 16  # documents per bootstrap / sign-flip unit (64 units)
UNIFORM_HOOK = "blocks.0.attn.hook_attn_scores"
CAUSAL_NULL = f"no change (sign flips of uniform - trained loss per batch of {CAUSAL_UNIT} held-out documents)"
CAUSAL_SELECTION = "no search: the toy's only head (L0H0), its attention made uniform over the visible keys"
_ONE_HEAD = ("no search: the toy's only head (L0H0), so topic_attention_mean and topic_attention_best_head are "
             "one number")
_ATTENTION_STATISTICS = {
    "topic_attention_mean": "same/different-topic attention ratio, mean over all heads (joint topic toy: one head)",
    "topic_attention_best_head": "same/different-topic attention ratio of the best head (joint topic toy: its "
                                 "only head, L0H0)",
}


def topic_model(config: TopicExperimentConfig, **variant: str) -> TopicModel:
    """A fresh :class:`TopicModel` of ``variant`` (:meth:`TopicExperimentConfig.model_config`) on ``config.device``."""
    return TopicModel(config.model_config(**variant), device=config.device)


def held_out_masked(config: TopicExperimentConfig, n_documents: int, offset: int) -> MaskedDocuments:
    """``n_documents`` held-out documents of length ``lda.max_len`` (no padding), masked as in training, drawn
    from ``config.seed + offset``."""
    lda = config.lda
    generator = torch.Generator().manual_seed(config.seed + offset)
    documents = sample_documents(lda, n_documents, generator, length=lda.max_len)
    return mask_documents(documents, config.masking, generator, lda=lda)


def held_out_documents(config: TopicExperimentConfig, *, masked: bool = False) -> Tensor:
    """``config.eval_documents`` held-out documents of length ``lda.max_len`` (no padding), unmasked or masked,
    drawn from ``config.seed + 10_000``: every measurement of the experiment but the causal one reads these."""
    if masked:
        return held_out_masked(config, config.eval_documents, EVAL_OFFSET).inputs
    generator = torch.Generator().manual_seed(config.seed + EVAL_OFFSET)
    return sample_documents(config.lda, config.eval_documents, generator, length=config.lda.max_len).tokens


def _attention_findings(model: TopicModel, config: TopicExperimentConfig) -> dict[str, Finding]:
    labels = config.lda.token_topics()
    batches = list(held_out_documents(config).split(FINDING_BATCH))
    def measure(start: int, stop: int, recorder: BatchStateRecorder | None = None) -> TopicAttention:
        probe = TopicAttentionProbe(labels, n_permutations=stop - start, permutation_seed=config.seed,
                                    permutation_start=start)
        feed_probes(model, [probe], batches, data="held-out LDA documents (unmasked)", seed=config.seed,
                    progress=False, on_batch=recorder)
        return probe.compute()

    recorder = BatchStateRecorder(keys=lambda key: key in TOPIC_UNIT_KEYS)
    whole = measure(0, NULL_RULE.group_stop(0, 0), recorder)
    held = topic_mean_over_heads(whole, recorder.per_unit(0), n_boot=N_BOOT, seed=config.seed)
    null = sequential_null(torch.tensor(held.value), lambda start, stop: mean_null_ratio(measure(start, stop)),
                           NULL_RULE, first=mean_null_ratio(whole))
    return {name: dataclasses.replace(
                finding_from_spec(name, held.value, held.ci, float(null.draws.mean()), float(null.p_value),
                                  statistic=statistic, selection=_ONE_HEAD, n_units=held.n_units),
                null_draws=null.n_drawn, null_stop=null.why())
            for name, statistic in _ATTENTION_STATISTICS.items()}


def _embedding_finding(model: TopicModel, config: TopicExperimentConfig) -> Finding:
    words = config.lda.n_words
    test = embedding_topic_test(model.W_E.detach()[:words].cpu(), config.lda.token_topics()[:words],
                                n_permutations=N_PERMUTATIONS, n_boot=N_BOOT, seed=config.seed, stop_at=ALPHA)
    return dataclasses.replace(finding_from_spec(
        "embedding_topic_similarity", test.gap[EMBEDDING_MEASURE], test.gap_ci[EMBEDDING_MEASURE],
        test.null_mean(EMBEDDING_MEASURE), test.p_value[EMBEDDING_MEASURE], n_units=test.n_tokens,
        statistic="mean-centred embedding cosine, same minus different topic (joint topic toy, the words' rows)"),
        null_draws=len(test.null_gaps[EMBEDDING_MEASURE]), null_stop=test.null_stop)


def value_column_masses(value: Tensor, labels: Tensor, *, centre: bool) -> dict[str, Tensor]:
    """Per column of the square ``value`` [word word] (every word labelled): its within-topic and total squared
    mass off the diagonal and its numbers of such entries, after centring the columns when ``centre``.
    Summed over the columns they give :func:`~probes.dynamics.block_structure.block_structure`'s score
    (:func:`block_score_of_masses`), so a bootstrap over columns resamples these."""
    matrix = centre_columns(value, labels) if centre else value.detach().to("cpu", torch.float64)
    off_diagonal = ~torch.eye(len(labels), dtype=torch.bool)
    same = (labels[:, None] == labels[None, :]) & off_diagonal
    squares = matrix.square() * off_diagonal
    return {"within": (squares * same).sum(0), "total": squares.sum(0), "n_within": same.sum(0).double(),
            "n_entries": off_diagonal.sum(0).double()}


def block_score_of_masses(masses: Mapping[str, Tensor]) -> Tensor:
    """The block score from (resampled) summed column masses [draw]: (mass fraction - chance) / (1 - chance)."""
    chance = masses["n_within"] / masses["n_entries"]
    return (masses["within"] / masses["total"] - chance) / (1 - chance)


def _value_finding(model: TopicModel, config: TopicExperimentConfig) -> Finding:
    words = config.lda.n_words
    labels = config.lda.token_topics()[:words]
    value = model.W_V.detach()[:words, :words].cpu()
    centre = config.uniform.loss == "cross_entropy"  # cross-entropy ignores a constant added to a column of W_V
    score = block_structure(value, labels, centre_columns=centre).score
    _, low, high = bootstrap_interval(value_column_masses(value, labels, centre=centre), block_score_of_masses,
                                      n_boot=N_BOOT, seed=config.seed)

    def draw(start: int, stop: int) -> Tensor:  # the scores rounded to float32, as the null has always held them
        permuted = label_permutations(labels, stop - start, seed=config.seed, start=start)
        return block_scores(value, permuted, centre_columns=centre).float()

    null = sequential_null(torch.tensor(score), draw, NULL_RULE)
    return Finding(
        f"block score of W_V over the words{', columns centred' if centre else ''} (uniform topic toy: one-hot "
        f"frozen embeddings, uniform frozen attention, identity decoder, W_V trained)",
        score, (float(low), float(high)), "topic labels permuted among the words", float(null.draws.mean()),
        float(null.p_value), VALUE_MIN_EFFECT, "difference",
        selection="no search: W_V of the uniform toy; 95% bootstrap over its columns (input words)",
        n_units=words, null_draws=null.n_drawn, null_stop=null.why())


def _uniform_scores(scores: Tensor, hook: Any) -> Tensor:
    """Every attention score 0: the model then hides the invisible keys, so attention is uniform over the rest."""
    return torch.zeros_like(scores)


def masked_token_losses(model: TopicModel, masked: MaskedDocuments, key_mask: Tensor, *, uniform: bool) -> Tensor:
    """Each document's summed cross-entropy (nats) on its masked (selected) tokens [document], with the trained
    attention or (``uniform``) attention made uniform over the visible keys (:data:`CAUSAL_CHUNK` documents per
    forward pass)."""
    hooks: list[tuple[str | Callable[..., Any], Callable[..., Any]]] = (
        [(UNIFORM_HOOK, _uniform_scores)] if uniform else [])
    targets = masked.targets.masked_fill(~masked.selected, 0)  # unselected positions (padding too) are not counted
    sums = []
    for rows in torch.arange(masked.inputs.shape[0]).split(CAUSAL_CHUNK):
        logits = forward.run(model, masked.inputs[rows], key_mask=key_mask[rows], fwd_hooks=hooks)
        loss = F.cross_entropy(logits.transpose(1, 2), on_model(model, targets[rows]), reduction="none")
        sums.append((loss.double() * on_model(model, masked.selected[rows])).sum(1).cpu())
    return torch.cat(sums)


def topic_absent(masked: MaskedDocuments, key_mask: Tensor, topics: Tensor) -> Tensor:
    """``absent[b, q]``: masked token ``q`` of document ``b`` has no other visible key of its topic."""
    n_pos = masked.inputs.shape[1]
    visible = key_mask & (topics[masked.inputs] >= 0)
    key_topics = topics[masked.inputs].masked_fill(~visible, -1)
    others = ~torch.eye(n_pos, dtype=torch.bool, device=key_topics.device)
    same = (key_topics[:, None, :] == topics[masked.targets][:, :, None]) & others
    return masked.selected & ~same.any(-1)


def topic_heads_causal(model: TopicModel, config: TopicExperimentConfig) -> Finding:
    """``topic_heads_causal`` of the joint ``model`` (module docstring), unadjusted."""
    masked = held_out_masked(config, CAUSAL_DOCUMENTS, CAUSAL_OFFSET).to(config.device)
    key_mask = ~masked.selected if config.data.exclude_masked_keys else torch.ones_like(masked.selected)

    def units(per_document: Tensor) -> Tensor:
        return torch.stack([part.sum() for part in per_document.split(CAUSAL_UNIT)])

    clean = masked_token_losses(model, masked, key_mask, uniform=False)
    uniform = masked_token_losses(model, masked, key_mask, uniform=True)
    change = paired_loss_change(units(masked.selected.sum(1).double().cpu()), units(clean), units(uniform),
                                seed=config.seed)
    absent = int(topic_absent(masked, key_mask, config.lda.token_topics().to(config.device)).sum())
    statistic = (f"loss change (nats/token) on held-out masked tokens, attention made uniform over the visible keys "
                 f"minus as trained (joint topic toy; clean loss {float(clean.sum()) / int(masked.selected.sum()):.3f}"
                 f"). Not the pretrained contrast: {absent} of {int(masked.selected.sum())} masked tokens have no "
                 f"other visible token of their topic, too few to estimate a change on")
    return finding_from_spec("topic_heads_causal", change.value, change.ci, change.null_value, change.p_value,
                                statistic=statistic, selection=CAUSAL_SELECTION, null_kind=CAUSAL_NULL)


def _measure(joint: TopicModel, uniform: TopicModel, staged: History, config: TopicExperimentConfig
             ) -> dict[str, Finding]:
    """The unadjusted findings of one joint and one uniform model and one two-stage history, in :data:`FINDINGS`
    order."""
    measured = {**_attention_findings(joint, config),
                "embedding_topic_similarity": _embedding_finding(joint, config),
                "value_block_structure": _value_finding(uniform, config),
                "topic_heads_causal": topic_heads_causal(joint, config),
                ORDER: value_before_key_query(staged, config)}
    return {name: measured[name] for name in FINDINGS}


def judge_trained(joint: TopicModel, uniform: TopicModel, staged: History, config: TopicExperimentConfig
                  ) -> SeedFindings:
    """The findings of the trained ``joint`` and ``uniform`` models and of the two-stage run's displacement history
    (``staged``, :mod:`analyses.topic.order`) of ``config.seed`` beside the same models at initialisation (rebuilt
    from their configs: same seed, same weights at step 0; the two-stage model read with learning rate 0), measured
    on the same held-out documents."""
    init_joint, init_uniform = (TopicModel(model.cfg, device=config.device) for model in (joint, uniform))
    init_staged = frozen_history(topic_model(config, **STAGED_VARIANT), config)
    return judge_against_init(_measure(joint, uniform, staged, config),
                              _measure(init_joint, init_uniform, init_staged, config), config.seed)


def seed_findings(config: TopicExperimentConfig, seed: int, *, joint_variant: Mapping[str, str] = JOINT_VARIANT,
                  uniform_variant: Mapping[str, str] = UNIFORM_VARIANT) -> SeedFindings:
    """Train the joint, the uniform and the two-stage model of ``config`` at ``seed`` (as ``run`` does, without
    files or figures, on one thread) and judge their findings against themselves at initialisation.

    ``joint_variant`` / ``uniform_variant`` pick the frozen parts of the two models (``TopicModelConfig``'s
    ``embedding``, ``attention``, ``value``, ``decoder``), e.g. ``{"embedding": "trained", "attention":
    "uniform_frozen"}`` to switch off the attention the topic findings are about.
    Example: ``seed_findings(PRESETS["fast"], 1).findings["topic_attention_mean"].value``.
    """
    if not isinstance(config, TopicExperimentConfig):
        raise ConfigError(f"seed_findings() expects a TopicExperimentConfig; got {type(config).__name__}.")
    config = dataclasses.replace(config, seed=seed)
    with torch_threads(1):
        data = MaskedLMData(config.lda, config.masking, config.data, seed=config.seed)
        joint, uniform = topic_model(config, **joint_variant), topic_model(config, **uniform_variant)
        train_topic_model(joint, data, config.training("joint"))
        train_topic_model(uniform, data, config.training("uniform"))
        _, staged = train_staged(config, data)
        return judge_trained(joint, uniform, staged, config)
