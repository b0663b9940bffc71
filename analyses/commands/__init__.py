"""The ``mechprobe`` commands whose work lives in a module of its own (``analyses.heads``, ``analyses.report``, ...):
one :class:`~analyses.cli_command.Command` record per module, listed in :data:`analyses.cli.COMMANDS`."""
