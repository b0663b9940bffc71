"""How mechanisms form: the probes over a checkpoint series (Hugging Face revisions, legacy TransformerLens
checkpoints, folders of checkpoints), change points with bootstrap intervals, and the order of events as findings.

Modules: config, curve_point, measure (the [BOS] X X probes), text_measure (the report's text probes), toy_measure
(the induction toy's series), events, summary, curve_series (the toys' recorded curves), figures, run, lm_data,
train_lm, series_writer, cli_commands.
"""
