"""The probe suite on pretrained models over real text, beside a random-weight control, its findings, and
the attention of chosen heads on one passage (:mod:`analyses.pretrained.passages`)."""
