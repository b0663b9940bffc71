"""Scan and Snap on real text: a 1-layer attention model without positions trained on WikiText-2.

Words (whitespace tokens of WikiText, lower-cased) outside the ``wikitext_vocab - 1`` most frequent
map to one ``<other>`` id (0). The text is cut into sequences of ``wikitext_seq_len`` words; 90%
train a standard 1-layer attention-only TL model (no positional encoding, causal) on next-word
prediction at every position, the rest is held out for probing. Every ``wikitext_probe_every``
steps the key-token attention probe reads all query positions of the held-out sequences for
``wikitext_queries`` query words (frequency ranks ``wikitext_query_rank`` onwards, skipping the
function words at the top) and the ``wikitext_keys`` most frequent words as keys. Reported per
probe step, averaged over query words:

- ``entropy``: entropy (nats) of a query row's attention over its visible positions;
- ``spearman_count``: Spearman between per-occurrence attention on a key word and its co-occurrence
  count with the query (key before query, same sequence) in the training sequences;
- ``spearman_lift``: the same against ``P(key | query) / P(key)``, which removes the key's own
  frequency (Scan and Snap predicts that tokens spread evenly over contexts, like common words,
  lose attention while tokens specific to the query gain it).

The corpus is a local file (default ``../shared/data/wikitext-2/wiki.test.tokens`` relative to
the repository root) or a hub name such as ``wikitext-2`` where there is network.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from probes.cooccurrence import cooccurrence_ordering, cooccurrence_probability, count_cooccurrence
from probes.corpora import WIKITEXT_CONFIGS, iter_documents
from probes.key_token_attention import KeyTokenAttentionProbe
from probes.runner import run_probes
from toymodels.scansnap_training import TwoRateConfig, make_two_rate_optimizers
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import train

REPO_ROOT = Path(__file__).resolve().parents[1]
HELD_OUT_FRACTION = 0.1
MAX_PROBE_SEQUENCES = 128


def resolve_corpus(spec: str) -> str:
    """A hub name as given; a relative path is taken relative to the repository root."""
    if spec.partition(":")[0] in WIKITEXT_CONFIGS or Path(spec).is_absolute():
        return spec
    return str(REPO_ROOT / spec)


def word_sequences(spec: str, *, vocab_size: int, seq_len: int) -> tuple[torch.Tensor, list[str]]:
    """``(sequences [n, seq_len] of word ids, vocabulary)``; id 0 is ``<other>``, then words by frequency."""
    words = [w.lower() for document in iter_documents(resolve_corpus(spec), unit="paragraph")
             for w in document.text.split()]
    vocabulary = ["<other>"] + [w for w, _ in Counter(words).most_common(vocab_size - 1)]
    index = {w: i for i, w in enumerate(vocabulary)}
    ids = torch.tensor([index.get(w, 0) for w in words], dtype=torch.long)
    n_sequences = len(ids) // seq_len
    return ids[: n_sequences * seq_len].reshape(n_sequences, seq_len), vocabulary


def wikitext_run(config: Any, *, progress: bool) -> dict[str, Any]:
    """Train on WikiText and probe entropy and co-occurrence ordering along the way (module docstring).

    The model trains on ``config.device``; batches are drawn on the CPU and moved there.
    """
    sequences, vocabulary = word_sequences(config.wikitext_corpus, vocab_size=config.wikitext_vocab,
                                           seq_len=config.wikitext_seq_len)
    generator = torch.Generator().manual_seed(config.seed)
    order = torch.randperm(len(sequences), generator=generator)
    n_held_out = max(1, int(len(sequences) * HELD_OUT_FRACTION))
    held_out, training = sequences[order[:n_held_out]], sequences[order[n_held_out:]]
    held_out = held_out[:MAX_PROBE_SEQUENCES]
    queries = list(range(config.wikitext_query_rank, config.wikitext_query_rank + config.wikitext_queries))
    keys = list(range(1, config.wikitext_keys + 1))
    counts = count_cooccurrence(training, queries, keys)
    key_frequency = torch.bincount(training.flatten(), minlength=len(vocabulary))[keys].double()
    lift = cooccurrence_probability(counts) / (key_frequency / training.numel()).clamp_min(1e-12)
    model = build_standard_model(StandardModelConfig(
        n_layers=1, d_model=config.wikitext_d_model, n_heads=1, d_vocab=len(vocabulary),
        n_ctx=config.wikitext_seq_len, attn_only=True, positional="none", attention_dir="causal",
        seed=config.seed), device=config.device)
    two_rates = TwoRateConfig(eta_y=config.wikitext_lr, eta_z=config.wikitext_lr, optimizer="adam")
    optimizers = make_two_rate_optimizers(model, two_rates)
    trace: dict[str, list[float]] = {"step": [], "entropy": [], "spearman_count": [], "spearman_lift": []}

    def probe(step: int, trained: Any, history: Any) -> None:
        if step % config.wikitext_probe_every and step != config.wikitext_steps:
            return
        attention_probe = KeyTokenAttentionProbe(queries, keys, query_position="all")
        (result,) = run_probes(trained, [attention_probe], held_out.split(32), data="wikitext held out",
                               progress=False)
        rows = result.rows.double()
        trace["step"].append(step)
        trace["entropy"].append(float((result.position_entropy[0, 0].double() * rows).sum() / rows.sum()))
        for name, reference in (("spearman_count", counts), ("spearman_lift", lift)):
            rho = cooccurrence_ordering(result, reference.float()).spearman[0, 0]
            trace[name].append(float(rho[~rho.isnan()].mean()))

    def loss_fn(step: int, batch_generator: torch.Generator) -> torch.Tensor:
        batch = training[torch.randint(len(training), (config.wikitext_batch_size,), generator=batch_generator)]
        batch = batch.to(config.device)
        logits = model(batch)[:, :-1]
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))

    probe(0, model, None)
    history = train(model, loss_fn, optimizers, n_steps=config.wikitext_steps, generator=generator,
                    callbacks=[probe], progress=progress, desc="wikitext")
    return {
        "corpus": config.wikitext_corpus, "words": int(sequences.numel()), "vocabulary": len(vocabulary),
        "train_sequences": len(training), "probe_sequences": len(held_out),
        "query_words": [vocabulary[i] for i in queries], "initial_loss": history.values["loss"][0],
        "final_loss": history.values["loss"][-1], **trace,
        "settings": {k: v for k, v in dataclasses.asdict(config).items() if k.startswith("wikitext_")},
    }


def plot_wikitext(result: dict[str, Any], path: Path) -> None:
    """Attention entropy and co-occurrence ordering over training on WikiText."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3))
    left.plot(result["step"], result["entropy"], marker="o")
    left.set_xlabel("step")
    left.set_ylabel("attention entropy (nats)")
    right.plot(result["step"], result["spearman_count"], marker="o", label="vs co-occurrence count")
    right.plot(result["step"], result["spearman_lift"], marker="o", label="vs P(key|query)/P(key)")
    right.axhline(0, color="k", linewidth=0.5)
    right.set_xlabel("step")
    right.set_ylabel("Spearman (mean over query words)")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
