"""``mechprobe probe-linear``: linear decodability of parents, topics or next-token classes, layer by layer.

Targets (keys of ``summary.json["results"]``):

- ``parent``: ``tok[t - k]`` among the ``top_tokens`` most frequent tokens (keys ``"1"``, ``"2"``, ...).
  Pretrained models: ``distances`` on the corpus. Chen et al.'s toy (a ``mechprobe toy induction`` folder):
  every state is a class, distances ``1 .. n`` and one beyond the copier's window (``max_distance + 1``).
- ``topic``: the LDA topic of the token's word (``"word"``) and the document's dominant topic
  (``"document"``). Pretrained models: gensim LDA fitted on the corpus; the topic toy: the generator's topics.
- ``next``: Scan and Snap's next-token class, read at the query (last) position (a ``toy scansnap`` folder).

Each key is scored as a gain over its baseline (``statistic`` and ``baseline_kind`` in the summary): the
word's topic against the control task (selectivity), the other keys against the current token alone.
Every run probes the same batches through the model's random-weight control too
(:func:`probes.stats.control_model.random_weight_control`), written to ``OUT/control/``.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

from analyses.paper_result import write_json
from analyses.toy_model_loader import ToyModel, load_any_model, load_toy_model
from analyses.toy_model_store import is_toy_folder
from analyses.toy_registry import toys
from mechprobe.validation import is_integer
from probes.core.batch import TokenBatch
from probes.core.checkpoint_series import MANIFEST
from probes.core.errors import ConfigError, InputError
from probes.core.model_info import ModelInfo
from probes.core.model_kind import HookedModel
from probes.core.runner import run_probes
from probes.linear.labels import (
    CombinedLabels,
    LabelMaker,
    PreviousTokenLabels,
    RowLabels,
    TokenClassLabels,
    most_frequent_tokens,
)
from probes.linear.probe import LinearProbe, LinearProbeScores
from probes.linear.residual_hooks import residual_hooks
from probes.stats.control_model import random_weight_control
from probes.text.corpora import Document, iter_documents
from probes.text.text_batches import text_token_batches
from probes.text.token_topics import token_topic_labels
from probes.text.topics import LdaTopicConfig, LdaTopics, assign_word_topics, fit_lda_topics, words_of

log = logging.getLogger(__name__)
TARGETS = ("parent", "topic", "next")


@dataclass(frozen=True)
class LinearProbeConfig:
    """How much data a linear probe reads and how it is fitted.

    Pretrained models read ``max_batches`` batches of ``batch_size`` windows of ``seq_len`` tokens from the
    first ``max_documents`` paragraphs of ``corpus`` (at least ``min_chars`` long, shuffled with ``seed``);
    ``layer_stride`` keeps every n-th layer (the embeddings and the last layer always). Toys read
    ``toy_sequences`` fresh sequences. ``max_examples`` labelled positions are kept per label (reservoir).
    ``unseen_words``: test words are unseen in training too (see LinearProbe).
    """

    max_examples: int = 2000
    n_folds: int = 5
    n_boot: int = 1000
    top_tokens: int = 20
    distances: tuple[int, ...] = (1, 2, 3)
    layer_stride: int = 1
    corpus: str = "wikipedia-excerpt"
    max_documents: int = 1000
    min_chars: int = 200
    seq_len: int = 128
    batch_size: int = 8
    max_batches: int = 8
    n_topics: int = 20
    lda_passes: int = 5
    toy_sequences: int = 256
    unseen_words: bool = False
    control: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("max_examples", "n_folds", "n_boot", "top_tokens", "layer_stride", "max_documents", "min_chars",
                     "seq_len", "batch_size", "max_batches", "n_topics", "lda_passes", "toy_sequences"):
            value = getattr(self, name)
            if not is_integer(value) or value < 1:
                raise ConfigError(f"{name} must be a positive integer; got {value!r}.")
        if self.n_folds < 2 or self.top_tokens < 2 or self.max_examples < 10:
            raise ConfigError(f"n_folds and top_tokens must be >= 2 and max_examples >= 10; got {self.n_folds}, "
                              f"{self.top_tokens}, {self.max_examples}.")
        distances = tuple(self.distances)
        if not distances or any(not is_integer(d) or d < 1 for d in distances):
            raise ConfigError(f"distances must be integers >= 1, e.g. 1,2,3; got {self.distances!r}.")
        object.__setattr__(self, "distances", distances)
        if max(distances) >= self.seq_len:  # no token of a row has a previous token that far back: no target
            raise ConfigError(f"distances: {max(distances)} has no target in rows of seq_len {self.seq_len} tokens "
                              f"(a distance reaches back at most {self.seq_len - 1}); give distances <= "
                              f"{self.seq_len - 1}, or (mechprobe probe-linear) a larger --set seq_len.")
        if not isinstance(self.unseen_words, bool) or not isinstance(self.control, bool):
            raise ConfigError(f"unseen_words and control must be true or false; got {self.unseen_words!r}, "
                              f"{self.control!r}.")
        if not is_integer(self.seed) or self.seed < 0:
            raise ConfigError(f"seed must be an integer >= 0; got {self.seed!r}.")


PRETRAINED_ONLY = ("top_tokens", "distances", "layer_stride", "corpus", "max_documents", "min_chars", "seq_len",
                   "batch_size", "max_batches", "n_topics", "lda_passes")


def unused_settings(*, toy: bool) -> dict[str, str]:
    """The :class:`LinearProbeConfig` settings a toy folder (``toy``) or a pretrained model does not use, with why."""
    if toy:
        why = "a toy is probed on toy_sequences fresh sequences of its own data, every state a class"
        return {name: why for name in PRETRAINED_ONLY}
    return {"toy_sequences": "a pretrained model reads the corpus (corpus, max_batches, batch_size, seq_len)"}


@dataclass(frozen=True)
class ProbeSetup:
    """What one run probes: batches, their labels and documents, the hooks read, a data description."""

    batches: list[TokenBatch]
    labels: LabelMaker
    documents: torch.Tensor
    hooks: tuple[str, ...]
    data: str


def strided_hooks(hooks: tuple[str, ...], stride: int) -> tuple[str, ...]:
    """Every ``stride``-th layer hook after the embeddings, the embeddings and the last layer always kept."""
    keep = [h for i, h in enumerate(hooks) if i == 0 or i == len(hooks) - 1 or i % stride == 0]
    return tuple(keep)


def _pack(rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], pad: int) -> TokenBatch:
    width = max(int(tokens.shape[0]) for tokens, _, _ in rows)
    tokens = torch.full((len(rows), width), pad, dtype=torch.long)
    valid = torch.zeros((len(rows), width), dtype=torch.bool)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row_tokens, row_valid, row_mask) in enumerate(rows):
        n = int(row_tokens.shape[0])
        tokens[i, :n], valid[i, :n], mask[i, :n] = row_tokens, row_valid, row_mask
    return TokenBatch(tokens, valid, mask)


def document_batches(documents: list[Document], model: HookedModel, config: LinearProbeConfig
                     ) -> tuple[list[TokenBatch], torch.Tensor]:
    """Windows of the documents (:func:`probes.text_token_batches`, one document per row) packed into
    ``max_batches`` batches, and the document index of every row."""
    info, tokenizer = ModelInfo.of(model), getattr(model, "tokenizer", None)
    pad = getattr(tokenizer, "pad_token_id", None) or 0
    rows: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    owners: list[int] = []
    batches: list[TokenBatch] = []
    for index, document in enumerate(documents):
        if len(batches) == config.max_batches:
            break
        for piece in text_token_batches([document], tokenizer, info, seq_len=config.seq_len, batch_size=1):
            mask = piece.attention_mask if piece.attention_mask is not None else torch.ones_like(piece.tokens)
            n = int(mask.sum())
            rows.append((piece.tokens[0, :n], piece.valid[0, :n], mask[0, :n]))
            owners.append(index)
            if len(rows) == config.batch_size:
                batches.append(_pack(rows, pad))
                rows = []
                if len(batches) == config.max_batches:
                    break
    if rows:
        batches.append(_pack(rows, pad))
    if not owners and tokenizer is not None and not tokenizer("The cat sat.", add_special_tokens=False)["input_ids"]:
        raise InputError(f"The model's tokenizer ({type(tokenizer).__name__}) turns text into no tokens: its folder "
                         f"has no tokenizer files (tokenizer.json, vocab, ...). Save the tokenizer beside the weights "
                         f"(tokenizer.save_pretrained(folder)) or give a model that has one.")
    if len(set(owners)) < 4:
        raise InputError(f"The corpus gave {len(set(owners))} usable document(s); a grouped probe needs at least 4. "
                         f"Use a larger corpus or a smaller min_chars.")
    return batches, torch.tensor(owners)


def corpus_documents(config: LinearProbeConfig) -> list[Document]:
    """The first ``max_documents`` paragraphs of the corpus, shuffled with ``seed``."""
    documents = list(iter_documents(config.corpus, unit="paragraph", min_chars=config.min_chars,
                                    max_documents=config.max_documents))
    random.Random(config.seed).shuffle(documents)
    return documents


def dominant_topics(topic_model: LdaTopics, documents: list[Document]) -> torch.Tensor:
    """The most probable LDA topic of each document: -1 for a document with no dictionary word, and for one whose
    topic was dropped as incoherent (:meth:`probes.text.topics.LdaTopics.kept_topics`), like its words."""
    stop = topic_model.config.stop_words()
    kept = set(topic_model.kept_topics())
    out = []
    for document in documents:
        bow = topic_model.dictionary.doc2bow(words_of(document.text, topic_model.config.min_word_length, stop))
        mixture = topic_model.lda.get_document_topics(bow, minimum_probability=0.0) if bow else []
        dominant = max(mixture, key=lambda pair: pair[1])[0] if mixture else -1
        out.append(dominant if dominant in kept else -1)
    return torch.tensor(out, dtype=torch.long)


def check_pretrained_target(target: str) -> None:
    """Pretrained models have labels for ``parent`` and ``topic`` only."""
    if target not in ("parent", "topic"):
        raise ConfigError(f"--target {target} needs a toy run folder (mechprobe toy scansnap --out DIR); pretrained "
                          f"models take --target parent or topic.")


def pretrained_setup(model: HookedModel, target: str, config: LinearProbeConfig, documents: list[Document], *,
                     word_topics: dict[str, int] | None = None, topic_model: LdaTopics | None = None) -> ProbeSetup:
    """Batches and labels of ``target`` on a pretrained model over ``documents`` (LDA fitted here when
    ``topic_model`` is not given)."""
    check_pretrained_target(target)
    batches, owners = document_batches(documents, model, config)
    hooks = strided_hooks(residual_hooks(model), config.layer_stride)
    used = documents[: int(owners.max()) + 1]
    data = f"{config.corpus}: {len(batches)} batches of {config.batch_size} x {config.seq_len} tokens, " \
           f"{len(set(owners.tolist()))} paragraphs (seed {config.seed})"
    if target == "parent":
        labels: LabelMaker = PreviousTokenLabels(config.distances, most_frequent_tokens(batches, config.top_tokens))
        return ProbeSetup(batches, labels, owners, hooks, data)
    if topic_model is None:
        topic_model = fit_lda_topics(documents, LdaTopicConfig(n_topics=config.n_topics, passes=config.lda_passes,
                                                               seed=config.seed))
        word_topics = assign_word_topics(topic_model)
    n_topics = topic_model.config.n_topics
    token_map = token_topic_labels(word_topics or {}, getattr(model, "tokenizer", None), ModelInfo.of(model).d_vocab)
    labels = CombinedLabels(TokenClassLabels(token_map.labels, key="word", n_classes=n_topics),
                            RowLabels("document", dominant_topics(topic_model, used)[owners], n_classes=n_topics))
    return ProbeSetup(batches, labels, owners, hooks, data + f", gensim LDA {n_topics} topics")


def toy_setup(toy: ToyModel, target: str, config: LinearProbeConfig) -> ProbeSetup:
    """Fresh sequences of the toy's own data (seeded apart from its training data) and the target's labels."""
    expected = next((spec.probe_target for spec in toys() if spec.name == toy.experiment), None)
    if expected is None:  # a train-lm step: text, with no labels of its own data to probe for
        run = toy.folder.parent
        measure = f" Measure its run with mechprobe dynamics --model {run}." if (run / MANIFEST).is_file() else ""
        raise ConfigError(f"{toy.folder} holds a train-lm step, whose data has no parent, topic or next-class labels "
                          f"of its own: probe-linear takes a paper toy's folder or a pretrained model.{measure}")
    if target != expected:
        raise ConfigError(f"{toy.folder} holds the {toy.experiment} toy, whose target is --target {expected}; got "
                          f"--target {target}.")
    data_seed = config.seed + 20_000  # apart from the toys' training and validation seeds
    generator = torch.Generator().manual_seed(data_seed)
    n = config.toy_sequences
    if toy.experiment == "induction":
        from toymodels.induction.data import sample_markov_icl

        experiment = toy.config
        chains = experiment.data
        tokens = sample_markov_icl(chains, n, experiment.seed + data_seed).tokens[:, :chains.seq_len]
        beyond = experiment.model_config().max_distance + 1
        distances = (*range(1, chains.order + 1), beyond)
        labels: LabelMaker = PreviousTokenLabels(distances, tuple(range(chains.n_states)))
    elif toy.experiment == "topic":
        from toymodels.topic.data import sample_documents

        lda = toy.config.lda
        sampled = sample_documents(lda, n, generator, length=lda.max_len)
        tokens = sampled.tokens
        labels = CombinedLabels(TokenClassLabels(lda.token_topics(), key="word", n_classes=lda.n_topics),
                                RowLabels("document", sampled.theta.argmax(-1), n_classes=lda.n_topics))
    else:
        from toymodels.scansnap.data import CooccurrenceData

        data = CooccurrenceData(toy.config.data)
        tokens, _, facts = data.sample(n, generator)
        labels = RowLabels("next", facts, positions="last", n_classes=data.n_facts)
    batches = [TokenBatch(part, torch.ones_like(part, dtype=torch.bool)) for part in tokens.split(32)]
    data_text = f"{n} fresh sequences of the {toy.experiment} toy's data (data seed {data_seed})"
    return ProbeSetup(batches, labels, torch.arange(n), residual_hooks(toy.model), data_text)


def probe_setup(model: HookedModel, setup: ProbeSetup, config: LinearProbeConfig, *, progress: bool
                ) -> LinearProbeScores:
    """One :class:`probes.LinearProbe` over the setup's batches."""
    probe = LinearProbe(setup.labels, hooks=setup.hooks, documents=setup.documents, max_examples=config.max_examples,
                        n_folds=config.n_folds, n_boot=config.n_boot, seed=config.seed, control_seed=config.seed,
                        unseen_words=config.unseen_words)
    (result,) = run_probes(model, [probe], setup.batches, data=setup.data, seed=config.seed, progress=progress)
    return result


@dataclass(frozen=True)
class LinearCurve:
    """One key's probe over the layers: accuracy with its interval, the baseline's accuracy (``baseline_kind``,
    from ``baseline_source``), the gain over it (the ``statistic``) with its interval, and the majority rate."""

    statistic: str
    baseline_kind: str
    baseline_source: str
    accuracy: list[float]
    ci: list[list[float]]
    baseline_accuracy: list[float]
    gain: list[float]
    gain_ci: list[list[float]]
    majority_baseline: float


@dataclass(frozen=True)
class LinearSummary:
    """``probe-linear``'s ``summary.json``: the model, the target, the hooks probed and one curve per key."""

    model: str
    target: str
    layers: list[str]
    results: Mapping[str, LinearCurve]


def linear_summary(model: str, target: str, result: LinearProbeScores) -> LinearSummary:
    """The ``summary.json`` record of one model (see the module docstring)."""
    return LinearSummary(model, target, list(result.hooks), {
        key: LinearCurve(result.statistic[key], result.baseline[key], result.baseline_source[key],
                         result.accuracy[key].tolist(), result.accuracy_ci[key].tolist(),
                         result.baseline_accuracy[key].tolist(), result.gain[key].tolist(),
                         result.gain_ci[key].tolist(), result.majority_baseline[key])
        for key in result.keys})


def run_linear_probe(spec: str, target: str, out: str | Path, config: LinearProbeConfig = LinearProbeConfig(), *,
                     device: str = "cpu", dtype: torch.dtype = torch.float32, progress: bool = True,
                     cap_seq_len: bool = True, echo=print) -> LinearSummary:
    """Probe ``spec`` (a toy run folder or a :func:`probes.load_model` spec) for ``target``; write
    ``OUT/summary.json`` and ``OUT/result/`` (and ``OUT/control/`` for the random-weight control).

    A ``seq_len`` beyond a pretrained model's context is cut to it (and recorded as cut) when ``cap_seq_len``,
    else refused."""
    if target not in TARGETS:
        raise ConfigError(f"--target must be one of {', '.join(TARGETS)}; got {target!r}.")
    out = Path(out)
    start = time.perf_counter()
    if is_toy_folder(spec):
        toy = load_toy_model(spec, device=device)
        model, setup = toy.model, toy_setup(toy, target, config)
    else:
        check_pretrained_target(target)  # before the model loads
        model = load_any_model(spec, device=device, dtype=dtype)  # a checkpoint series' own folder is refused
        n_ctx = ModelInfo.of(model).n_ctx
        if config.seq_len > n_ctx:
            if not cap_seq_len:
                raise ConfigError(f"--set seq_len={config.seq_len} is longer than {spec}'s context ({n_ctx} tokens); "
                                  f"give seq_len <= {n_ctx}.")
            config = dataclasses.replace(config, seq_len=n_ctx)
        setup = pretrained_setup(model, target, config, corpus_documents(config))
    echo(f"probing {spec} ({len(setup.hooks)} hooks, {len(setup.batches)} batches) ...")
    runs = [("", model, str(spec))]
    if config.control:
        # toy models keep bare parameters (position logits, selector weights): re-drawn from their own spread
        control = random_weight_control(model, seed=config.seed, redraw_unresettable=is_toy_folder(spec))
        runs.append(("control", control, f"{spec} (random weights)"))
    summaries = []
    for sub, probed, name in runs:
        result = probe_setup(probed, setup, config, progress=progress)
        folder = out / sub if sub else out
        folder.mkdir(parents=True, exist_ok=True)
        result.save(folder / "result")
        document = linear_summary(name, target, result)
        write_json(folder / "summary.json", document)
        summaries.append(document)
    log.info("probe-linear %s %s: %.1f s", spec, target, time.perf_counter() - start)
    return summaries[0]  # the model's own (the control's is in OUT/control/summary.json)
