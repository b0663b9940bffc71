"""The topic toy's findings in the schema of the pretrained ones (:mod:`analyses.pretrained.findings`), per seed.

Two of the experiment's models carry them, each judged beside itself at initialisation (same seed, so
the same weights at step 0, and the same held-out documents):

- *joint* (trained embeddings, everything trained; Li et al.'s claims 1 and 3):

  - ``topic_attention_mean``: the same/different-topic attention ratio on unmasked held-out documents,
    averaged over heads by the pretrained models' own code path
    (:func:`~analyses.pretrained.held_out.topic_mean_over_heads`): a 95% bootstrap over batches of
    ``FINDING_BATCH`` documents and the null with the topic labels permuted among the words;
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

:func:`seed_findings` trains the two models at one seed exactly as ``run`` does (same data, same
minibatches) and returns the seed's :class:`~analyses.toy_findings.SeedFindings`.

Example::

    seed_findings(PRESETS["fast"], 1).findings["value_block_structure"].holds
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType

import torch
from torch import Tensor

from analyses.torch_threads import torch_threads
from analyses.pretrained.findings import EMBEDDING_MEASURE, finding_from_spec
from analyses.pretrained.held_out import TOPIC_UNIT_KEYS, topic_mean_over_heads
from analyses.topic.config import TopicExperimentConfig
from analyses.toy_findings import SeedFindings, judge_against_init
from probes import feed_probes
from probes.attention.topic_attention import TopicAttentionProbe
from probes.core.errors import ConfigError
from probes.dynamics.block_structure import block_structure, centre_columns
from probes.dynamics.embedding_topics import embedding_topic_test
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_interval
from probes.stats.findings import Finding
from probes.stats.nulls import label_permutations, permutation_p_value
from toymodels.topic.data import mask_documents, sample_documents
from toymodels.topic.model import TopicModel
from toymodels.topic.training import MaskedLMData, train_topic_model

FINDINGS = ("topic_attention_mean", "topic_attention_best_head", "embedding_topic_similarity",
            "value_block_structure")
N_PERMUTATIONS = 1000  # the smallest p, 1/1001, Holm-adjusted over the 4 findings (0.004) clears ALPHA = 0.01
N_BOOT = 1000
FINDING_BATCH = 8  # held-out documents per bootstrap unit of the attention ratio
VALUE_MIN_EFFECT = 0.25

JOINT_VARIANT: Mapping[str, str] = MappingProxyType({"embedding": "trained"})
"""The jointly trained model (claims 1 and 3): every weight trained."""
UNIFORM_VARIANT: Mapping[str, str] = MappingProxyType(
    {"embedding": "one_hot_frozen", "attention": "uniform_frozen", "decoder": "identity_frozen"})
"""The W_V model (claim 2): only W_V trained."""

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


def held_out_documents(config: TopicExperimentConfig, *, masked: bool = False) -> Tensor:
    """``config.eval_documents`` held-out documents of length ``lda.max_len`` (no padding), unmasked or masked,
    drawn from ``config.seed + 10_000``: every measurement of the experiment reads these."""
    lda = config.lda
    generator = torch.Generator().manual_seed(config.seed + 10_000)
    documents = sample_documents(lda, config.eval_documents, generator, length=lda.max_len)
    return mask_documents(documents, config.masking, generator, lda=lda).inputs if masked else documents.tokens


def _attention_findings(model: TopicModel, config: TopicExperimentConfig) -> dict[str, Finding]:
    probe = TopicAttentionProbe(config.lda.token_topics(), n_permutations=N_PERMUTATIONS,
                                permutation_seed=config.seed)
    recorder = BatchStateRecorder(keys=lambda key: key in TOPIC_UNIT_KEYS)
    batches = list(held_out_documents(config).split(FINDING_BATCH))
    feed_probes(model, [probe], batches, data="held-out LDA documents (unmasked)", seed=config.seed, progress=False,
                on_batch=recorder)
    held = topic_mean_over_heads(probe.compute(), recorder.per_unit(0), n_boot=N_BOOT, seed=config.seed)
    return {name: finding_from_spec(name, held.value, held.ci, held.null_value, held.p_value, statistic=statistic,
                                    selection=_ONE_HEAD)
            for name, statistic in _ATTENTION_STATISTICS.items()}


def _embedding_finding(model: TopicModel, config: TopicExperimentConfig) -> Finding:
    words = config.lda.n_words
    test = embedding_topic_test(model.W_E.detach()[:words].cpu(), config.lda.token_topics()[:words],
                                n_permutations=N_PERMUTATIONS, n_boot=N_BOOT, seed=config.seed)
    return finding_from_spec(
        "embedding_topic_similarity", test.gap[EMBEDDING_MEASURE], test.gap_ci[EMBEDDING_MEASURE],
        test.null_mean(EMBEDDING_MEASURE), test.p_value[EMBEDDING_MEASURE],
        statistic="mean-centred embedding cosine, same minus different topic (joint topic toy, the words' rows)")


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
    null = torch.tensor([block_structure(value, permuted, centre_columns=centre).score
                         for permuted in label_permutations(labels, N_PERMUTATIONS, seed=config.seed)])
    return Finding(
        f"block score of W_V over the words{', columns centred' if centre else ''} (uniform topic toy: one-hot "
        f"frozen embeddings, uniform frozen attention, identity decoder, W_V trained)",
        score, (float(low), float(high)), "topic labels permuted among the words", float(null.mean()),
        float(permutation_p_value(torch.tensor(score), null)), VALUE_MIN_EFFECT, "difference",
        selection="no search: W_V of the uniform toy; 95% bootstrap over its columns (input words)")


def _measure(joint: TopicModel, uniform: TopicModel, config: TopicExperimentConfig) -> dict[str, Finding]:
    """The unadjusted findings of one joint and one uniform model, in :data:`FINDINGS` order."""
    measured = {**_attention_findings(joint, config),
                "embedding_topic_similarity": _embedding_finding(joint, config),
                "value_block_structure": _value_finding(uniform, config)}
    return {name: measured[name] for name in FINDINGS}


def judge_trained(joint: TopicModel, uniform: TopicModel, config: TopicExperimentConfig) -> SeedFindings:
    """The findings of the trained ``joint`` and ``uniform`` models of ``config.seed`` beside the same models at
    initialisation (rebuilt from their configs: same seed, same weights at step 0), measured on the same
    held-out documents."""
    init = [TopicModel(model.cfg, device=config.device) for model in (joint, uniform)]
    return judge_against_init(_measure(joint, uniform, config), _measure(*init, config), config.seed)


def seed_findings(config: TopicExperimentConfig, seed: int, *, joint_variant: Mapping[str, str] = JOINT_VARIANT,
                  uniform_variant: Mapping[str, str] = UNIFORM_VARIANT) -> SeedFindings:
    """Train the joint and the uniform model of ``config`` at ``seed`` (as ``run`` does, without files or
    figures, on one thread) and judge their findings against themselves at initialisation.

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
        return judge_trained(joint, uniform, config)
