"""The headless-browser checks go through :func:`tests.chromium.require_chromium`: without Chromium they skip visibly,
and under ``CI=true`` (where CI installs it) they fail, so a CI image that lost Chromium cannot pass them unseen. A
bare ``skipif(find_chromium() is None)`` would skip there too; no test may use one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import chromium

TESTS = Path(__file__).resolve().parent


def test_no_test_decides_about_chromium_itself():
    users = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("*.py")
                   if path.name != "chromium.py" and path != Path(__file__).resolve()
                   and re.search(r"\bfind_chromium\b", path.read_text(encoding="utf-8")))
    assert users == [], f"call tests.chromium.require_chromium() instead of find_chromium in {users}"


def test_a_missing_chromium_skips_locally_and_fails_under_ci(monkeypatch):
    monkeypatch.setattr(chromium, "find_chromium", lambda: None)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install chromium"):
        chromium.require_chromium()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        chromium.require_chromium()
    monkeypatch.setattr(chromium, "find_chromium", lambda: "/usr/bin/chromium")
    chromium.require_chromium()  # installed: the check runs
