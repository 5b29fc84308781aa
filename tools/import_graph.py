"""The import graph of the installed package (``mobiedit`` + ``mobiedit.export``), read with ``ast``.

    python tools/import_graph.py [--lazy] [--json F]

Prints every strongly connected component of more than one module (an import circle), every
module outside the CLI that imports a CLI module, every import that goes up the :data:`LAYERS`
table, and lines per package. Module-level imports only by default; ``--lazy`` adds imports made
inside functions (they are still dependencies, only deferred).
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

#: The dependency direction (issue 15), highest layer first: a module may import modules of its own
#: layer and of the layers below it, never of a layer above. An entry names a module and, when it is
#: a package, everything in it; the most specific entry wins. The root package ``mobiedit`` is
#: matched only by itself, so a new top-level module must be placed here (else it is "unassigned").
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cli", ("mobiedit.cli", "mobiedit.export.cli")),
    # benchmarks and harness verbs: above the library API, which they (should) use
    ("harness", ("mobiedit.bench", "mobiedit.bench_rows", "mobiedit.bench_prefix", "mobiedit.bench_shape",
                 "mobiedit.bench_shape_ort", "mobiedit.bench_report", "mobiedit.demo", "mobiedit.tune", "mobiedit.tune_plot",
                 "mobiedit.sequential", "mobiedit.sequential_rows", "mobiedit.sequential_run",
                 "mobiedit.sequential_interference", "mobiedit.sequential_report", "mobiedit.sequential_plot",
                 "mobiedit.sequential_resume", "mobiedit.sequential_status",
                 "mobiedit.causal_trace_report",
                 "mobiedit.rowlog", "mobiedit.zo.bench_overhead", "mobiedit.export.bench",
                 "mobiedit.export.bench_flags", "mobiedit.export.quality",
                 "mobiedit.export.bench_sequential")),
    ("api", ("mobiedit.api", "mobiedit.resolve")),
    # the edit session; the exporter sits beside it, and so do the fact-LM producer and undo
    ("session", ("mobiedit.session", "mobiedit.batch", "mobiedit.spread", "mobiedit.export", "mobiedit.factlm", "mobiedit.undo")),
    ("methods", ("mobiedit.methods",)),
    # the algorithm: search driver and recipes, graphs, shared ROME-family steps, ZO loop, journal, metrics
    ("core", ("mobiedit.driver", "mobiedit.recipes", "mobiedit.forward", "mobiedit.editing", "mobiedit.zo",
              "mobiedit.journal", "mobiedit.journal_guard", "mobiedit.evaluate", "mobiedit.ability",
              "mobiedit.causal_trace", "mobiedit.known", "mobiedit.stats_corpus",
              "mobiedit.ladder", "mobiedit.journal_entry")),
    # model I/O, families, requests, errors and small utilities
    ("base", ("mobiedit", "mobiedit.errors", "mobiedit.families", "mobiedit.models", "mobiedit.checkpoints",
              "mobiedit.weights_check", "mobiedit.profile", "mobiedit.requests", "mobiedit.prompts",
              "mobiedit.config_io", "mobiedit.corpora", "mobiedit.hooks", "mobiedit.outputs", "mobiedit.atomic",
              "mobiedit.jsonio", "mobiedit.journal_lock", "mobiedit.digest", "mobiedit.paths", "mobiedit.rss",
              "mobiedit.termsafe", "mobiedit.quiet", "mobiedit.head", "mobiedit.quant_io",
              "mobiedit.request_record", "mobiedit.settle")),
)
ROOT_PACKAGE = "mobiedit"


def layer_of(mod: str, layers=LAYERS) -> tuple[int, str] | None:
    """(rank, name) of ``mod``'s layer — rank 0 is the top — or None when no entry covers it."""
    best: tuple[int, int, str] | None = None  # (length of the entry, rank, name)
    for rank, (name, entries) in enumerate(layers):
        for e in entries:
            covers = mod == e or (e != ROOT_PACKAGE and mod.startswith(e + "."))
            if covers and (best is None or len(e) > best[0]):
                best = (len(e), rank, name)
    return None if best is None else (best[1], best[2])


def upward_edges(graph: dict[str, set[str]], layers=LAYERS) -> list[tuple[str, str]]:
    """``(importer, imported)`` for every import of a module in a higher layer than the importer's
    (modules no entry covers are reported by :func:`unassigned`, not here)."""
    out = []
    for mod, targets in graph.items():
        src = layer_of(mod, layers)
        for t in targets:
            dst = layer_of(t, layers)
            if src is not None and dst is not None and dst[0] < src[0]:
                out.append((mod, t))
    return sorted(out)


def unassigned(mods, layers=LAYERS) -> list[str]:
    """Modules of the package that no :data:`LAYERS` entry covers."""
    return sorted(m for m in mods if layer_of(m, layers) is None)


def cli_modules(mods) -> set[str]:
    """The modules of the ``cli`` layer."""
    return {m for m in mods if (layer_of(m) or (None, ""))[1] == "cli"}


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
    cli = cli_modules(mods)
    return {"lazy": lazy, "modules": len(mods), "edges": sum(map(len, graph.values())),
            "cycles": cycles(graph),
            "import_cli": sorted(m for m, ts in graph.items() if ts & cli and m not in cli),
            "upward": [list(e) for e in upward_edges(graph)], "unassigned": unassigned(mods),
            "layers": {m: layer_of(m)[1] for m in sorted(mods) if layer_of(m)},
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
    print("modules outside the CLI importing a CLI module: " + (", ".join(r["import_cli"]) or "none"))
    print(f"upward imports (layers: {' > '.join(name for name, _ in LAYERS)}): {len(r['upward'])}")
    for mod, t in r["upward"]:
        print(f"  {mod} ({r['layers'][mod]}) -> {t} ({r['layers'][t]})")
    print("modules in no layer: " + (", ".join(r["unassigned"]) or "none"))
    print("lines per package:")
    for k, v in r["lines_per_package"].items():
        print(f"  {k:32s} {v:6d}")
    if a.json:
        Path(a.json).write_text(json.dumps(r, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
