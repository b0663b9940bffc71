"""The base every mechprobe package shares: its errors, its setting checks and its one way of writing a file whole
(``atomic``) (``probes``, ``toymodels`` and ``analyses`` import it; it imports none of them)."""
