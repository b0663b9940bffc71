"""Measures on weights and on training histories: embedding topic structure, block structure, snap and two-stage
detection, scan order, change points of probe curves over checkpoints and the order of two events.

Modules: block_structure, change_point (a curve's rise with a bootstrap interval over batches, and the order of
two rises), embedding_topics, event_orders (orders of events on exactly known curves, Scan and Snap's order),
scan_order, snap, two_stage. ``__all__`` is the public API; the modules' other names are the pieces these are
built from.
"""

from probes.dynamics.block_structure import BlockStructure, block_structure, centre_columns, centred_block_ceiling
from probes.dynamics.change_point import (
    ChangePoint,
    CurveEvent,
    CurveUnits,
    EventOrder,
    change_point,
    curve_event,
    event_order,
)
from probes.dynamics.embedding_topics import (
    EMBEDDING_MEASURES,
    EmbeddingTopicSimilarity,
    EmbeddingTopicTest,
    embedding_topic_similarity,
    embedding_topic_test,
)
from probes.dynamics.event_orders import ExactOrder, ScanSnapOrder, composition_displacement, scan_snap_order
from probes.dynamics.scan_order import ScanOrder, peak_steps, scan_order
from probes.dynamics.snap import RateSnap, SnapPoint, detect_snap, detect_snap_by_rate
from probes.dynamics.two_stage import NormEvents, TwoStage, detect_two_stage, norm_events

__all__ = [
    "EMBEDDING_MEASURES", "BlockStructure", "ChangePoint", "CurveEvent", "CurveUnits", "EmbeddingTopicSimilarity",
    "EmbeddingTopicTest", "EventOrder", "ExactOrder", "NormEvents", "RateSnap", "ScanOrder", "ScanSnapOrder",
    "SnapPoint", "TwoStage", "block_structure", "centre_columns", "centred_block_ceiling", "change_point",
    "composition_displacement", "curve_event", "detect_snap", "detect_snap_by_rate", "detect_two_stage",
    "embedding_topic_similarity", "embedding_topic_test", "event_order", "norm_events", "peak_steps",
    "scan_order", "scan_snap_order",
]
