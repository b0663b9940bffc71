"""The layout holds: imports flow one way (mechprobe <- probes, toymodels <- analyses; probes and toymodels never
import each other), and modules stay small and say what they hold. ``probes``' public names:
``tests/probes/test_public_names.py``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mechprobe", "probes", "toymodels", "analyses")
FORBIDDEN = {"mechprobe": {"probes", "toymodels", "analyses", "tests"},
             "probes": {"toymodels", "analyses", "tests"}, "toymodels": {"probes", "analyses", "tests"},
             "analyses": {"tests"}}
MAX_LINES = 500


def imported_packages(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_flow_one_way(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_packages(path) & FORBIDDEN[package])
        for path in modules(package)
        if imported_packages(path) & FORBIDDEN[package]
    }
    assert offenders == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_500_lines(package):
    long = {str(p.relative_to(ROOT)): n for p in modules(package)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_every_module_opens_by_saying_what_it_holds(package):
    silent = [str(p.relative_to(ROOT)) for p in modules(package)
              if not ast.get_docstring(ast.parse(p.read_text(encoding="utf-8")))]
    assert silent == []


def test_every_document_the_code_and_docs_cite_is_in_the_repository():
    """A page named in the code, the docs or the settings (``ARCHITECTURE.md``, ``RESULTS.md``, ...) exists here: the
    repository's docs depend on nothing outside it."""
    import re
    import subprocess

    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    pages = {Path(name).name for name in tracked if name.endswith(".md")}
    missing = []
    for name in tracked:
        if not name.endswith((".py", ".md", ".toml", ".cfg", ".ipynb")) or not (ROOT / name).is_file():
            continue
        for cited in set(re.findall(r"\b[A-Z][A-Z_]+\.md\b", (ROOT / name).read_text(encoding="utf-8"))):
            if cited not in pages:
                missing.append(f"{name} cites {cited}")
    assert not missing, missing
