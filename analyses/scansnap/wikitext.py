"""Scan and Snap on WikiText-2 (``mechprobe toy scansnap --preset wikitext``).

The paper's real-text check: the PyTorch tutorial transformer (:mod:`toymodels.scansnap.tutorial_transformer`:
sinusoidal positions, post-LN encoder layer with FFN, ``d_model = d_hid = 200``, dropout 0.2, causal
mask), trained as the tutorial does (:mod:`toymodels.scansnap.word_lm`: ``basic_english`` words, vocabulary of
the training text, 20 columns, ``bptt = 35``, SGD at lr 5 times 0.95 per epoch, gradient clip 0.5).

Text. ``wikitext.train_text`` is a local file (one text line per line; relative paths are taken from
the repository root) or ``hf:CONFIG:SPLIT`` for the Hugging Face hub (``hf:wikitext-2-v1:train`` is
the paper's training split, the tokenised WikiText-2 the tutorial reads). Offline, the default
trains on the WikiText-2 *test* file in ``../shared/data`` (the only splits stored here are test and
valid); ``wikitext.probe_text`` (default: the local *valid* file) is what the probes read, cut into
``bptt``-token windows and encoded with the training vocabulary.

Probes across training (every ``wikitext.snapshot_every`` steps, and at steps 0 and last): the
key-token attention probe reads ``blocks.0.attn.hook_pattern`` at every position of the probe
windows, for ``wikitext.queries`` query words (training-frequency ranks ``wikitext.query_rank``
onwards: content words, past the function words at the top) and the ``wikitext.keys`` most frequent
words as keys. Co-occurrence (a key before the query in the same training window of ``bptt``
tokens) is counted on the training windows; ``lift = P(key | query) / P(key)`` removes the key's
own frequency, so keys *distinct* to a query have a high lift and *common* keys (spread over all
contexts, like "the") a lift near 1. Only keys that co-occur at least ``wikitext.min_cooccurrence``
times with a query are ranked for it (rarer pairs give a lift that is mostly noise). Per snapshot,
averaged over query words:

- ``entropy``: attention entropy of a query row over its visible positions (nats);
- ``spearman_count`` / ``spearman_lift``: Spearman over keys between per-occurrence attention and
  the co-occurrence count / the lift;
- ``spearman_lift_matched``: the same with distance-matched attention (attention relative to other
  keys at the same query-key distance; the model has positions, and co-occurring words sit close);
  ``spearman_lift_matched_null``: its chance level at the last snapshot (lift shuffled among each
  query's keys, 200 times: mean and 95th percentile); step 0 (random weights) is the control model;
- ``distinct_over_common``: mean distance-matched attention on each query's top third of keys by
  lift over that on its bottom third (median over queries).

Scan order: for every query, the step at which each key's distance-matched attention peaks
(:func:`probes.dynamics.scan_order.scan_order`) against its lift, averaged over queries. The snapshots
(distance-matched and per-occurrence attention [snapshot query key], counts, lift, one example
window's attention pattern per snapshot) are saved as ``wikitext_snapshots.pt``; the figure is
:func:`analyses.scansnap.figures.plot_wikitext`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from analyses.scansnap.result import LossCurve, ShuffledLiftNull, WikitextTrace
from mechprobe import forward
from probes.attention.key_token_attention import KeyTokenAttentionProbe
from probes.core.runner import run_probes
from probes.dynamics.scan_order import scan_order
from probes.text.cooccurrence import cooccurrence_probability, count_cooccurrence, spearman
from toymodels.errors import ToyConfigError
from toymodels.scansnap.tutorial_transformer import TutorialTransformer, TutorialTransformerConfig
from toymodels.scansnap.word_lm import batchify, build_vocabulary, encode, train_word_lm, windows

if TYPE_CHECKING:
    from analyses.scansnap.config import ScanSnapConfig

REPO_ROOT = Path(__file__).resolve().parents[2]
HUB_DATASET = "Salesforce/wikitext"
PROBE_BATCH = 64


def load_lines(spec: str) -> list[str]:
    """The text lines of ``spec``: a local file, or ``hf:CONFIG:SPLIT`` from the Hugging Face hub.

    Example: ``load_lines("hf:wikitext-2-v1:train")`` (network) or
    ``load_lines("../shared/data/wikitext-2/wiki.test.tokens")``.
    """
    if spec.startswith("hf:"):
        parts = spec.split(":")
        if len(parts) != 3 or not parts[1] or not parts[2]:
            raise ToyConfigError(
                f"A hub corpus is written hf:CONFIG:SPLIT (e.g. hf:wikitext-2-v1:train); got {spec!r}.")
        _, config, split = parts
        try:
            from datasets import load_dataset

            return list(load_dataset(HUB_DATASET, config, split=split)["text"])
        except Exception as error:  # offline, unknown config or split: one line telling what to do
            raise ToyConfigError(
                f"Could not load {HUB_DATASET} {config} {split} from the Hugging Face hub ({type(error).__name__}; "
                f"offline or HF_HUB_OFFLINE=1?). Run where the hub is reachable, or pass a local copy: "
                f"--set wikitext.train_text=PATH/wiki.train.tokens."
            ) from None
    path = Path(spec) if Path(spec).is_absolute() else REPO_ROOT / spec
    if not path.is_file():
        raise ToyConfigError(f"WikiText file {path} does not exist; pass an existing file or hf:CONFIG:SPLIT.")
    return path.read_text(encoding="utf-8").splitlines()


def wikitext_run(config: ScanSnapConfig, *,
                 progress: bool) -> tuple[WikitextTrace, list[torch.Tensor], dict[str, torch.Tensor]]:
    """Train the tutorial model on WikiText and probe it across training (module docstring).

    Reads ``config.wikitext``, ``seed`` and ``device``. Returns the trace (the summary's ``"wikitext"``), one
    example window's attention pattern [q_pos k_pos] per snapshot, and the snapshot tensors saved beside it.
    """
    text = config.wikitext
    bptt = text.train.bptt
    train_lines = load_lines(text.train_text)
    vocabulary = build_vocabulary(train_lines)
    if text.max_vocab is not None:
        vocabulary = vocabulary[: text.max_vocab]
    stream = encode(train_lines, vocabulary)
    columns = batchify(stream, text.batch_size)
    train_windows = torch.cat([inputs for inputs, _ in windows(columns, bptt) if inputs.shape[1] == bptt])
    probe_stream = encode(load_lines(text.probe_text), vocabulary)
    n_probe = min(text.probe_windows, len(probe_stream) // bptt)
    if n_probe < 1:
        raise ToyConfigError(f"The probe text {text.probe_text} is shorter than one window of {bptt} tokens.")
    probe_windows = probe_stream[: n_probe * bptt].reshape(n_probe, bptt)
    last_query = text.query_rank + text.queries
    if last_query > len(vocabulary) or text.keys >= len(vocabulary):
        raise ToyConfigError(f"The vocabulary has {len(vocabulary)} words; wikitext.query_rank + wikitext.queries "
                             f"({last_query}) and wikitext.keys ({text.keys}) must fit in it.")
    queries = list(range(text.query_rank, last_query))
    keys = list(range(1, text.keys + 1))  # the most frequent words (id 0 is <unk>)
    counts = count_cooccurrence(train_windows, queries, keys)
    key_frequency = torch.bincount(train_windows.flatten(), minlength=len(vocabulary))[keys].double()
    lift = cooccurrence_probability(counts) / (key_frequency / key_frequency.sum()).clamp_min(1e-300)
    eligible = counts >= text.min_cooccurrence  # query key: enough co-occurrences for a stable lift

    model = TutorialTransformer(TutorialTransformerConfig(
        d_vocab=len(vocabulary), d_model=text.d_model, d_mlp=text.d_mlp,
        n_heads=text.n_heads, n_layers=1, n_ctx=bptt, dropout=text.dropout, seed=config.seed),
        device=config.device)
    n_batches = len(windows(columns, bptt))
    total_steps = n_batches * text.train.epochs if text.train.max_steps is None else \
        min(text.train.max_steps, n_batches * text.train.epochs)
    trace: dict[str, list[Any]] = {k: [] for k in ("step", "entropy", "spearman_count", "spearman_lift",
                                                   "spearman_lift_matched", "distinct_over_common")}
    matched_history: list[torch.Tensor] = []
    per_occurrence_history: list[torch.Tensor] = []
    example_patterns: list[torch.Tensor] = []

    def snapshot(step: int, trained: Any, history: Any) -> None:
        if step % text.snapshot_every and step not in (0, total_steps):
            return
        was_training = trained.training
        trained.eval()
        probe = KeyTokenAttentionProbe(queries, keys, query_position="all", distance_matched=True)
        (result,) = run_probes(trained, [probe], probe_windows.split(PROBE_BATCH), data="wikitext probe windows",
                               progress=False)
        _, cache = forward.cached(trained, probe_windows[:1], names=["blocks.0.attn.hook_pattern"])
        example_patterns.append(cache["blocks.0.attn.hook_pattern"][0, 0].float().cpu())
        trained.train(was_training)
        rows = result.rows.double()
        trace["step"].append(step)
        trace["entropy"].append(float((result.position_entropy[0, 0].double() * rows).sum() / rows.sum()))
        if result.distance_matched is None:  # the probe above measures it
            raise ToyConfigError("The WikiText probe returned no distance-matched attention.")
        matched = result.distance_matched[0, 0].double()  # query key
        per_occurrence = result.per_occurrence[0, 0].double()
        trace["spearman_count"].append(mean_spearman(per_occurrence, counts, eligible))
        trace["spearman_lift"].append(mean_spearman(per_occurrence, lift, eligible))
        trace["spearman_lift_matched"].append(mean_spearman(matched, lift, eligible))
        trace["distinct_over_common"].append(_distinct_over_common(matched, lift, eligible))
        matched_history.append(matched)
        per_occurrence_history.append(per_occurrence)

    snapshot(0, model, None)
    history = train_word_lm(model, columns, config.wikitext_training(), callbacks=[snapshot], progress=progress)
    order = _scan_order(torch.stack(matched_history), lift, eligible, trace["step"])
    null = ordering_null(matched_history[-1], lift, eligible, generator=torch.Generator().manual_seed(config.seed))
    losses = history.values["loss"]
    trace_values = WikitextTrace(
        train=text.train_text, probe=text.probe_text, vocabulary=len(vocabulary), train_tokens=int(stream.numel()),
        steps=total_steps, steps_per_epoch=n_batches, probe_windows=n_probe,
        query_words=tuple(vocabulary[i] for i in queries), initial_loss=losses[0], final_loss=losses[-1],
        log_vocabulary=math.log(len(vocabulary)), loss_curve=LossCurve(tuple(history.steps), tuple(losses)),
        keys_per_query=float(eligible.sum(1).double().mean()), step=tuple(trace["step"]),
        **{key: tuple(trace[key]) for key in WikitextTrace._SERIES},
        spearman_lift_matched_null=null, scan_order_spearman=order["spearman"],
        scan_order_queries=order["queries"], example_window=tuple(vocabulary[int(i)] for i in probe_windows[0]))
    snapshots = {"step": torch.tensor(trace["step"]), "distance_matched": torch.stack(matched_history),
                 "per_occurrence": torch.stack(per_occurrence_history), "counts": counts, "lift": lift,
                 "query_tokens": torch.tensor(queries), "key_tokens": torch.tensor(keys),
                 "example_patterns": torch.stack(example_patterns)}
    return trace_values, example_patterns, snapshots


def mean_spearman(values: torch.Tensor, reference: torch.Tensor, eligible: torch.Tensor) -> float:
    """Spearman over each query's eligible keys (NaN values dropped) between ``values`` and ``reference``
    [query key], averaged over the queries with at least 5 such keys (NaN when none has)."""
    rhos = []
    for q in range(values.shape[0]):
        keep = eligible[q] & ~values[q].isnan()
        if int(keep.sum()) >= 5:
            rho = float(spearman(values[q][keep], reference[q][keep].double()))
            if not math.isnan(rho):
                rhos.append(rho)
    return sum(rhos) / len(rhos) if rhos else math.nan


def ordering_null(values: torch.Tensor, reference: torch.Tensor, eligible: torch.Tensor, *, generator: torch.Generator,
                  permutations: int = 200) -> ShuffledLiftNull:
    """:func:`mean_spearman` when the reference is shuffled among each query's eligible keys: mean and 95th
    percentile over ``permutations`` shuffles (the chance level of the observed value)."""
    draws = []
    for _ in range(permutations):
        shuffled = reference.clone()
        for q in range(reference.shape[0]):
            index = eligible[q].nonzero().flatten()
            shuffled[q, index] = reference[q, index[torch.randperm(len(index), generator=generator)]]
        draws.append(mean_spearman(values, shuffled, eligible))
    draws_t = torch.tensor([d for d in draws if not math.isnan(d)], dtype=torch.float64)
    if not len(draws_t):
        return ShuffledLiftNull(mean=math.nan, q95=math.nan, permutations=permutations)
    return ShuffledLiftNull(mean=float(draws_t.mean()), q95=float(draws_t.quantile(0.95)), permutations=permutations)


def _distinct_over_common(matched: torch.Tensor, lift: torch.Tensor, eligible: torch.Tensor) -> float:
    """Median over queries of (mean matched attention on the top third of eligible keys by lift) / (on the bottom
    third); the median, because a query whose bottom third gets almost no attention gives a huge ratio."""
    ratios = []
    for q in range(matched.shape[0]):
        seen = eligible[q] & ~matched[q].isnan()
        if int(seen.sum()) < 6:
            continue
        values, by_lift = matched[q][seen], lift[q][seen].argsort()
        third = len(by_lift) // 3
        low, high = values[by_lift[:third]].mean(), values[by_lift[-third:]].mean()
        if low > 0:
            ratios.append(float(high / low))
    return float(torch.tensor(ratios).median()) if ratios else math.nan


def _scan_order(matched: torch.Tensor, lift: torch.Tensor, eligible: torch.Tensor, steps: list[int]) -> dict[str, Any]:
    """Spearman between each eligible key's peak step (distance-matched attention over snapshots) and its lift,
    averaged over queries."""
    values = []
    for q in range(matched.shape[1]):
        seen = eligible[q] & ~matched[:, q].isnan().any(0)
        if int(seen.sum()) < 5 or len(steps) < 3:
            continue
        rho = scan_order(matched[:, q][:, seen], lift[q][seen], steps).spearman
        if not math.isnan(rho):
            values.append(rho)
    return {"spearman": sum(values) / len(values) if values else math.nan, "queries": len(values)}
