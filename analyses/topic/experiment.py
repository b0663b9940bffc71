"""``run(config, out_dir) -> TopicResult``: Li, Li & Risteski (2023) on LDA data, the four claims as numbers.

Variants trained (all one layer, one head, no residual / LayerNorm / MLP, masked LM):

1. *joint*: trained embeddings, everything trained (Adam) -> claim 1 (same-topic embeddings are
   more similar) and claim 3 (same-topic attention > different-topic attention);
2. *uniform*: one-hot frozen embeddings, attention frozen uniform (W_K = W_Q = 0), W_V trained,
   decoder frozen to the identity -> claim 2 (W_V is block-wise); a second run with a trained
   decoder scores W_V alone and the product W_dec W_V;
3. *fixed value*: one-hot embeddings, W_V frozen (block-wise or identity), W_K, W_Q trained
   -> claim 3 with W_V fixed;
4. *two-stage*: one-hot embeddings, W_V, W_K, W_Q, decoder trained jointly with plain SGD
   (no momentum, large lr) from a small init -> claim 4 (||W_V|| grows first, then W_K, W_Q move);
5. optionally a standard bidirectional TransformerLens model (``standard.n_steps > 0``).

Losses: cross-entropy for every stage (the paper's experiments; ``STAGE.loss=squared`` gives its
theory's loss). The W_V stage adds Theorem 2's ``uniform.value_l2 * ||W_V||_F^2``, and under
cross-entropy W_V's columns are centred before block-scoring (a column offset does not change
that loss). ``model.qkv_bias`` / ``model.scale_scores`` add the reference code's (BERT's) attention biases and
1/sqrt(d) score scaling to every model (off: the paper's formula). ``summary.json["reference"]``
names the paper, the experiment and the deviations that remain (:mod:`analyses.topic.reference`).
Settings and presets: :mod:`analyses.topic.config`; the result: :mod:`analyses.topic.result`; figures:
:mod:`analyses.topic.figures`. The toy findings (``result.findings``) of ``config.seed`` are measured on the
joint and uniform models and the two-stage run (its weights' displacement from initialisation, recorded in
``history_two_stage.json``) trained here, beside themselves at initialisation (:mod:`analyses.topic.findings`);
``seed_findings(config, seed)`` trains only those three models for a further seed.

Topic attention is measured on *unmasked* held-out documents (as the reference code does);
``same_token_attention`` counts a position's attention to itself, as the reference code does.
``masked_documents_attention_ratio`` is the same ratio on masked documents, where ``[MASK]``
positions carry no topic and so are neither queries nor keys of any counted pair.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import torch

from analyses.curve_series import save_curve_series
from analyses.paper_result import Claim
from analyses.timings import write_timings
from analyses.topic.config import PRESET_REFERENCES, PRESETS, STAGES, TopicExperimentConfig, TopicModelSettings
from analyses.topic.figures import TopicFigureData, plot_topic_figures
from analyses.topic.findings import (
    FINDINGS,  # re-exported: the report's extra seeds call seed_findings
    JOINT_VARIANT,
    UNIFORM_VARIANT,
    held_out_documents,
    judge_trained,
    seed_findings,
    topic_model,
)
from analyses.topic.order import ORDER, order_series
from analyses.topic.reference import topic_reference
from analyses.topic.result import AttentionNumbers, TopicResult, TwoStageNumbers
from analyses.torch_threads import torch_threads
from analyses.toy_findings import aggregate_seeds
from analyses.toy_model_store import save_toy_model
from probes.attention.same_token_attention import SameTokenAttention, SameTokenAttentionProbe
from probes.attention.topic_attention import TopicAttention, TopicAttentionProbe
from probes.core.errors import ConfigError
from probes.core.model_kind import HookedModel
from probes.core.runner import run_probes
from probes.dynamics.block_structure import block_structure, centre_columns, centred_block_ceiling
from probes.dynamics.embedding_topics import embedding_topic_similarity
from probes.dynamics.two_stage import detect_two_stage
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.topic.training import (
    MaskedLMData,
    record_attention_norms,
    record_value,
    record_weight_displacement,
    train_topic_model,
    training_fingerprint,
)
from toymodels.training import Checkpointer, History

__all__ = ["FINDINGS", "PRESETS", "PRESET_REFERENCES", "STAGES", "TopicExperimentConfig", "TopicModelSettings",
           "TopicResult", "measure_topic_attention", "result_from_summary", "run", "seed_findings"]

log = logging.getLogger(__name__)

result_from_summary = TopicResult.from_document  # the report's way back from summary.json

CHECKPOINT_EVERY = 500


def _eval_batches(config: TopicExperimentConfig, *, masked: bool) -> list[torch.Tensor]:
    """The held-out documents (:func:`~analyses.topic.findings.held_out_documents`) in batches of 32."""
    return list(held_out_documents(config, masked=masked).split(32))


def measure_topic_attention(model: HookedModel, config: TopicExperimentConfig, *,
                            masked: bool = False) -> tuple[TopicAttention, SameTokenAttention]:
    """Topic attention and same-token attention of ``model`` on held-out documents (unmasked unless ``masked``)."""
    labels = config.lda.token_topics()
    probes_ = [TopicAttentionProbe(labels), SameTokenAttentionProbe(labels)]
    data = f"LDA documents ({'masked' if masked else 'unmasked'}, N={config.lda.max_len}, seed={config.seed + 10_000})"
    topic, same_token = run_probes(model, probes_, _eval_batches(config, masked=masked), data=data, progress=False)
    assert isinstance(topic, TopicAttention) and isinstance(same_token, SameTokenAttention)
    return topic, same_token


def _attention_numbers(measured: tuple[TopicAttention, SameTokenAttention]) -> AttentionNumbers:
    """The attention numbers of the model's only head (see :class:`AttentionNumbers`)."""
    result, same_token = measured
    return AttentionNumbers(
        same_topic_attention=float(result.mean["same_topic"][0, 0]),
        different_topic_attention=float(result.mean["different_topic"][0, 0]),
        same_token_attention=float(same_token.mean[0, 0]),
        same_token_attention_self=float(same_token.mean_self[0, 0]),
        same_token_attention_other_positions=float(same_token.mean_other[0, 0]),
        same_token_chance_attention=float(same_token.chance["all"]),
        attention_ratio=float(result.ratio[0, 0]),
        chance_attention=float(result.chance["same_topic"]),
        chance_ratio=float(result.chance_ratio),
    )


def _train(model: torch.nn.Module, config: TopicExperimentConfig, data: MaskedLMData, stage: str, out_dir: Path,
           progress: bool, callbacks: list | None = None, name: str | None = None) -> History:
    """Train with ``stage``'s settings; save the history as ``history_{name}.json``."""
    name = name or stage
    started = time.perf_counter()
    training = config.training(stage)
    checkpointer = None
    if config.checkpoints:
        checkpointer = Checkpointer(out_dir / "checkpoints" / name, every=CHECKPOINT_EVERY,
                                    fingerprint=training_fingerprint(model, data, training))
    history = train_topic_model(model, data, training,
                                callbacks=[record_attention_norms(config.record_every), *(callbacks or [])],
                                checkpointer=checkpointer, progress=progress)
    history.save(out_dir / f"history_{name}.json")
    log.info("trained %s in %.1f s", name, time.perf_counter() - started)
    return history


def run(config: TopicExperimentConfig, out_dir: str | Path, *, progress: bool = True) -> TopicResult:
    """Train the variants, probe them, write ``summary.json`` (``result.save``), the histories and figures
    into ``out_dir``; return the :class:`TopicResult`.

    The models are tiny, so torch runs on one thread meanwhile (several threads only add overhead).
    Example: ``run(PRESETS["fast"], "runs/topic").attention_ratio``.
    """
    with torch_threads(1):
        return _run(config, Path(out_dir), progress)


def _run(config: TopicExperimentConfig, out_dir: Path, progress: bool) -> TopicResult:
    if not isinstance(config, TopicExperimentConfig):
        raise ConfigError(f"run() expects a TopicExperimentConfig; got {type(config).__name__}.")
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    lda = config.lda
    labels = lda.token_topics()
    word_labels = labels[: lda.n_words]
    data = MaskedLMData(lda, config.masking, config.data, seed=config.seed)
    histories: dict[str, History] = {}

    def train(model: torch.nn.Module, stage: str, callbacks: list | None = None, name: str | None = None) -> History:
        history = _train(model, config, data, stage, out_dir, progress, callbacks, name)
        histories[name or stage] = history
        return history

    # 1. joint training, trained embeddings: claims 1 and 3
    joint = topic_model(config, **JOINT_VARIANT)
    train(joint, "joint")
    save_toy_model(joint, out_dir, "topic")  # the jointly trained model: mechprobe probe-linear --model OUT
    attention, joint_same_token = measure_topic_attention(joint, config)
    masked_attention, _ = measure_topic_attention(joint, config, masked=True)
    joint_numbers = _attention_numbers((attention, joint_same_token))
    embedding = joint.W_E.detach()[: lda.n_words].cpu()
    similarity = embedding_topic_similarity(embedding, word_labels)
    gram_blocks = block_structure(embedding @ embedding.T, word_labels)
    joint_setting = {"variant": "joint", "embedding": "trained", "attention": "trained", "value": "trained",
                     "loss": config.joint.loss, "optimizer": config.joint.optimizer, "lr": config.joint.lr,
                     "steps": config.joint.n_steps, "d_model": config.model.d_model}
    claims = [
        Claim("1_embedding_topic_structure", similarity.same_topic_cosine - similarity.different_topic_cosine,
              "same-topic minus different-topic embedding cosine",
              similarity.same_topic_cosine > similarity.different_topic_cosine, joint_setting),
        Claim("3_topic_attention_joint", joint_numbers.attention_ratio,
              "same-topic / different-topic mean attention (unmasked docs)", joint_numbers.attention_ratio > 1.0,
              joint_setting),
    ]

    # 2. uniform attention, W_V trained: claim 2
    uniform = topic_model(config, **UNIFORM_VARIANT)
    train(uniform, "uniform")
    value = uniform.W_V.detach()[: lda.n_words, : lda.n_words].cpu()
    # cross-entropy ignores a constant added to a column of W_V (softmax over logits W_V Z a, sum(a) = 1)
    centre = config.uniform.loss == "cross_entropy"
    value_blocks = block_structure(value, word_labels, centre_columns=centre)
    uniform_decoder = topic_model(config, embedding="one_hot_frozen", attention="uniform_frozen")
    train(uniform_decoder, "uniform", name="uniform_trained_decoder")
    value_alone = uniform_decoder.W_V.detach()[: lda.n_words, : lda.n_words].cpu()
    product = (uniform_decoder.W_dec.detach() @ uniform_decoder.W_V.detach())[:, : lda.n_words].cpu()
    ceiling = centred_block_ceiling(word_labels) if centre else 1.0
    claims.append(Claim(
        "2_value_block_structure", value_blocks.score,
        "block score of W_V (off-diagonal; columns centred under cross-entropy; 1 = block-diagonal "
        f"before centring, {ceiling:.3f} = the ideal block matrix after it, 0 = none); holds above half the ideal's "
        "score",
        value_blocks.score > 0.5 * ceiling and value_blocks.within_mean > value_blocks.between_mean,
        {"variant": "uniform", "embedding": "one_hot_frozen", "attention": "uniform_frozen", "value": "trained",
         "decoder": "identity_frozen", "loss": config.uniform.loss, "optimizer": "adam", "lr": config.uniform.lr,
         "steps": config.uniform.n_steps, "value_l2": config.uniform.value_l2, "columns_centred": centre},
    ))

    # 3. W_V frozen, attention trained: claim 3 with fixed W_V
    fixed = topic_model(config, embedding="one_hot_frozen", value=config.frozen_value)
    train(fixed, "fixed_value")
    fixed_attention, fixed_same_token = measure_topic_attention(fixed, config)
    fixed_numbers = _attention_numbers((fixed_attention, fixed_same_token))
    claims.append(Claim(
        "3_topic_attention_fixed_value", fixed_numbers.attention_ratio,
        "same-topic / different-topic mean attention (unmasked docs)", fixed_numbers.attention_ratio > 1.0,
        {"variant": "fixed_value", "embedding": "one_hot_frozen", "attention": "trained", "value": config.frozen_value,
         "loss": config.fixed_value.loss, "optimizer": "adam", "lr": config.fixed_value.lr,
         "steps": config.fixed_value.n_steps},
    ))

    # 4. two-stage dynamics
    staged = topic_model(config, embedding="one_hot_frozen")
    ratio_probe_every = max(config.record_every, config.two_stage.n_steps // 20)
    probe_batch = _eval_batches(config, masked=False)[0][:8]

    def attention_ratio(model: HookedModel) -> float:  # same/different-topic ratio on 8 held-out documents
        (result,) = run_probes(model, [TopicAttentionProbe(labels)], [probe_batch], progress=False)
        return float(result.ratio[0, 0])

    history = train(staged, "two_stage",
                    callbacks=[record_value("attention_ratio", attention_ratio, ratio_probe_every),
                               record_weight_displacement(staged, config.record_every)])
    findings = aggregate_seeds("topic", [judge_trained(joint, uniform, history, config)])  # config.seed's findings
    save_curve_series(order_series(history, findings[ORDER].first), out_dir)  # the report's shared-axis figure
    stages = detect_two_stage(history.steps, {name: history.column(name) for name in history.values})
    two_stage = TwoStageNumbers(stages.first_moves_at, stages.first_plateaus_at, stages.second_moves_at,
                                stages.second_progress_at_first_plateau, stages.separated, dict(stages.events),
                                attention_ratio(staged))
    claims.append(Claim(
        "4_two_stage_dynamics", stages.second_progress_at_first_plateau,
        "fraction of the W_K/W_Q norm change done when ||W_V|| plateaus (0 = fully separated stages)",
        stages.separated,
        {"variant": "two_stage", "embedding": "one_hot_frozen", "attention": "trained", "value": "trained",
         "decoder": "trained", "loss": config.two_stage.loss, "optimizer": config.two_stage.optimizer,
         "momentum": 0.0, "lr": config.two_stage.lr, "steps": config.two_stage.n_steps,
         "init_std": config.model.init_std},
    ))

    # 5. standard bidirectional TransformerLens model
    standard_numbers = None
    if config.standard.n_steps > 0:
        standard = build_standard_model(StandardModelConfig(
            n_layers=1, n_heads=1, d_model=config.model.d_model, d_vocab=lda.vocab_size, n_ctx=lda.max_len,
            attn_only=True, positional="none", attention_dir="bidirectional", normalization="none", seed=config.seed),
            device=config.device)
        train(standard, "standard")
        standard_numbers = _attention_numbers(measure_topic_attention(standard, config))

    figure_data = TopicFigureData(
        embedding_gram=(embedding @ embedding.T).numpy(),
        value=(centre_columns(value, word_labels) if centre else value).numpy(),
        decoder_value=(centre_columns(product, word_labels) if centre else product).numpy(), value_centred=centre,
        attention_joint=attention.by_topic[0, 0].numpy(), attention_fixed_value=fixed_attention.by_topic[0, 0].numpy())
    result = TopicResult(
        **dataclasses.asdict(joint_numbers),
        masked_documents_attention_ratio=float(masked_attention.ratio[0, 0]),
        embedding_same_topic_cosine=similarity.same_topic_cosine,
        embedding_different_topic_cosine=similarity.different_topic_cosine,
        embedding_same_topic_dot=similarity.same_topic_dot,
        embedding_different_topic_dot=similarity.different_topic_dot,
        embedding_gram_block_score=gram_blocks.score,
        findings=findings,
        wv_block_score=value_blocks.score,
        wv_block=value_blocks,
        wv_block_score_uncentred=block_structure(value, word_labels).score,
        wv_block_score_ceiling=ceiling,
        wv_block_score_trained_decoder=block_structure(value_alone, word_labels, centre_columns=centre).score,
        decoder_wv_block_score_trained_decoder=block_structure(product, word_labels, centre_columns=centre).score,
        fixed_value_attention=fixed_numbers,
        two_stage=two_stage,
        standard_model=standard_numbers,
        claims=tuple(claims),
        reference=topic_reference(config),
        config=config,
        figures=tuple(plot_topic_figures(figure_data, history, stages, out_dir)),
        histories=histories,
    )
    write_timings(out_dir, {"total": time.perf_counter() - started})
    result.save(out_dir)
    return result
