"""``mechprobe probe-linear`` and the report's linear-probe section."""
