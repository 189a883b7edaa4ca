"""No import cycle in the package: module A imports B (at the top or inside a function) and B
imports A, directly or through others. Found by reading the sources (ast), not by importing."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py file of the installed packages."""
    mods = {}
    for pkg, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for p in base.rglob("*.py"):
            rel = p.relative_to(base).with_suffix("")
            parts = [pkg] + [x for x in rel.parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join(parts)
            # a folder inside a package dir that is itself another package's dir belongs to that one
            if not any(
                name.startswith(other + ".") or name == other
                for other, f in PACKAGE_DIRS.items()
                if other != pkg and (ROOT / f).is_relative_to(base) and p.is_relative_to(ROOT / f)
            ):
                mods[name] = p
    return mods


def _imports(name: str, path: Path, known: set[str]) -> set[str]:
    is_pkg = path.name == "__init__.py"
    here = name if is_pkg else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            # importing one's own package (its __init__) for a submodule is not a dependency loop
            if t and t != name and not name.startswith(t + "."):
                out.add(t)
    return out


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_is_read_from_every_package():
    mods = _modules()
    for must in (
        "mltcp.cli",
        "mltcp.emulation.topologies",
        "mltcp.emulation.softswitch",
        "mltcp.controlplane.client",
        "mltcp.traffic.transport",
        "mltcp.p4src.names",
    ):
        assert must in mods, must
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    assert "mltcp.emulation.topologies" in graph["mltcp.emulation.runner"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_in_the_package():
    mods = _modules()
    graph = {m: _imports(m, p, set(mods)) for m, p in mods.items()}
    cycles = _cycles(graph)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)
