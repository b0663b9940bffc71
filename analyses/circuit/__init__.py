"""``mechprobe circuit``: edges between heads by path patching (:mod:`probes.causal.edges`) with their null, their
control and the composition screen. Modules: measure (settings, chosen heads, edges, verdicts, screen
correlations), figure (the graph), command (the command line's parser and run)."""
