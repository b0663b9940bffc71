"""``mechprobe toy induction``: Chen et al. (2024) on n-gram Markov chains.

Modules: config (the composed config and presets), experiment (``run(config, out_dir) -> InductionResult``),
result (the typed result and its summary.json), trajectory, figures, reference (what each preset reproduces).
"""
