"""How mechanisms form: the probes over a checkpoint series (Hugging Face revisions, legacy TransformerLens
checkpoints, folders of checkpoints), change points with bootstrap intervals, and the order of events as findings.

Modules: config, measure, events, summary, figures, run, lm_data, train_lm, cli_commands.
"""
