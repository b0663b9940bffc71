"""The cost ledger: mechprobe's routes metered on meta weights at GPU shapes (meter, twins, cuda_sdpa, shapes, routes),
the time and memory estimate for a GPU (estimate, calibrate) and the ``mechprobe plan`` command (command)."""
