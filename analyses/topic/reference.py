"""What ``mechprobe toy topic`` reproduces of Li, Li & Risteski (2023), and where a configuration differs.

:func:`topic_reference` builds the :class:`~analyses.paper_reference.PaperReference` written to
``summary.json["reference"]``: fixed differences of this implementation, plus one sentence for every
setting of the given configuration that differs from the paper's synthetic experiment (so a
``--set`` override shows up as a deviation too). Sources: the paper (arXiv 2303.04245) and its
reference code (github.com/YuchenLi01/transformer_topic_model_LDA: ``src/transformer.py``,
``src/training_regimen.py``, ``src/dataset.py``, ``src/inspect_result.py`` and
``config/bert_lda_hiddenlayers1_heads1_lr0.01_one_hot.yaml``). Where they differ the paper's text
is followed unless a ``followed`` note says otherwise.
"""

from __future__ import annotations

from typing import Any

from analyses.paper_reference import LI_2023, PaperReference

EXPERIMENT = (
    "Synthetic LDA experiments (T = 10 topics x v = 10 words, alpha = 0.1, N = 100..150, 15% masking "
    "80/10/10; one layer, one head, no residual, LayerNorm or MLP): the trained-embedding Gram matrix and "
    "same-topic attention, the block-wise W_V under frozen uniform attention (Theorem 2), attention with W_V "
    "frozen, and the two-stage dynamics of ||W_V|| and ||W_K||, ||W_Q||"
)

# the paper's synthetic setting: setting (its --set path) -> (value, how to say it)
PAPER_SETTINGS: dict[str, tuple[Any, str]] = {
    "lda.n_topics": (10, "topics"),
    "lda.words_per_topic": (10, "words per topic"),
    "lda.alpha": (0.1, "Dirichlet alpha"),
    "lda.min_len": (100, "shortest document"),
    "lda.max_len": (150, "longest document"),
    "data.n_documents": (10_000, "training documents"),
    "masking.p_select": (0.15, "masking probability"),
    "masking.frac_mask": (0.8, "fraction of selected positions shown as [MASK]"),
    "masking.frac_random": (0.1, "fraction of selected positions shown as a random word"),
    "masking.frac_keep": (0.1, "fraction of selected positions left unchanged"),
}

FIXED_DEVIATIONS = (
    "Vocabulary: the words, [MASK] and [PAD] (n_words + 2 one-hot dimensions); the reference code also has "
    "[START] and [END] (104 ids) and prepends [START] to every document.",
    "Topic attention is measured on unmasked held-out documents of length max_len; the reference code cuts "
    "them to 100 tokens (with [START]) and rescales the attention by length / 100.",
    "Each stage trains for a fixed number of Adam/SGD steps; the reference code trains for epochs "
    "(20 of 10,000 documents at batch 40, lr 0.01, in its demo config) and keeps the best dev-loss checkpoint.",
    "Trained matrices start from N(0, init_std^2); the reference code keeps torch.nn.Linear's default uniform "
    "initialisation (its BERT post_init is disabled).",
    "The two-stage run (claim 4) uses plain SGD from a small initialisation with a large step size; its "
    "optimiser settings were chosen here to separate the stages in few steps, not taken from the paper.",
)

FOLLOWED = (
    "Paper over code: no biases on W_Q, W_K, W_V and no 1/sqrt(d) score scaling (the paper's formula); the "
    "reference code's BERT layer has both (--set model.qkv_bias=true model.scale_scores=true follows the code).",
    "Paper over code: the W_V stage minimises the masked-LM loss plus lambda * ||W_V||_F^2 (Theorem 2's "
    "regulariser, uniform.value_l2); the reference code adds weight_decay / 2 * ||p||_F computed on p.data, "
    "which carries no gradient, so its runs are unregularised.",
    "Paper: cross-entropy for the experiments; the squared loss of the theory stays selectable per stage.",
    "Code, where the paper is silent: masked positions are hidden from the attention keys, every training "
    "document is masked once, and same-token attention counts a position's attention to itself "
    "(i == j or the same token), as the reference code's statistics do.",
    "Under cross-entropy, W_V is block-scored after centring its columns (a constant added to a column does "
    "not change the loss), so wv_block_score ranges up to wv_block_score_ceiling rather than 1.",
)


def _setting_deviations(config: Any) -> list[str]:
    found = []
    for path, (paper, what) in PAPER_SETTINGS.items():
        section, name = path.split(".")
        value = getattr(getattr(config, section), name)
        if value != paper:
            found.append(f"{what}: {value} (paper: {paper}).")
    for stage in ("joint", "uniform", "fixed_value", "two_stage"):
        if getattr(config, stage).loss != "cross_entropy":
            found.append(f"{stage} stage trained with the squared loss of the paper's theory (its experiments use "
                         "cross-entropy).")
    if config.uniform.value_l2 == 0:
        found.append("W_V stage without L2 regularisation (Theorem 2 assumes lambda * ||W_V||_F^2 with lambda > 0).")
    if config.model.qkv_bias:
        found.append("Biases on W_Q, W_K, W_V (the reference code's BERT layer; not in the paper's formula).")
    if config.model.scale_scores:
        found.append("Attention scores scaled by 1/sqrt(d) (the reference code's BERT layer; not in the paper's "
                     "formula).")
    if not config.data.exclude_masked_keys:
        found.append("Masked positions stay visible as attention keys (the reference code hides them).")
    if not config.data.static_masks:
        found.append("Documents are re-masked every time they are drawn (the reference code masks each once).")
    l2 = {stage: getattr(config, stage).l2 for stage in ("joint", "uniform", "fixed_value", "two_stage", "standard")}
    if len(set(l2.values())) == 1:
        if l2["joint"]:
            found.append(f"Weight decay {l2['joint']} on every trained parameter (not in the paper's experiments).")
    else:
        found += [f"Weight decay {value} on every trained parameter of the {stage} stage (not in the paper's "
                  "experiments)." for stage, value in l2.items() if value]
    return found


def topic_reference(config: Any) -> PaperReference:
    """The paper reference of a ``TopicExperimentConfig``: fixed deviations plus those of its settings."""
    return PaperReference(paper=LI_2023, experiment=EXPERIMENT,
                          deviations=(*_setting_deviations(config), *FIXED_DEVIATIONS), followed=FOLLOWED)
