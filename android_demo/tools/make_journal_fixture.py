"""Regenerate the Python-written journal fixture of the JVM tests (run once, output committed).

Writes app/src/test/resources/fixtures/py_journal/ with mobiedit.journal.Journal itself: two
edits on "model.layers.1.mlp.down_proj" of a llama-family [d_out=4, d_in=6] weight, the second
one undone, plus expected.json (u, w of each edit and the base weight's tensor_sha256), so
JournalInteropTest can check that the app reads what Python writes, bit for bit.
Usage (repo root, project venv): .venv/bin/python android_demo/tools/make_journal_fixture.py
"""
import json
import shutil
from dataclasses import replace
from pathlib import Path

import torch

from mobiedit.journal import Journal, tensor_sha256
from mobiedit.requests import requests_from_cli

OUT = Path(__file__).resolve().parents[1] / "app/src/test/resources/fixtures/py_journal"
MODULE = "model.layers.1.mlp.down_proj"


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    j = Journal.open(OUT)
    expected = {"base_sha256": tensor_sha256(base), "edits": []}
    for subject, prompt, target in (("Danielle Darrieux", "The mother tongue of Danielle Darrieux is", "English"),
                                    ("Toko Yasuda", "{} plays the", "piano")):
        u, w = torch.randn(4, generator=g), torch.randn(6, generator=g)
        req = requests_from_cli(subject, prompt, target)[0]
        e = j.record(req, "mobiedit", "llama", 1, MODULE, u, w, base, metrics={"succeeded": True, "steps": 7},
                     config={"estimator": "fzoo"})
        expected["edits"].append({"id": e.id, "u": u.tolist(), "w": w.tolist()})
    # Undo edit 2 by status only (the model-free part of Journal.undo; there is no model here).
    j._write([j.entry(1), replace(j.entry(2), status="undone")])
    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
