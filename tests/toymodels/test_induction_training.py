"""Training the induction toy models: the paper's claims on small settings, stages, resumable runs."""

from __future__ import annotations

import pytest
import torch

import probes
from probes.copier import CopierProbe
from probes.generalized_induction import GeneralizedInductionProbe
from toymodels.errors import ToyConfigError
from toymodels.induction_models import FullInductionModel, SimplifiedInductionConfig, SimplifiedInductionModel
from toymodels.induction_training import (SimplifiedTraining, last_token_loss, train_on_fresh_chains,
                                          train_simplified)
from toymodels.markov_data import MarkovConfig, bayes_optimal_loss, sample_markov_icl
from toymodels.standard import StandardModelConfig, build_standard_model
from toymodels.training import Checkpointer

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


PAPER_DATA = MarkovConfig(n_states=3, order=3, seq_len=100, alpha=0.1)
STAGED = SimplifiedTraining(schedule="staged", stage_steps=(10, 10, 40), lr_c=100.0, lr_w=10.0, lr_a=10.0)


@pytest.mark.parametrize("model_class", [SimplifiedInductionModel, FullInductionModel])
def test_simplified_model_selects_the_true_parents_copies_them_and_nears_the_optimum(model_class):
    """Paper claims (S=3, n=3, L=100, alpha=0.1; 256 training chains, staged c -> w -> a):
    the share of the true parent subset passes 0.9 within 5 steps and ends near 1; heads 0 and 1
    copy distances 1 and 2; the validation loss ends within 0.03 nats of the optimal estimator.
    The same holds for the appendix's full model."""
    torch.manual_seed(0)
    train_tokens = sample_markov_icl(PAPER_DATA, 256, 0).tokens
    val_tokens = sample_markov_icl(PAPER_DATA, 500, 1).tokens
    model = model_class(SimplifiedInductionConfig(a_init=1.0))
    true_index = model.subset_labels.index("{0,1}")
    shares = []
    train_simplified(model, train_tokens, STAGED, generator=torch.Generator().manual_seed(0),
                     callbacks=[lambda step, m, h: shares.append(float(m.subset_weights()[true_index].detach()))])
    assert len(shares) == 60
    assert shares[4] > 0.9
    assert shares[-1] > 0.99
    (profile,) = probes.run_probes(model, [CopierProbe(8)], [val_tokens[:32, :-1]], progress=False)
    assert profile.copied_distance[0, :2].tolist() == [1, 2]
    peak = 0.8 if model_class is SimplifiedInductionModel else 0.6  # W_Q W_K content spreads the full model's
    assert float(profile.mass[0, 0, 1]) > peak and float(profile.mass[0, 1, 2]) > peak
    gap = last_token_loss(model, val_tokens) - bayes_optimal_loss(val_tokens, PAPER_DATA)
    assert 0 < gap < 0.03


def test_staged_schedule_trains_one_part_at_a_time():
    tokens = sample_markov_icl(PAPER_DATA, 64, 0).tokens
    model = SimplifiedInductionModel(SimplifiedInductionConfig())
    snapshots = []

    def snap(step, m, history):
        snapshots.append({k: v.detach().clone() for k, v in m.named_parameters()})

    training = SimplifiedTraining(schedule="staged", stage_steps=(2, 2, 2))
    train_simplified(model, tokens, training, generator=torch.Generator().manual_seed(0), callbacks=[snap])
    changed = [
        {name for name in snapshots[i] if not torch.equal(snapshots[i][name], snapshots[i - 1][name])}
        for i in range(1, 6)
    ]
    assert changed == [{"c"}, {"rel_logits"}, {"rel_logits"}, {"a"}, {"a"}]
    assert all(p.requires_grad for p in model.parameters())  # restored after training


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    tokens = sample_markov_icl(PAPER_DATA, 64, 0).tokens
    training = SimplifiedTraining(schedule="staged", stage_steps=(3, 3, 4), batch_size=16, lr_c=10.0)

    def run(n_total, folder):
        model = SimplifiedInductionModel(SimplifiedInductionConfig())
        t = SimplifiedTraining(schedule="staged", stage_steps=training.stage_steps[:2] + (n_total - 6,),
                               batch_size=16, lr_c=10.0)
        history = train_simplified(model, tokens, t, generator=torch.Generator().manual_seed(3),
                                   checkpointer=Checkpointer(folder, every=2, fingerprint="x"))
        return model, history

    whole, whole_history = run(10, tmp_path / "a")
    run(7, tmp_path / "b")  # interrupted after step 7 (checkpoint at 7)
    resumed, resumed_history = run(10, tmp_path / "b")
    for (name, p), (_, q) in zip(whole.named_parameters(), resumed.named_parameters()):
        assert torch.allclose(p, q), name
    assert resumed_history.column("loss") == pytest.approx(whole_history.column("loss"))


def test_bad_training_settings_raise():
    with pytest.raises(ToyConfigError, match="schedule"):
        SimplifiedTraining(schedule="alternating")
    with pytest.raises(ToyConfigError, match="lr_c"):
        SimplifiedTraining(lr_c=0.0)
    with pytest.raises(ToyConfigError, match="train_tokens"):
        train_simplified(SimplifiedInductionModel(SimplifiedInductionConfig()), torch.zeros(3, dtype=torch.long),
                         SimplifiedTraining(), generator=torch.Generator())


@pytest.mark.slow
def test_standard_two_layer_model_learns_a_trigram_induction_head():
    """A TransformerLens 2-layer attention-only model (d_model 32, 4 heads, LayerNorm, Adam 3e-3,
    32 fresh chains of L=50 per step, 500 steps): a layer-2 head with a generalized induction score
    far above chance and a small last-token-only mass; layer-1 heads attending to distances 1 and 2."""
    torch.manual_seed(0)
    data = MarkovConfig(n_states=3, order=3, seq_len=50, alpha=0.1)
    model = build_standard_model(StandardModelConfig(n_layers=2, d_model=32, n_heads=4, d_vocab=3, n_ctx=51))
    train_on_fresh_chains(model, data, n_steps=500, batch_size=32, lr=3e-3, generator=torch.Generator().manual_seed(0))
    tokens = sample_markov_icl(data, 64, 1).tokens[:, :-1]
    copier, induction = probes.run_probes(model, [CopierProbe(4), GeneralizedInductionProbe(3)], [tokens],
                                          progress=False)
    layer2 = induction.scores[1]
    best = int(layer2.argmax())
    assert float(layer2[best]) > 0.85 > induction.chance + 0.3
    assert float(induction.last_token_only[1, best]) < 0.5 * induction.last_token_only_chance
    assert {1, 2} <= set(copier.copied_distance[0].tolist())
