"""``mechprobe toy scansnap``: Tian et al. (2023), Scan and Snap: the experiment, the learning-rate sweep, WikiText-2, what it reproduces."""
