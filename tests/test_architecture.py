"""The house's rules, read from the code itself: no import cycle among the project's modules,
no import from a lower layer to a higher one as docs/architecture.md draws them, no module over
600 lines, commands only in the CLI package, no new top-level package."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("slurm_arnold", "reservations", "predictor", "site_config", "benchmarks")
#: Where a module over this many lines is asking to be split (the local cluster's launcher and
#: the benchmarks are exempt from the size rule, not from the others).
MAX_LINES = 600
SIZE_EXEMPT = ("site_config/devcluster/", "benchmarks/")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imported(module: str, path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every project module ``module`` names in an import statement, wherever it stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            # ``from a import b`` imports module a.b where there is one, else a.
            targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in known
                       else origin for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target:
                yield target


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules importing it runs. Importing ``a.b.c`` runs the
    ``__init__`` of ``a`` and ``a.b`` too: an edge to each package whose ``__init__`` imports
    anything of ours (one that imports nothing can take no part in a cycle or a layer)."""
    known = _modules()
    direct = {m: set(_imported(m, p, known)) - {m} for m, p in known.items()}
    graph = {}
    for module, targets in direct.items():
        edges = set(targets)
        for target in targets:
            parts = target.split(".")
            for i in range(1, len(parts)):
                parent = ".".join(parts[:i])
                if parent in known and direct[parent] and not module.startswith(parent + "."):
                    edges.add(parent)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def layers() -> dict[str, int]:
    """Module prefix -> layer number, from the table of docs/architecture.md."""
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    out: dict[str, int] = {}
    for line in text.splitlines():
        row = re.match(r"\|\s*(\d+)\s*\|[^|]*\|(.*)\|\s*$", line)
        if row:
            for prefix in re.findall(r"`([\w.]+)`", row.group(2)):
                out[prefix] = int(row.group(1))
    return out


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of the longest prefix of ``module`` the table names."""
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in table:
            return table[".".join(parts[:i])]
    return None


def test_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_cycle_through_a_package_init() -> None:
    # The checker itself: a cycle made only by an __init__'s re-export is one.
    graph = {"p": {"p.a"}, "p.a": {"q"}, "q": {"p"}, "r": set()}
    assert cycles(graph) == [["p", "p.a", "q"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_has_a_layer_and_imports_only_its_own_or_lower_ones() -> None:
    table = layers()
    assert len(set(table.values())) >= 6, "docs/architecture.md lost its layer table"
    graph = import_graph()
    unplaced = sorted(m for m in graph if layer_of(m, table) is None)
    assert not unplaced, f"modules in no layer of docs/architecture.md: {unplaced}"
    upward = sorted(f"{m} (layer {layer_of(m, table)}) imports {t} (layer {layer_of(t, table)})"
                    for m, targets in graph.items() for t in targets
                    if (layer_of(t, table) or 0) < (layer_of(m, table) or 0))
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_the_layer_rule_sees_an_upward_import() -> None:
    table = {"top": 1, "low": 2, "low.special": 1}
    assert layer_of("low.x.y", table) == 2 and layer_of("low.special.z", table) == 1
    assert layer_of("elsewhere", table) is None


@pytest.mark.parametrize("package", ["slurm_arnold", "reservations", "predictor", "site_config"])
def test_no_module_over_600_lines(package: str) -> None:
    long = sorted(f"{p.relative_to(REPO)} ({n} lines)" for p in (REPO / package).rglob("*.py")
                  if not str(p.relative_to(REPO)).startswith(SIZE_EXEMPT)
                  and (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES)
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_commands_live_in_the_cli_package_and_no_new_top_level_package() -> None:
    loose = sorted(str(p.relative_to(REPO)) for package in PACKAGES
                   for p in (REPO / package).rglob("*_cli.py"))
    assert not loose, f"command modules outside slurm_arnold/cli/: {loose}"
    tops = {p.parent.name for p in REPO.glob("*/__init__.py")}
    assert tops <= {*PACKAGES, "tests"}, f"new top-level packages: {sorted(tops - {*PACKAGES})}"
