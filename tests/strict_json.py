"""Every JSON file under a folder parses with a strict parser: no ``NaN`` / ``Infinity`` tokens (they are not JSON)."""

from __future__ import annotations

import json
from pathlib import Path


def _refuse(token: str) -> None:
    raise ValueError(f"{token} is not JSON")


def assert_strict_json_everywhere(folder: Path) -> int:
    """Parse every ``*.json`` under ``folder`` strictly; return how many there were (an error names the file)."""
    paths = sorted(Path(folder).rglob("*.json"))
    for path in paths:
        try:
            json.loads(path.read_text(encoding="utf-8"), parse_constant=_refuse)
        except ValueError as error:
            raise AssertionError(f"{path}: {error}") from None
    return len(paths)
