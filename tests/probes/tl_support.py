"""Which TransformerLens the tests run on (3.9 under ``make test-tl3``, 4.x otherwise) and skip marks for what only
one of them has. Kept short on purpose: everything else runs on both.

- ``HookedTransformer`` / ``HookedEncoder``: TransformerLens 3.x only (4.0 removed them).
- A bridge adapter for RoBERTa (``RobertaForMaskedLM``): TransformerLens 4.x only (3.9's TransformerBridge cannot
  wrap it), so the tiny random RoBERTa checkpoint is skipped on 3.9.
"""

from __future__ import annotations

import importlib.metadata

import pytest

from probes.core.model_kind import has_hooked_transformer
from tests.random_checkpoints import RANDOM_CHECKPOINTS

TL_VERSION = importlib.metadata.version("transformer-lens")

needs_hooked_transformer = pytest.mark.skipif(
    not has_hooked_transformer(),
    reason=f"TransformerLens {TL_VERSION} has no HookedTransformer (removed in 4.0); make test-tl3 runs this on 3.9",
)


def bridge_adapts(architecture: str) -> bool:
    """Whether this TransformerLens's TransformerBridge can wrap the Hugging Face ``architecture``."""
    from transformer_lens.factories.architecture_adapter_factory import SUPPORTED_ARCHITECTURES

    return architecture in SUPPORTED_ARCHITECTURES


def needs_bridge_adapter(architecture: str) -> pytest.MarkDecorator:
    return pytest.mark.skipif(
        not bridge_adapts(architecture),
        reason=f"TransformerLens {TL_VERSION}'s TransformerBridge has no {architecture} adapter (4.x has one)",
    )


def checkpoint_kinds() -> list:
    """The random checkpoint kinds as pytest parameters; a kind whose architecture this bridge cannot wrap is skipped
    with the reason."""
    return [pytest.param(kind, marks=needs_bridge_adapter(spec.architecture))
            for kind, spec in RANDOM_CHECKPOINTS.items()]


def loadable_checkpoint_kinds() -> list[str]:
    """The random checkpoint kinds this TransformerLens's bridge can wrap (for fixtures that load them all)."""
    return [kind for kind, spec in RANDOM_CHECKPOINTS.items() if bridge_adapts(spec.architecture)]
