"""The probe suite on pretrained models over real text, beside a random-weight control, and its findings."""
