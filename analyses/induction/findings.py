"""The induction toy's findings (Chen et al. 2024) in the pretrained schema, judged against the toy at initialisation.

Five findings, measured with the pretrained suite's probe classes on the trained toy and on the same
toy at initialisation (same seed, same chains, same batches; :func:`analyses.toy_findings.judge_against_init`):

- ``induction_protocol``: ``HeadScoreProbe`` induction score of the best head on ``X X`` (a block of
  random states half a chain long, repeated once; no BOS: the toy has none). With 3 states every key
  just after an earlier copy of the current state is a target, about a third of the keys: chance ~0.33.
- ``induction_text``: the same score on held-out chains, the toy's natural text (sparse chains repeat
  themselves, so chance is higher still, ~0.57 on the paper's data).
- ``previous_token_text``: the previous-token score on the chains; on the simplified model the best head
  is the layer-1 copier at distance 1, whose attention depends on position only, so every batch gives
  the same value and its interval over batches has zero width.
- ``generalized_induction`` (the paper's own claim, toy-only): ``GeneralizedInductionProbe(order)``, the
  attention of a layer-2 head on keys whose ``order - 1`` preceding states equal the query's parents
  (the ``order - 1`` states ending at the query), on the chains. At least 0.1 attention mass above the
  larger of its uniform-attention chance and the control (:func:`generalized_induction_finding`).
- ``previous_token_causal`` (:mod:`analyses.induction.causal`): the loss change (nats/token) on held-out
  chains when the layer-1 copiers of the parent distances are zero-ablated, against the change when as many
  non-parent layer-1 heads are (the presets have one left over); sign-flip p over batches, at least 0.1
  nats/token above the larger of that null and the toy at initialisation. On the fast preset the ablated toy
  predicts the running state frequencies (0.74-0.86 nats, seeds 0-4), not the no-context ``log 3 = 1.099``.

Head scores pick the best head on the even batches and measure it on the odd ones
(:func:`~analyses.pretrained.held_out.held_out_head_score`: a bootstrap interval over batches, null =
the probe's own uniform-attention chance), exactly as for pretrained models. The generalized score of
the simplified / full model needs no search (its classifier is one head, shown as ``n_heads`` identical
copies in layer 2) and is measured on every batch; the standard model's best layer-2 head is chosen on
the even batches.

The simplified model's copier is planted at initialisation: head ``h`` starts with weight
``e^w+ / (e^w+ + (window - 1) e^w-)`` (0.72 for the fast preset) on distance ``h + 1``. So the
initialised toy already holds ``previous_token_text`` against its null, and a toy trained with layer 1
frozen at initialisation still learns induction (the selector and the classifier scale do the rest);
only a layer 1 frozen without the planted peak (``w_plus = w_minus``) switches the mechanism off.
With ``a_init = 1`` (the fast and staged presets) the initial classifier is already a weak n-gram head:
its generalized-induction excess over chance sits near the 0.1 threshold.

Example: ``seed_findings(PRESETS["fast"], 1).findings["generalized_induction"].holds``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from analyses.induction.causal import check_copiers, previous_token_causal
from analyses.induction.config import InductionExperimentConfig
from analyses.pretrained.findings import HEAD_SPLIT, finding_from_spec
from analyses.pretrained.held_out import HeldOut, halves, held_out_head_score
from analyses.torch_threads import torch_threads
from analyses.toy_findings import SeedFindings, judge_against_init
from probes import HeadScoreProbe, ModelInfo, feed_probes
from probes.attention.generalized_induction import GeneralizedInductionProbe
from probes.attention.repeated_tokens import repeated_random_tokens
from probes.core.batch import TokenBatch
from probes.core.errors import ConfigError
from probes.core.model_kind import HookedModel, as_hooked_model
from probes.stats.bootstrap import BatchStateRecorder
from probes.stats.findings import Finding
from toymodels.induction.data import sample_markov_icl
from toymodels.induction.full import FullInductionModel
from toymodels.induction.simplified import SimplifiedInductionModel
from toymodels.induction.training import train_on_fresh_chains, train_simplified
from toymodels.standard import build_standard_model

FINDINGS = ("induction_protocol", "induction_text", "previous_token_text", "generalized_induction",
            "previous_token_causal")
N_BOOT = 1000
PROTOCOL_BATCHES = 16  # of PROTOCOL_ROWS rows of X X: 8 pick the best head, 8 measure it
PROTOCOL_ROWS = 4
TEXT_UNITS = 16  # the held-out chains are split into this many batches (the bootstrap units)
MIN_UNITS = 4  # two halves of at least two batches each
VAL_SEED_OFFSET = 10_000  # the held-out chains are drawn with seed + this (training chains: seed)

GENERALIZED_STATISTIC = "generalized induction score of the best layer-2 head on held-out chains"
GENERALIZED_NULL = "uniform attention (bootstrap over batches)"
GENERALIZED_MIN_EFFECT = 0.1  # attention mass above the larger of the null and the control, like the head scores

_MODELS = {"simplified": "Chen et al.'s simplified two-layer model",
           "full": "Chen et al.'s full two-layer model (appendix B)",
           "standard": "a 2-layer TransformerLens model"}


# -- the toy and its data ---------------------------------------------------------------------------
def build_model(config: InductionExperimentConfig) -> nn.Module:
    """The configured model at initialisation (the same weights for the same ``config.seed``)."""
    torch.manual_seed(config.seed)
    if config.model == "standard":
        return build_standard_model(config.standard_model_config(), device=config.device)
    model_class = FullInductionModel if config.model == "full" else SimplifiedInductionModel
    return model_class(config.model_config(), device=config.device)


def held_out_chains(config: InductionExperimentConfig) -> Tensor:
    """The ``config.n_val`` held-out chains [n_val, L + 1] (never trained on: training draws with ``config.seed``)."""
    return sample_markov_icl(config.data, config.n_val, config.seed + VAL_SEED_OFFSET).tokens


def check_findings_data(config: InductionExperimentConfig) -> None:
    """Refuse, before any training, a config whose probed chains cannot be split into two halves of two batches."""
    if config.probe_sequences < MIN_UNITS:
        raise ConfigError(f"The induction findings need at least {MIN_UNITS} held-out chains to probe (two halves of "
                          f"two batches each); got probe_sequences = {config.probe_sequences}. Raise it (and n_val "
                          f"with it), e.g. --set probe_sequences=16 --set n_val=16.")
    check_copiers(config)


def _text_batches(chains: Tensor) -> list[Tensor]:
    """The chains in :data:`TEXT_UNITS` batches (fewer when there are fewer chains)."""
    return list(chains.tensor_split(min(TEXT_UNITS, chains.shape[0])))


def _protocol_batches(model: HookedModel, config: InductionExperimentConfig) -> tuple[list[TokenBatch], int]:
    """:data:`PROTOCOL_BATCHES` batches of ``X X`` (X: random states, half a chain long; seeded by
    ``config.seed``) and the length of X."""
    info = ModelInfo.of(model)
    length = max(2, config.data.seq_len // 2)
    generator = torch.Generator().manual_seed(config.seed)
    return [repeated_random_tokens(info, seq_len=length, n_sequences=PROTOCOL_ROWS, generator=generator,
                                   prepend_bos=False) for _ in range(PROTOCOL_BATCHES)], length


# -- measuring one model ----------------------------------------------------------------------------
def _held_out_scores(model: HookedModel, kinds: tuple[str, ...], batches: Sequence[Tensor | TokenBatch], *, data: str,
                     seed: int) -> dict[str, HeldOut]:
    """Each head score of ``kinds``: best head on the even batches, measured on the odd ones."""
    first, second = halves(batches)
    select, estimate = HeadScoreProbe(kinds), HeadScoreProbe(kinds)
    recorder = BatchStateRecorder()
    feed_probes(model, [select], first, data=data, seed=seed, progress=False)
    feed_probes(model, [estimate], second, data=data, seed=seed, progress=False, on_batch=recorder)
    selection = select.compute()
    return {kind: held_out_head_score(kind, selection, recorder.per_unit(0), n_boot=N_BOOT, seed=seed)
            for kind in kinds}


@dataclass(frozen=True)
class _LastLayerScores:
    """Generalized induction scores as :func:`held_out_head_score` reads them, every layer but the last masked."""

    scores: Mapping[str, Tensor]


def _generalized_scores(model: HookedModel, batches: Sequence[Tensor], order: int, *, data: str
                        ) -> tuple[_LastLayerScores, dict[str, Tensor]]:
    """The last layer's generalized induction scores on ``batches`` and each batch's state (keys renamed to
    the head-score probe's ``generalized/mass``, ``generalized/rows_with_target``, ``generalized/chance_mass``)."""
    probe = GeneralizedInductionProbe(order)
    recorder = BatchStateRecorder()
    feed_probes(model, [probe], batches, data=data, progress=False, on_batch=recorder)
    scores = probe.compute().scores.clone()
    scores[:-1] = float("nan")
    units = recorder.per_unit(0)
    per_batch = {"generalized/mass": units["full/mass"], "generalized/rows_with_target": units["rows_with_target"],
                 "generalized/chance_mass": units["full/chance_mass"]}
    return _LastLayerScores({"generalized": scores}), per_batch


def generalized_induction(model: nn.Module, batches: Sequence[Tensor], order: int, *, seed: int
                          ) -> tuple[HeldOut, str]:
    """The generalized induction score of the best layer-2 head with a bootstrap interval over batches and the
    uniform-attention chance as null, and how the head was chosen: no search where the classifier is one head
    (simplified / full model: every batch measures it), otherwise on the even batches, measured on the odd."""
    data, hooked = "held-out chains", as_hooked_model(model)
    if isinstance(model, SimplifiedInductionModel):
        scores, per_batch = _generalized_scores(hooked, batches, order, data=data)
        selection = (f"no search: the classifier's one head (layer 2 shows it as {model.cfg.n_heads} identical "
                     f"copies), measured on every batch")
    else:
        first, second = halves(batches)
        scores, _ = _generalized_scores(hooked, first, order, data=data)
        _, per_batch = _generalized_scores(hooked, second, order, data=data)
        selection = "best layer-2 head chosen on the even batches, measured on the odd batches"
    return held_out_head_score("generalized", scores, per_batch, n_boot=N_BOOT, seed=seed), selection


def generalized_induction_finding(held: HeldOut, *, statistic: str, selection: str) -> Finding:
    """The paper's claim as a finding: the score of ``held`` (its head appended to ``statistic``) against its
    uniform-attention chance, at least :data:`GENERALIZED_MIN_EFFECT` above the larger of it and the control."""
    layer, head = held.chosen_head()
    return Finding(f"{statistic} (L{layer}H{head})", held.value, held.ci, GENERALIZED_NULL, held.null_value,
                   held.p_value, GENERALIZED_MIN_EFFECT, "difference", selection=selection, n_units=held.n_units)


def measure_findings(model: nn.Module, config: InductionExperimentConfig, chains: Tensor) -> dict[str, Finding]:
    """The five findings of ``model`` (unadjusted, no control): head scores on ``X X`` and on ``chains``
    [n, L] (held-out chains), the generalized induction score and the copier ablation on ``chains``."""
    seed, order, on, hooked = config.seed, config.data.order, _MODELS[config.model], as_hooked_model(model)
    protocol, length = _protocol_batches(hooked, config)
    text = _text_batches(chains)
    held = _held_out_scores(hooked, ("induction",), protocol, seed=seed,
                            data=f"X X, X = {length} random states, {PROTOCOL_BATCHES}x{PROTOCOL_ROWS}")
    on_text = _held_out_scores(hooked, ("induction", "previous_token"), text, data="held-out chains", seed=seed)
    states = config.data.n_states
    findings = {
        "induction_protocol": (held["induction"], f"induction score of the best head on X X ({length} random states "
                               f"repeated once; no BOS: the toy has none; with {states} states every key after an "
                               f"earlier copy of the current state is a target), {on}"),
        "induction_text": (on_text["induction"], f"induction score of the best head on held-out chains, {on}"),
        "previous_token_text": (on_text["previous_token"],
                                f"previous-token score of the best head on held-out chains, {on}"),
    }
    out = {name: finding_from_spec(name, h.value, h.ci, h.null_value, h.p_value, head=h.head, statistic=statistic,
                                   selection=HEAD_SPLIT, n_units=h.n_units)
           for name, (h, statistic) in findings.items()}
    generalized, selection = generalized_induction(model, text, order, seed=seed)
    out["generalized_induction"] = generalized_induction_finding(
        generalized, selection=selection,
        statistic=f"{GENERALIZED_STATISTIC} (n = {order}: keys whose {order - 1} preceding states equal the "
                  f"query's parents), {on}")
    out["previous_token_causal"] = previous_token_causal(model, chains, config, on=on)
    return out


def judge_trained(trained: nn.Module, init: nn.Module, config: InductionExperimentConfig, chains: Tensor
                  ) -> SeedFindings:
    """The findings of ``trained`` beside ``init`` (the same toy at initialisation) on the same ``chains`` and
    protocol batches, for ``config.seed``."""
    return judge_against_init(measure_findings(trained, config, chains), measure_findings(init, config, chains),
                              config.seed)


def seed_findings(config: InductionExperimentConfig, seed: int) -> SeedFindings:
    """Train the toy of ``config`` at ``seed`` (no trajectory, no figures, one thread) and judge its findings
    against the same toy at initialisation, on the held-out chains ``run`` probes.

    Example: ``seed_findings(PRESETS["fast"], 1).control["previous_token_text"].holds`` (the planted copier).
    """
    config = dataclasses.replace(config, seed=seed)
    check_findings_data(config)
    with torch_threads(1):
        init, model = build_model(config), build_model(config)
        if isinstance(model, SimplifiedInductionModel):
            train_tokens = sample_markov_icl(config.data, config.n_train, config.seed).tokens
            train_simplified(model, train_tokens, config.training(), progress=False)
        else:
            train_on_fresh_chains(model, config.data, config.standard_training(), progress=False)
        chains = held_out_chains(config)[: config.probe_sequences, :-1]
        return judge_trained(model, init, config, chains)
