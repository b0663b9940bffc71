"""The base every mechprobe package shares: its errors and its setting checks (``probes``, ``toymodels`` and
``analyses`` import it; it imports none of them)."""
