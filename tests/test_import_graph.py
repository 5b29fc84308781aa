"""Dependencies run one way (issue 15): no import circles in the installed package — imports made
inside functions included —, nothing imports a CLI module but the CLI, no module imports a module
of a higher layer (``tools/import_graph.py`` ``LAYERS``: cli > harness > api > session > methods >
core > base), and the harnesses are not in the package. ``python tools/import_graph.py --lazy``
prints the same report."""
from __future__ import annotations

from pathlib import Path

from tools.import_graph import LAYERS, cli_modules, edges, layer_of, modules, report, unassigned, upward_edges

#: Upward imports that stay for now, each with the reason; the list may only shrink.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


def test_no_import_circles_even_through_imports_inside_functions():
    assert report(lazy=True)["cycles"] == []


def test_nothing_but_the_cli_imports_the_cli():
    mods = modules()
    cli = cli_modules(mods)
    assert {"mobiedit.cli", "mobiedit.cli.edit", "mobiedit.export.cli"} <= cli
    graph = edges(mods, lazy=True)
    bad = {m: sorted(ts & cli) for m, ts in graph.items() if ts & cli and m not in cli}
    assert bad == {}


def test_every_module_has_a_layer():
    assert unassigned(modules()) == [], "add the module to LAYERS in tools/import_graph.py"


def test_no_module_imports_a_higher_layer():
    up = set(upward_edges(edges(modules(), lazy=True)))
    assert sorted(up - ALLOWED_UPWARD) == [], "an import goes up the LAYERS table"
    assert sorted(ALLOWED_UPWARD - up) == [], "fixed: remove it from ALLOWED_UPWARD"


def test_the_layer_check_reports_an_upward_edge():
    """The checker itself, on a synthetic graph: a session module importing the CLI, a method
    importing the session and a core module importing a method are reported; downward and
    same-layer imports are not."""
    graph = {
        "mobiedit.cli.edit": {"mobiedit.api", "mobiedit.cli._common"},
        "mobiedit.api": {"mobiedit.session"},
        "mobiedit.session": {"mobiedit.methods.rome", "mobiedit.cli"},
        "mobiedit.methods.rome": {"mobiedit.session", "mobiedit.editing.compute_v", "mobiedit.methods.common"},
        "mobiedit.editing.compute_v": {"mobiedit.forward.graph", "mobiedit.methods.mobiedit"},
        "mobiedit.export.pipeline": {"mobiedit.session"},
    }
    assert upward_edges(graph) == [("mobiedit.editing.compute_v", "mobiedit.methods.mobiedit"),
                                   ("mobiedit.methods.rome", "mobiedit.session"),
                                   ("mobiedit.session", "mobiedit.cli")]
    assert layer_of("mobiedit.export.cli")[1] == "cli" and layer_of("mobiedit.export.ops")[1] == "session"
    assert layer_of("mobiedit.bench_prefix")[1] == "harness" and layer_of("mobiedit")[1] == "base"
    assert unassigned(["mobiedit.brand_new", "mobiedit.forward.brand_new"]) == ["mobiedit.brand_new"]
    toy = (("top", ("pkg.a",)), ("bottom", ("pkg.b",)))
    assert upward_edges({"pkg.b.x": {"pkg.a"}, "pkg.a": {"pkg.b.x"}}, toy) == [("pkg.b.x", "pkg.a")]


def test_the_layers_follow_the_design_order():
    names = [name for name, _ in LAYERS]
    assert names == ["cli", "harness", "api", "session", "methods", "core", "base"]


def test_the_core_does_not_reach_the_fact_lm_trainer():
    """The fact LM is one model among others: only the CLI-side modules that build it import it."""
    mods = modules()
    graph = edges(mods, lazy=True)
    users = sorted(m for m, ts in graph.items() if any(t.startswith("mobiedit.factlm") for t in ts)
                   and not m.startswith("mobiedit.factlm") and m not in cli_modules(mods))
    assert set(users) <= {"mobiedit.resolve", "mobiedit.sequential", "mobiedit.bench_shape",
                          "mobiedit.export.bench"}, users


def test_harnesses_live_outside_the_package():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "mobiedit" / "reliability").exists()
    mods = modules()
    assert not [m for m, f in mods.items() if "import hypothesis" in f.read_text() or "from hypothesis" in f.read_text()], \
        "the installed package must not need the test extra's hypothesis"
