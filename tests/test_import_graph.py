"""Dependencies run one way (issue 15): no import circles in the installed package — imports made
inside functions included —, nothing imports a CLI module but the CLI, the algorithm core never
imports the layers above it, and the harnesses are not in the package. ``python
tools/import_graph.py --lazy`` prints the same report."""
from __future__ import annotations

from pathlib import Path

from tools.import_graph import edges, modules, report

CORE = ("mobiedit.zo", "mobiedit.rome", "mobiedit.forward", "mobiedit.methods", "mobiedit.families",
        "mobiedit.errors", "mobiedit.models", "mobiedit.hooks")
ABOVE_CORE = ("mobiedit.cli", "mobiedit.demo", "mobiedit.bench", "mobiedit.export", "mobiedit.session",
              "mobiedit.factlm", "mobiedit.sequential", "mobiedit.resolve", "mobiedit.api")
CLI = {"mobiedit.cli", "mobiedit.export.cli"}


def test_no_import_circles_even_through_imports_inside_functions():
    assert report(lazy=True)["cycles"] == []


def test_nothing_but_the_cli_imports_the_cli():
    graph = edges(modules(), lazy=True)
    bad = {m: sorted(ts & CLI) for m, ts in graph.items() if ts & CLI and m not in CLI}
    assert bad == {}


def test_the_core_never_imports_upward():
    graph = edges(modules(), lazy=True)
    bad = sorted((m, t) for m, ts in graph.items() if m.startswith(CORE) for t in ts if t.startswith(ABOVE_CORE))
    assert bad == []


def test_the_core_does_not_reach_the_fact_lm_trainer():
    """The fact LM is one model among others: only the CLI-side modules that build it import it."""
    graph = edges(modules(), lazy=True)
    users = sorted(m for m, ts in graph.items() if any(t.startswith("mobiedit.factlm") for t in ts)
                   and not m.startswith("mobiedit.factlm"))
    assert set(users) <= {"mobiedit.cli", "mobiedit.resolve", "mobiedit.sequential", "mobiedit.bench_shape",
                          "mobiedit.export.bench"}, users


def test_harnesses_live_outside_the_package():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "mobiedit" / "reliability").exists()
    mods = modules()
    assert not [m for m, f in mods.items() if "import hypothesis" in f.read_text() or "from hypothesis" in f.read_text()], \
        "the installed package must not need the test extra's hypothesis"
