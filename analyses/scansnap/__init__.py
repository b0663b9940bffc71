"""``mechprobe toy scansnap``: Tian et al. (2023), Scan and Snap: settings, the run, its typed result, figures,
the learning-rate sweep, WikiText-2, what it reproduces.

Modules: ``config`` (:class:`ScanSnapConfig`, ``PRESETS``), ``experiment`` (``run``), ``result``
(:class:`ScanSnapResult`, :class:`WikitextResult`), ``figures``, ``sweep``, ``wikitext``, ``reference``.
"""
