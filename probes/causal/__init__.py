"""Causal checks: knock heads out at ``blocks.{l}.attn.hook_z`` and measure the loss the model loses on a slice of
positions, beside random head sets matched layer by layer (the null "any k heads?").

Modules: slices (which positions count), head_sets (validated heads, random matched sets, derangements), means
(the first pass of mean ablation), token_loss (next-token or masked-token loss, summed at the slice positions only),
routes (the forward passes: blocks below the ablated layers shared with the clean pass, unembedding at the slice
positions, fused attention, each checked on the model), pass_size (how many head sets one pass carries: a byte
budget, halved after an out-of-memory error), ablation (the streaming measurement and its additive sums), null
(the random-head null drawn in groups and stopped once its decision is known), result (:class:`HeadAblation`
and :func:`head_ablation`). Edges between heads by path patching: edge_plan (an edge through one receiver input and
the null's random edges of its shape), edges (the passes and their additive sums), edge_null (the edge beside its
null, :class:`EdgeEffect` and :func:`edge_effect`), composition (Elhage et al.'s weight-only K-, Q- and
V-composition scores of every head pair and their rank correlation with patched effects).

Example::

    result = probes.head_ablation(model, [(1, 0)], batches, slices={"repeated_half": probes.repeated_half(50)},
                                  method="mean", n_draws=200)
"""

from probes.causal.ablation import ABLATION_METHODS, AblationPlan, AblationSums, ablation_sums, batch_ablation_sums
from probes.causal.composition import CompositionScores, composition_scores, screen_rank_correlation
from probes.causal.edge_null import EdgeEffect, edge_effect, edge_with_null
from probes.causal.edge_plan import EDGE_INPUTS, EdgePlan, distance_matched_edges
from probes.causal.edges import EFFECTS, EdgeSums, edge_sums
from probes.causal.head_sets import check_heads, derangement, layer_matched_head_sets
from probes.causal.means import HeadMeans, head_output_means, z_hook
from probes.causal.null import ablation_with_null, signed_contrast, slice_changes
from probes.causal.result import HeadAblation, head_ablation
from probes.causal.slices import (
                                  earlier_occurrence_mask,
                                  first_occurrence_mask,
                                  maskable_positions,
                                  masked_positions,
                                  predicted_positions,
                                  repeated_half,
)
from probes.causal.topic_slices import topic_seen_slice, topic_unseen_slice

__all__ = [
    "ABLATION_METHODS", "EDGE_INPUTS", "EFFECTS", "AblationPlan", "AblationSums", "CompositionScores", "EdgeEffect",
    "EdgePlan", "EdgeSums", "HeadAblation", "HeadMeans", "ablation_sums", "ablation_with_null", "batch_ablation_sums",
    "check_heads", "composition_scores", "derangement", "distance_matched_edges", "earlier_occurrence_mask",
    "edge_effect", "edge_sums", "edge_with_null", "first_occurrence_mask", "head_ablation", "head_output_means",
    "layer_matched_head_sets", "maskable_positions", "masked_positions", "predicted_positions", "repeated_half",
    "screen_rank_correlation", "signed_contrast", "slice_changes", "topic_seen_slice", "topic_unseen_slice", "z_hook",
]
