"""No import circles among the project's modules, no import back up inside ``analyses``, and importing the packages
raises no DeprecationWarning.

The graph has one node per module of mechprobe/, probes/, toymodels/ and analyses/ and an edge for every import
statement anywhere in a module: at the top, inside functions, and under ``if TYPE_CHECKING:`` (a circle that only
type hints close is still two modules that each need the other). ``from pkg import name`` is an edge to the
submodule ``pkg.name`` when there is one and to ``pkg`` (its ``__init__``) otherwise; relative imports are resolved
against the importing module's package. A strongly connected component of more than one module is a circle.

Inside ``analyses`` the units (each subpackage, each top-level module) sit in the layers of :data:`ANALYSES_LAYERS`,
and a unit imports only from layers below its own: never from its own layer, never from one above.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("mechprobe", "probes", "toymodels", "analyses")
ANALYSES_LAYERS: tuple[tuple[str, ...], ...] = (
    # the toys' records, which every table of toys derives from; a benchmark script's first import (its Ctrl-C guard)
    ("toy_registry", "script_start"),
    # shared pieces that import nothing else of analyses: checks, settings, backends, the papers' tables, files on disk
    ("__init__", "cli_checks", "output_paths", "cli_command", "config_overrides", "plot_backend", "timings",
     "torch_threads", "paper_reference", "toy_findings", "toy_causal", "toy_orders", "curve_series", "lm_data",
     "toy_model_store"),
    ("paper_result", "series_writer"),  # a toy experiment's typed result and summary.json; a series folder's files
    # the probe suite on real text: held-out statistics, findings, measurements, passages
    ("pretrained",),
    ("induction", "scansnap", "topic"),  # the paper toys' experiments
    ("experiments", "toy_model_loader"),  # the toys by name; a toy folder as a model
    # a toy over seeds; checkpoint series; linear probes (over toys and text); edges between heads (toy folders too)
    ("toy_seeds", "dynamics", "linear", "circuit"),
    ("report", "heads", "ablate", "plan"),  # the work of the commands that assemble the rest
    ("commands",),  # the command records of the work above (analyses/commands/<name>.py)
    ("cli",),
    ("entry",),  # the console command: imports cli inside a Ctrl-C guard
)
"""Bottom to top. A new module of ``analyses`` goes in the lowest layer above every unit it imports."""


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages (a package is its ``__init__.py``)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported_modules(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules that ``name`` (at ``path``) imports anywhere in its body."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # `from . import x` in a.b.c (or in package a.b) is relative to a.b; each further dot goes up one.
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = package[: len(package) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                targets.add(submodule if submodule in known else source)
    return {target for target in targets if target in known and target != name}


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    known = set(files)
    return {name: imported_modules(name, path, known) for name, path in files.items()}


def strongly_connected_components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has a few hundred nodes; no recursion limit to mind)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                components.append(sorted(component))
    return components


def cycle_path(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One circle through the component's first module: a shortest path back to it (breadth first)."""
    start, members = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node] & members):
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if successor not in parents:
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"{component} is not strongly connected")


def analyses_unit(module: str) -> str | None:
    """The unit of ``analyses`` a module belongs to: its subpackage (``analyses.report.build`` -> ``report``), a
    top-level module itself (``analyses.cli_checks``), ``__init__`` for the package; None outside ``analyses``."""
    parts = module.split(".")
    if parts[0] != "analyses":
        return None
    return parts[1] if len(parts) > 1 else "__init__"


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import in ``graph`` from a unit of ``analyses`` to another unit in its own layer or a layer above."""
    layer_of = {unit: depth for depth, layer in enumerate(ANALYSES_LAYERS) for unit in layer}
    found = []
    for module, targets in sorted(graph.items()):
        unit = analyses_unit(module)
        if unit not in layer_of:
            continue
        for target in sorted(targets):
            other = analyses_unit(target)
            if other in layer_of and other != unit and layer_of[other] >= layer_of[unit]:
                found.append(f"{module} -> {target}: {unit} (layer {layer_of[unit]}) may import only from layers "
                             f"below it; {other} is in layer {layer_of[other]}")
    return found


def test_the_graph_resolves_relative_and_submodule_imports():
    """The parser is checked on the package itself: real edges it must find (so an empty graph cannot pass)."""
    graph = import_graph()
    assert len(graph) > 100
    assert "probes.core.runner" in graph["probes.core"]  # `from probes.core.runner import ...` in a package
    assert "probes.attention" in graph["probes"]  # `from probes import attention as attention`: a submodule
    assert sum(len(targets) for targets in graph.values()) > 300


def test_the_cycle_finder_finds_a_planted_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    circles = [c for c in strongly_connected_components(graph) if len(c) > 1]
    assert circles == [["a", "b", "c"]]
    assert cycle_path(graph, circles[0]) == ["a", "b", "c", "a"]


def test_no_import_circle():
    graph = import_graph()
    circles = [component for component in strongly_connected_components(graph) if len(component) > 1]
    assert not circles, "import circles (each shown as one path):\n" + "\n".join(
        " -> ".join(cycle_path(graph, component)) + f"   ({len(component)} modules in the component)"
        for component in circles
    )


def test_every_unit_of_analyses_has_one_layer():
    units = {analyses_unit(module) for module in module_files()} - {None}
    placed = [unit for layer in ANALYSES_LAYERS for unit in layer]
    assert len(placed) == len(set(placed)), "a unit is in two layers of ANALYSES_LAYERS"
    assert units - set(placed) == set(), (
        "these units of analyses are in no layer: add each to the lowest layer of ANALYSES_LAYERS "
        "(tests/test_import_graph.py) above every unit it imports")
    assert set(placed) - units == set(), "ANALYSES_LAYERS names units that no longer exist: remove them"


def test_no_import_climbs_back_up_inside_analyses():
    upward = upward_imports(import_graph())
    assert not upward, ("imports back up inside analyses (move the shared piece down to a layer both can import, "
                        "or the importer up):\n" + "\n".join(upward))


def test_the_layer_rule_catches_a_planted_upward_import(tmp_path):
    """Two upward imports planted the ways the real ones were written: a library-like unit importing the report's
    document at the top, and a toy importing the dynamics package from inside a function by a relative import."""
    graph = import_graph()
    planted = {
        "analyses.pretrained.planted": "from analyses.report.document import Section\n",
        "analyses.induction.planted": "def late():\n    from ..dynamics import run\n",
    }
    for module, source in planted.items():
        path = tmp_path / f"{module}.py"
        path.write_text(f'"""Planted."""\n{source}', encoding="utf-8")
        graph[module] = imported_modules(module, path, set(graph))
    assert upward_imports(graph) == [
        "analyses.induction.planted -> analyses.dynamics.run: induction (layer 4) may import only from layers below "
        "it; dynamics is in layer 6",
        "analyses.pretrained.planted -> analyses.report.document: pretrained (layer 3) may import only from layers "
        "below it; report is in layer 7",
    ]


def test_importing_the_packages_warns_nothing():
    """The packages' own imports use only current module paths (old flat paths warn on use, never on import)."""
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", "import probes, toymodels, analyses"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_command_line_starts_without_scipy_stats():
    """Every ``mechprobe`` process imports the command line; ``scipy.stats`` (0.6 s of a 4-5 s start on 2 cores) is
    imported where a Student-t interval is computed, not at start."""
    done = subprocess.run(
        [sys.executable, "-c", "import sys, analyses.cli; print('scipy.stats' in sys.modules)"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "False"
