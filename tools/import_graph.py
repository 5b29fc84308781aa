"""The import graph of the installed package (``mobiedit`` + ``mobiedit.export``), read with ``ast``.

    python tools/import_graph.py [--lazy] [--json F]

Prints every strongly connected component of more than one module (an import circle), every
module that imports ``mobiedit.cli``, and lines per package. Module-level imports only by default;
``--lazy`` adds imports made inside functions (they are still dependencies, only deferred).
"""
from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"mobiedit": ROOT / "mobiedit", "mobiedit.export": ROOT / "export"}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every .py of the installed package."""
    out = {}
    for pkg, folder in SOURCES.items():
        for f in sorted(folder.rglob("*.py")):
            rel = f.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([pkg, *parts])
            if pkg == "mobiedit" and parts[:1] == ["export"]:
                continue
            out[name] = f
    return out


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def edges(mods: dict[str, Path], lazy: bool) -> dict[str, set[str]]:
    """Module -> modules of the package it imports (``from X import y`` counts ``X.y`` when that is
    a module, else ``X``)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, f in mods.items():
        tree = ast.parse(f.read_text(), str(f))
        nodes = ast.walk(tree) if lazy else [n for n in tree.body] + [
            n for s in tree.body if isinstance(s, (ast.If, ast.Try)) for n in ast.walk(s)]
        for node in nodes:
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(mod, f.name == "__init__.py", node)
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(set(graph) | {w for ws in graph.values() for w in ws}):
        if v not in index:
            visit(v)
    return out


def report(lazy: bool) -> dict:
    mods = modules()
    graph = edges(mods, lazy)
    lines: dict[str, int] = defaultdict(int)
    for mod, f in mods.items():
        pkg = mod if f.name == "__init__.py" else mod.rpartition(".")[0]
        lines[pkg] += len(f.read_text().splitlines())
    return {"lazy": lazy, "modules": len(mods), "edges": sum(map(len, graph.values())),
            "cycles": cycles(graph),
            "import_cli": sorted(m for m, ts in graph.items() if "mobiedit.cli" in ts),
            "lines_per_package": dict(sorted(lines.items()))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lazy", action="store_true", help="count imports inside functions too")
    ap.add_argument("--json", help="write the report here")
    a = ap.parse_args(argv)
    r = report(a.lazy)
    print(f"{r['modules']} modules, {r['edges']} import edges ({'with' if a.lazy else 'without'} imports inside functions)")
    print(f"import circles: {len(r['cycles'])}")
    for c in r["cycles"]:
        print("  " + " <-> ".join(c))
    print("modules importing mobiedit.cli: " + (", ".join(r["import_cli"]) or "none"))
    print("lines per package:")
    for k, v in r["lines_per_package"].items():
        print(f"  {k:32s} {v:6d}")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
