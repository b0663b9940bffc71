"""Tests that need headless Chromium call :func:`require_chromium` first: without it they skip visibly (the skip
reason says how to install it), and under ``CI=true``, where CI installs it, they fail instead of passing unseen."""

from __future__ import annotations

import os

import pytest

from analyses.report.render_check import find_chromium


def require_chromium() -> None:
    """Skip the calling test when Chromium is missing (fail when the environment says ``CI=true``)."""
    if find_chromium() is not None:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail("Chromium is not installed and CI=true: CI must install it (apt-get install chromium).")
    pytest.skip("Chromium is not installed (apt-get install chromium): the headless-browser checks did not run")
