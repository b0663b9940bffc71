"""The experiments, reports and command line on top of ``probes`` and ``toymodels`` (``mechprobe`` is
``analyses.cli``)."""
