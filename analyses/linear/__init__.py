"""``mechprobe probe-linear`` (the report's linear-probe section is :mod:`analyses.report.linear_section`)."""
