"""Fuzz target of the bundle-manifest reader (``bundle.manifest``): a valid manifest and its one
file (from ``fuzz_hostile.valid_manifest``) with fields deleted or replaced, a ``files`` entry
replaced, the file rewritten or the manifest text replaced, then read by
:func:`mobiedit.export.bundle.read_manifest` and checked by ``verify_files``. The hostile-number
and deep-nesting manifests are the separate ``bundle.manifest_hostile`` target in ``fuzz_hostile``.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from .fuzz_core import JSON_VALUES, Case, _dumps


def _valid_manifest(folder: Path) -> dict:
    """A complete manifest that ``read_manifest`` + ``verify_files`` accept, with its one file."""
    from .fuzz_hostile import valid_manifest

    return valid_manifest(folder)


def bundle_manifest_case(data, work: Path) -> Case:
    from mobiedit.export.bundle import read_manifest, verify_files

    from mobiedit.errors import BundleError

    folder = work / "bundle"
    folder.mkdir()
    m = _valid_manifest(folder)
    descs = []
    for _ in range(data.draw(st.integers(0, 3), label="n mutations")):
        kind = data.draw(st.sampled_from(["field", "field", "nested", "text", "file"]), label="kind")
        if kind == "field":
            key = data.draw(st.sampled_from(sorted(m) + ["extra"]), label="key")
            if data.draw(st.booleans(), label="delete"):
                m.pop(key, None)
            else:
                m[key] = data.draw(JSON_VALUES | st.integers(-5, 5), label="value")
            descs.append(f"field {key}={_dumps(m.get(key, '<deleted>'))[:60]}")
        elif kind == "nested" and isinstance(m.get("files"), dict) and m["files"]:
            name = data.draw(st.sampled_from(sorted(m["files"])), label="file")
            m["files"][name] = data.draw(JSON_VALUES, label="meta")
            descs.append(f"files.{name}={_dumps(m['files'][name])[:60]}")
        elif kind == "file":
            (folder / "model.pte").write_bytes(data.draw(st.binary(max_size=20), label="bytes"))
            descs.append("model.pte rewritten")
        else:
            descs.append("text")
    text = _dumps(m) if not descs or descs[-1] != "text" else data.draw(st.text(max_size=40), label="text")
    (folder / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")

    def call():
        man = read_manifest(folder)
        verify_files(folder, man)
        return man

    return Case(call, (BundleError,), f"manifest {'; '.join(descs) or 'valid'}"[:300])
