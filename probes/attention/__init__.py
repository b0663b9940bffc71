"""Probes of attention patterns: head scores, topic, same-token and key-token attention, the generalized
induction score, the copier and the selector.

Modules: copier, generalized_induction, head_patterns, head_scores, key_token_attention, repeated_tokens,
same_token_attention, selector, topic_attention.
"""

from probes.attention.copier import CopierProbe, CopierProfile
from probes.attention.generalized_induction import (
    GeneralizedInductionProbe,
    GeneralizedInductionScores,
    parent_match_mask,
)
from probes.attention.head_patterns import HEAD_PATTERNS, HeadPattern, head_pattern
from probes.attention.head_scores import HEAD_SCORE_KINDS, HeadScoreProbe, HeadScores, head_scores, target_mask
from probes.attention.key_token_attention import KeyTokenAttention, KeyTokenAttentionProbe, entropy_nats
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.attention.same_token_attention import SameTokenAttention, SameTokenAttentionProbe, same_token_attention
from probes.attention.selector import (
    ParentSubsetAttention,
    ParentSubsetAttentionProbe,
    SelectorShares,
    SelectorWeightProbe,
)
from probes.attention.topic_attention import TOPIC_PAIR_KINDS, TopicAttention, TopicAttentionProbe, topic_attention

__all__ = [
    "HEAD_PATTERNS", "HEAD_SCORE_KINDS", "TOPIC_PAIR_KINDS", "CopierProbe", "CopierProfile",
    "GeneralizedInductionProbe", "GeneralizedInductionScores", "HeadPattern", "HeadScoreProbe", "HeadScores",
    "KeyTokenAttention", "KeyTokenAttentionProbe", "ParentSubsetAttention", "ParentSubsetAttentionProbe",
    "SameTokenAttention", "SameTokenAttentionProbe", "SelectorShares", "SelectorWeightProbe", "TopicAttention",
    "TopicAttentionProbe", "entropy_nats", "head_pattern", "head_scores", "parent_match_mask",
    "repeated_random_tokens", "same_token_attention", "target_mask", "topic_attention",
]
