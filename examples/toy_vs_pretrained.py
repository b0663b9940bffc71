"""Toy vs pretrained in a few lines: the induction toy of Chen et al. beside SmolLM2-135M and its
random-weight control, scored by the same probe.

    .venv/bin/python examples/toy_vs_pretrained.py [OUT_DIR]
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import probes
from analyses.induction import experiment as toy_induction


def main(out_dir: Path) -> dict[str, float]:
    # the toy: train the fast preset (about 10 s); its result holds the layer-2 generalized induction score
    toy = toy_induction.run(toy_induction.PRESETS["fast"], out_dir / "toy", progress=False)
    # the pretrained model and the same architecture with random weights, on repeated random tokens
    model = probes.load_model("smollm2-135m")
    control = probes.random_weight_control(model, seed=0)
    found = {}
    for name, candidate in (("smollm2-135m", model), ("random weights", control)):
        scores = probes.head_scores(candidate, seq_len=40, n_batches=2, batch_size=4)
        layer, head, score = scores.top_heads("induction", 1)[0]
        found[name] = score
        print(f"{name:>15}: best induction head L{layer}H{head} {score:.3f} (chance {scores.chance['induction']:.3f})")
    print(f"{'toy (Chen et al.)':>15}: generalized induction {toy.generalized_induction_score:.3f} "
          f"(chance {toy.generalized_induction_chance:.3f})")
    return {"toy": toy.generalized_induction_score, **found}


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(Path(sys.argv[1]))
    else:
        with tempfile.TemporaryDirectory() as folder:
            main(Path(folder))
