"""Measures on weights and on training histories: embedding topic structure, block structure,
snap and two-stage detection, scan order.

Modules: block_structure, embedding_topics, scan_order, snap, two_stage.
"""

from probes.dynamics.block_structure import BlockStructure, block_structure, centre_columns, centred_block_ceiling
from probes.dynamics.embedding_topics import (
    EMBEDDING_MEASURES,
    EmbeddingTopicSimilarity,
    EmbeddingTopicTest,
    embedding_topic_similarity,
    embedding_topic_test,
)
from probes.dynamics.scan_order import ScanOrder, peak_steps, scan_order
from probes.dynamics.snap import RateSnap, SnapPoint, detect_snap, detect_snap_by_rate
from probes.dynamics.two_stage import NormEvents, TwoStage, detect_two_stage, norm_events

__all__ = [
    "EMBEDDING_MEASURES", "BlockStructure", "EmbeddingTopicSimilarity", "EmbeddingTopicTest", "NormEvents",
    "RateSnap", "ScanOrder", "SnapPoint", "TwoStage", "block_structure", "centre_columns", "centred_block_ceiling",
    "detect_snap", "detect_snap_by_rate", "detect_two_stage", "embedding_topic_similarity", "embedding_topic_test",
    "norm_events", "peak_steps", "scan_order",
]
