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


def spelled_out_integer_tests(path: Path) -> list[int]:
    """Lines of ``path`` that test "an int, not a bool" by hand: one ``and``/``or`` holding both
    ``isinstance(x, int)`` and ``isinstance(x, bool)`` of the same ``x``."""
    def checked(node: ast.AST, kind: str) -> str | None:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            node = node.operand
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id == kind):
            return ast.dump(node.args[0])
        return None

    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.BoolOp):
            ints = {checked(value, "int") for value in node.values} - {None}
            bools = {checked(value, "bool") for value in node.values} - {None}
            if ints & bools:
                lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("package", PACKAGES)
def test_integer_checks_go_through_validation(package):
    """One integer test: ``mechprobe.validation.is_integer`` (and ``integer``, ``seed``, ... built on it); the
    spelled-out ``isinstance(x, bool) or not isinstance(x, int)`` lives in ``mechprobe/validation.py`` only."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in modules(package) if path.name != "validation.py"
             or path.parent.name != "mechprobe" for line in spelled_out_integer_tests(path)]
    assert not found, f"call mechprobe.validation.is_integer (or integer/seed) instead: {found}"


def test_a_spelled_out_integer_test_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("def f(n):\n    if isinstance(n, bool) or not isinstance(n, int) or n < 1:\n        raise "
                       "ValueError(n)\n    return isinstance(n, int) and not isinstance(n, bool)\n", encoding="utf-8")
    assert spelled_out_integer_tests(planted) == [2, 4]
    assert spelled_out_integer_tests(ROOT / "mechprobe" / "validation.py")  # the one place it is spelled out


TYPE_HINT_READERS = {"get_origin", "get_args", "get_type_hints", "get_annotations"}


def type_hint_walks(path: Path) -> list[int]:
    """Lines of ``path`` that take a type hint apart themselves: a call of ``typing.get_origin``, ``get_args``,
    ``get_type_hints`` or ``inspect.get_annotations`` (by attribute or by a name imported from its module)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in TYPE_HINT_READERS:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and any(alias.name in TYPE_HINT_READERS for alias in node.names):
            lines.append(node.lineno)
    return sorted(lines)


@pytest.mark.parametrize("package", PACKAGES)
def test_type_hints_are_read_in_one_place(package):
    """One reading of annotations: ``mechprobe.type_hints`` (``shape``, ``field_hints``, ``describe``); the JSON
    records and the ``--set`` text overrides both go through it, so neither walks union members, Literal options or
    tuple items of its own."""
    found = [f"{path.relative_to(ROOT)}:{line}" for path in modules(package)
             if path.relative_to(ROOT) != Path("mechprobe", "type_hints.py") for line in type_hint_walks(path)]
    assert not found, f"read the annotation with mechprobe.type_hints (shape, field_hints) instead: {found}"


def test_a_type_hint_walk_of_its_own_is_caught(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("import typing\nfrom typing import get_args\n\n\ndef f(hint, cls):\n"
                       "    return typing.get_origin(hint), get_args(hint), typing.get_type_hints(cls)\n",
                       encoding="utf-8")
    assert type_hint_walks(planted) == [2, 6, 6, 6]
    assert type_hint_walks(ROOT / "mechprobe" / "type_hints.py")  # the one place that reads them
