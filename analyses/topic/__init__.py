"""``mechprobe toy topic``: Li, Li & Risteski (2023) on LDA data: the experiment, its findings, what it reproduces."""
