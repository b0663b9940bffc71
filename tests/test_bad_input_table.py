"""The bad-input table in tests/README.md points only at tests that exist, and covers the bad-input tests.

``python tests/test_bad_input_table.py`` prints the pytest node ids the table names, so
``pytest $(python tests/test_bad_input_table.py)`` runs every row's tests.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "tests" / "README.md"
HEADING = "## Bad input tried"
NODE = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
# Files whose every test is a bad-input test: each must appear in some row.
BAD_INPUT_FILES = ("tests/probes/test_bad_input.py", "tests/analyses/test_cli_bad_input.py")


def table_rows() -> list[list[str]]:
    """The cells of each body row of the bad-input table."""
    text = README.read_text(encoding="utf-8")
    assert HEADING in text, f"{README} has no '{HEADING}' section"
    section = text.split(HEADING, 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    assert header == ["input", "where", "error", "tests"], header
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[2:]]


def collected_tests(path: str) -> set[str]:
    """Names of the module-level test functions in ``path`` (what pytest collects there)."""
    tree = ast.parse((ROOT / path).read_text(encoding="utf-8"))
    return {node.name for node in tree.body
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_")}


def node_ids() -> list[str]:
    """Every ``path::test`` the table names, in table order, without repeats."""
    return list(dict.fromkeys(f"{path}::{name}" for row in table_rows() for path, name in NODE.findall(row[3])))


def test_every_row_names_tests_that_exist():
    rows = table_rows()
    assert len(rows) >= 25
    for row in rows:
        assert len(row) == 4, row
        assert NODE.findall(row[3]), f"row {row[0]!r} names no test as `tests/...py::test_name`"
        for path, name in NODE.findall(row[3]):
            assert re.fullmatch(r"test_\w+\.py", Path(path).name), f"pytest does not collect {path}"
            assert (ROOT / path).is_file(), f"row {row[0]!r}: {path} does not exist"
            assert name in collected_tests(path), f"row {row[0]!r}: {path} has no test {name}"


def test_every_bad_input_test_is_in_the_table():
    named = set(node_ids())
    missing = [f"{path}::{name}" for path in BAD_INPUT_FILES for name in sorted(collected_tests(path))
               if f"{path}::{name}" not in named]
    assert not missing, f"bad-input tests missing from the table in tests/README.md: {missing}"


def test_the_node_id_list_has_no_repeats_and_runs_from_the_root():
    ids = node_ids()
    assert len(ids) == len(set(ids)) and all(i.startswith("tests/") for i in ids)


if __name__ == "__main__":
    sys.stdout.write("\n".join(node_ids()) + "\n")
