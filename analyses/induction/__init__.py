"""``mechprobe toy induction``: Chen et al. (2024) on n-gram Markov chains: the experiment, its trajectory, figures, what it reproduces."""
