"""Real text and the statistics of tokens alone: corpora, gensim LDA topics, token batches,
co-occurrence ordering, the chi-square parent criterion.

Modules: cooccurrence, corpora, parent_criterion, text_batches, token_topics, topic_coherence, topics.
"""

from probes.text.cooccurrence import (
    CooccurrenceOrdering,
    cooccurrence_ordering,
    cooccurrence_probability,
    count_cooccurrence,
    kendall_tau_b,
    ordering_null,
    spearman,
)
from probes.text.corpora import Document, corpus_digest, iter_documents
from probes.text.parent_criterion import (
    ParentCriterion,
    ParentCriterionProbe,
    PopulationParentCriterion,
    chi_square_parent_criterion,
    modified_chi_square_mi,
    population_parent_criterion,
    stationary_distribution,
)
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import TokenTopicMap, token_topic_labels
from probes.text.topics import LdaTopicConfig, LdaTopics, assign_word_topics, fit_lda_topics

__all__ = [
    "CooccurrenceOrdering", "Document", "LdaTopicConfig", "LdaTopics", "ParentCriterion", "ParentCriterionProbe",
    "PopulationParentCriterion", "TokenTopicMap", "assign_word_topics", "chi_square_parent_criterion",
    "cooccurrence_ordering", "cooccurrence_probability", "corpus_digest", "count_cooccurrence", "fit_lda_topics",
    "iter_documents", "kendall_tau_b", "modified_chi_square_mi", "ordering_null", "population_parent_criterion",
    "spearman", "stationary_distribution", "text_token_batches", "token_topic_labels",
]
