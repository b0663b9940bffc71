"""How mechanisms form: the probes over a checkpoint series (Hugging Face revisions, legacy TransformerLens
checkpoints, folders of checkpoints), change points with bootstrap intervals, and the order of events as findings.

Modules: config, curve_point, measure (the [BOS] X X probes), text_measure (the report's text probes), toy_measure
(the induction toy's series), events, summary, figures, run, train_lm, cli_commands. The pieces the toys share with
them sit below every experiment: :mod:`analyses.series_writer`, :mod:`analyses.curve_series`, :mod:`analyses.lm_data`.
"""
