"""Extras that match the imports (issue 15): every third-party module that the installed package
imports — at module level or inside a function — is declared in ``pyproject.toml``, by the core
dependencies or by a runtime extra (never only by ``test``), and what the default
``mobiedit edit --method mobiedit`` runs needs the core dependencies alone."""
from __future__ import annotations

import ast
import functools
import importlib
import importlib.metadata
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tools.import_graph import edges, modules

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

#: import name -> distribution, where they differ (packages_distributions() covers installed ones)
DIST_OF = {"yaml": "pyyaml", "jinja2": "jinja2", "google": "protobuf"}

#: the modules the default edit runs: the method, the session that drives it, the library API
#: the CLI calls (the ``edit --bundle`` branch is the export extra's and is not followed)
DEFAULT_EDIT_ROOTS = ("mobiedit.methods.mobiedit", "mobiedit.session", "mobiedit.api")

#: imports on the default path that need an extra, each guarded by a ConfigError naming the pip
#: command before the import runs (test below); the import -> (extra, module holding the guard)
GUARDED = {"gensim": ("models", "mobiedit.corpora")}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dist_names(reqs: list[str]) -> set[str]:
    return {_norm(re.match(r"[A-Za-z0-9._-]+", r.strip()).group(0)) for r in reqs}


CORE = _dist_names(PYPROJECT["project"]["dependencies"])
EXTRAS = {k: _dist_names(v) for k, v in PYPROJECT["project"]["optional-dependencies"].items()}
RUNTIME_EXTRAS = {k: v for k, v in EXTRAS.items() if k != "test"}


@functools.lru_cache(maxsize=None)
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _dist(top: str) -> str:
    if top in DIST_OF:
        return _norm(DIST_OF[top])
    found = _installed().get(top)
    return _norm(found[0]) if found else _norm(top)


def third_party_imports(files: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> top-level names of the third-party modules it imports (anywhere in its body)."""
    out: dict[str, set[str]] = {}
    for mod, f in files.items():
        names: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        out[mod] = {n for n in names if n not in sys.stdlib_module_names and n != "mobiedit"}
    return out


def closure(graph: dict[str, set[str]], roots) -> set[str]:
    seen, todo = set(), list(roots)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph.get(m, ())
    return seen


MODS = modules()
IMPORTS = third_party_imports(MODS)


def test_the_scan_sees_function_level_imports():
    assert "torchao" in IMPORTS["mobiedit.forward.quant"]  # imported inside quantized_copy
    assert {"torch", "yaml"} & set().union(*IMPORTS.values()) == {"torch", "yaml"}


def test_every_third_party_import_is_declared():
    declared = CORE | set().union(*RUNTIME_EXTRAS.values())
    missing = {m: sorted(t for t in tops if _dist(t) not in declared) for m, tops in IMPORTS.items()}
    assert {m: t for m, t in missing.items() if t} == {}, "declare them in pyproject.toml (core or an extra)"


def test_the_installed_package_never_needs_the_test_extra():
    only_test = EXTRAS["test"] - CORE - set().union(*RUNTIME_EXTRAS.values())
    users = {m: sorted(t for t in tops if _dist(t) in only_test) for m, tops in IMPORTS.items()}
    assert {m: t for m, t in users.items() if t} == {}


def test_the_default_edit_path_needs_only_the_core():
    path = closure(edges(MODS, lazy=True), DEFAULT_EDIT_ROOTS)
    assert {"mobiedit.forward.quant", "mobiedit.zo", "mobiedit.methods.rome"} <= path
    need = {t: sorted(m for m in path if t in IMPORTS[m]) for m in path for t in IMPORTS[m] if _dist(t) not in CORE}
    assert set(need) <= set(GUARDED), need
    for top, users in need.items():
        assert users == [GUARDED[top][1]], (top, users)
        assert _dist(top) in EXTRAS[GUARDED[top][0]]


def test_a_missing_guarded_package_is_a_config_error_naming_the_install(monkeypatch):
    from mobiedit import corpora
    from mobiedit.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(corpora.importlib.util, "find_spec", lambda name, *a: None if name == "gensim" else real(name, *a))
    with pytest.raises(ConfigError) as e:
        corpora.wikipedia_texts()
    assert "pip install gensim" in e.value.fix


def test_the_makefile_installs_existing_extras():
    make = (ROOT / "Makefile").read_text()
    named = set()
    for group in re.findall(r'-e "\.\[([a-z,]+)\]"', make):
        named |= set(group.split(","))
    assert named and named <= set(EXTRAS), (named, sorted(EXTRAS))


def test_every_module_imports_with_all_extras_installed():
    """Here every extra is installed (the Makefile's line): each module imports."""
    for mod in sorted(MODS):
        if not mod.endswith("__main__"):
            importlib.import_module(mod)
