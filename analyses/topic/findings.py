"""The topic toy's findings in the schema of the pretrained ones (:mod:`analyses.pretrained.findings`).

The trained 1-layer model of Li et al. is judged exactly like a pretrained model: same-topic attention
with a label-permutation null and a bootstrap over batches of held-out documents, embedding topic
similarity with its permutation null, and as the control the same model at initialisation (the same
architecture with random weights, before any training).
"""

from __future__ import annotations

from typing import Any

import torch

from analyses.pretrained.held_out import TOPIC_UNIT_KEYS, topic_ratio
from analyses.pretrained.findings import finding_from_spec
from probes import feed_probes
from probes.stats.bootstrap import BatchStateRecorder, bootstrap_interval
from probes.dynamics.embedding_topics import embedding_topic_test
from probes.stats.findings import Finding, adjust_family
from probes.stats.nulls import permutation_p_value
from probes.attention.topic_attention import TopicAttentionProbe

N_PERMUTATIONS = 1000
N_BOOT = 1000
FINDING_BATCH = 8  # held-out documents per bootstrap unit


def _measure(model: Any, batches: list[torch.Tensor], labels: torch.Tensor, word_labels: torch.Tensor,
             n_words: int, seed: int) -> dict[str, Finding]:
    probe = TopicAttentionProbe(labels, n_permutations=N_PERMUTATIONS, permutation_seed=seed)
    recorder = BatchStateRecorder(keys=lambda key: key in TOPIC_UNIT_KEYS)
    feed_probes(model, [probe], batches, data="held-out LDA documents", seed=seed, progress=False, on_batch=recorder)
    result = probe.compute()
    _, low, high = bootstrap_interval(recorder.per_unit(0), lambda s: topic_ratio(s)[:, 0, 0], n_boot=N_BOOT,
                                      seed=seed)
    value = float(result.ratio[0, 0])
    null = result.null_ratio[:, 0, 0]
    attention = finding_from_spec("topic_attention_best_head", value, (float(low), float(high)),
                                  float(null.nanmean()), float(permutation_p_value(torch.tensor(value), null)),
                                  selection="no search: the model's only head (L0H0)")
    test = embedding_topic_test(model.W_E.detach()[:n_words].cpu(), word_labels, n_permutations=N_PERMUTATIONS,
                                n_boot=N_BOOT, seed=seed)
    embedding = finding_from_spec("embedding_topic_similarity", test.gap["centred_cosine"],
                                  test.gap_ci["centred_cosine"], test.null_mean("centred_cosine"),
                                  test.p_value["centred_cosine"])
    return {"topic_attention_best_head": attention, "embedding_topic_similarity": embedding}


def topic_toy_findings(trained: Any, untrained: Any, documents: torch.Tensor, labels: torch.Tensor,
                       n_words: int, seed: int) -> dict[str, dict[str, Any]]:
    """summary.json ``findings`` of the topic toy: the trained model beside itself at initialisation."""
    batches = list(documents.split(FINDING_BATCH))
    word_labels = labels[:n_words]
    own = _measure(trained, batches, labels, word_labels, n_words, seed)
    control = adjust_family(_measure(untrained, batches, labels, word_labels, n_words, seed))
    own = adjust_family({name: f.with_control(control[name].value, control[name].ci) for name, f in own.items()})
    return {name: finding.to_dict() for name, finding in own.items()}
