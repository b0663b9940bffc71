"""The layout holds: imports flow one way (mechprobe <- probes, toymodels <- analyses; probes and toymodels never
import each other), modules stay small and say what they hold, and ``import probes`` keeps its public names."""

from __future__ import annotations

import ast
import importlib
import re
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


def test_the_flat_probe_module_names_still_import_with_a_deprecation_warning():
    """Scripts written before the subpackages (``from probes.runner import run_probes``) keep working until 0.3.0,
    warned once per use with the new path; the six flat names that are now functions refuse to import as modules
    and name where the module went."""
    import probes

    for old, new in probes._MOVED_MODULES.items():
        if old in probes._SHADOWED:
            with pytest.raises(ModuleNotFoundError, match=rf"{new}; import that"):
                importlib.import_module(f"probes.{old}")
            assert callable(getattr(probes, old)), old
            continue
        module = importlib.import_module(f"probes.{old}")
        public = importlib.import_module(new)
        name = next(n for n in dir(public) if not n.startswith("_"))
        with pytest.warns(DeprecationWarning, match=rf"removed in mechprobe 0\.3\.0; import {re.escape(new)} instead"):
            assert getattr(module, name) is getattr(public, name)
    with pytest.warns(DeprecationWarning, match="probes.core.runner"):
        from probes.runner import run_probes  # (the form users wrote)
    assert run_probes is importlib.import_module("probes.core.runner").run_probes
    assert {"block_structure", "head_scores", "residual_hooks", "same_token_attention",
                                "scan_order", "topic_attention"} == probes._SHADOWED


def test_each_probes_subpackage_exports_what_probes_exports():
    """``probes.__all__`` is exactly the union of its subpackages' public names (plus the version)."""
    import probes

    union = {name for sub in ("core", "attention", "dynamics", "text", "stats", "linear", "causal")
             for name in importlib.import_module(f"probes.{sub}").__all__}
    assert set(probes.__all__) - {"__version__"} == union
